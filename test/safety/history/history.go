package history

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"
)

// Event types.
const (
	Invoke = "invoke"
	OK     = "ok"
	Fail   = "fail"
	Info   = "info"
)

// NemesisProcess is the process of nemesis events.
const NemesisProcess = -1

// ResolverProcess is the process of the events that record what the
// outcome check (`_ordo.txn_status`) answered for an indeterminate
// operation after the run (F "resolve", Value a Resolution).
const ResolverProcess = -2

// Outcomes the outcome check answers.
const (
	Committed = "committed"
	Aborted   = "aborted"
	Unknown   = "unknown"
)

// Resolution is the value of a resolve event: the outcome the cluster
// answered for the operation whose completion event is Index.
type Resolution struct {
	Index   int    `json:"index"`
	Label   string `json:"label"`
	Outcome string `json:"outcome"`
}

// Event is one line of a history.
type Event struct {
	Index   int    `json:"index"`
	Type    string `json:"type"`
	Process int    `json:"process"`
	// Node is the node (1-based) the operation used; 0 for none.
	Node int    `json:"node"`
	F    string `json:"f"`
	// Value is the operation's argument on invoke and its result on
	// completion (a read's values).
	Value json.RawMessage `json:"value,omitempty"`
	// Time since the start of the run.
	Time  time.Duration `json:"time"`
	Error string        `json:"error,omitempty"`
	// Label is the transaction label (ordo.txn_label) an invocation gave
	// its update transaction, so its outcome can be asked for later.
	Label string `json:"label,omitempty"`
}

// Op is one completed operation: its invocation and its completion.
type Op struct {
	Process, Node int
	F             string
	Type          string // ok, fail or info
	Invoke        time.Duration
	Complete      time.Duration
	// Value is the completion's value (or, if it has none, the invocation's).
	Value json.RawMessage
	Error string
	// Index is the completion event's index.
	Index int
	// Label is the invocation's transaction label; Outcome what the
	// outcome check answered for it, if the operation was indeterminate
	// and was asked about (Committed, Aborted or Unknown). Pair turns an
	// info operation resolved as aborted into a fail; one resolved as
	// committed stays info (what it read is unknown), and checkers that
	// can use Outcome do.
	Label, Outcome string
}

// Recorder appends events to a file and keeps them in memory.
type Recorder struct {
	mu     sync.Mutex
	start  time.Time
	f      *os.File
	w      *bufio.Writer
	events []Event
	err    error
}

// Create starts a history in path.
func Create(path string) (*Recorder, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return &Recorder{start: time.Now(), f: f, w: bufio.NewWriter(f)}, nil
}

// Since is the time since the start of the history.
func (r *Recorder) Since() time.Duration { return time.Since(r.start) }

// Record appends an event (its Index and Time are set here) and returns it.
func (r *Recorder) Record(typ string, process, node int, f string, value any, errText string) Event {
	return r.add(typ, process, node, f, value, errText, "")
}

func (r *Recorder) add(typ string, process, node int, f string, value any, errText, label string) Event {
	var raw json.RawMessage
	if value != nil {
		b, err := json.Marshal(value)
		if err != nil {
			b, _ = json.Marshal(fmt.Sprint(value))
		}
		raw = b
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e := Event{Index: len(r.events), Type: typ, Process: process, Node: node, F: f, Value: raw, Time: time.Since(r.start), Error: errText, Label: label}
	r.events = append(r.events, e)
	b, _ := json.Marshal(e)
	if _, err := r.w.Write(append(b, '\n')); err != nil && r.err == nil {
		r.err = err
	}
	return e
}

// Invoke records the invocation of an operation whose update
// transaction carries label (see Event.Label).
func (r *Recorder) Invoke(process, node int, f string, value any, label string) Event {
	return r.add(Invoke, process, node, f, value, "", label)
}

// Events returns a copy of the events recorded so far.
func (r *Recorder) Events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}

// Close flushes and closes the file.
func (r *Recorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.w.Flush(); err != nil && r.err == nil {
		r.err = err
	}
	if err := r.f.Close(); err != nil && r.err == nil {
		r.err = err
	}
	return r.err
}

// Load reads a history file.
func Load(path string) ([]Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var events []Event
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("history: line %d: %w", len(events)+1, err)
		}
		events = append(events, e)
	}
	return events, sc.Err()
}

// Pair joins each completion with its process' pending invocation and
// returns the completed operations of the processes ≥ 0 in completion
// order, and the invocations never completed (as info operations).
//
// Resolve events (process ResolverProcess) set the Outcome of the
// operation they name; an info operation resolved as aborted becomes a
// fail.
func Pair(events []Event) []Op {
	outcome := map[int]string{}
	for _, e := range events {
		if e.Process == ResolverProcess && e.F == "resolve" {
			var res Resolution
			if json.Unmarshal(e.Value, &res) == nil {
				outcome[res.Index] = res.Outcome
			}
		}
	}
	pending := map[int]Event{}
	var ops []Op
	for _, e := range events {
		if e.Process < 0 {
			continue
		}
		if e.Type == Invoke {
			pending[e.Process] = e
			continue
		}
		inv, ok := pending[e.Process]
		if !ok {
			continue
		}
		delete(pending, e.Process)
		v := e.Value
		if len(v) == 0 {
			v = inv.Value
		}
		op := Op{Process: e.Process, Node: e.Node, F: e.F, Type: e.Type, Invoke: inv.Time, Complete: e.Time, Value: v, Error: e.Error, Index: e.Index,
			Label: inv.Label, Outcome: outcome[e.Index]}
		if op.Type == Info && op.Outcome == Aborted {
			op.Type = Fail
			op.Error += " (the outcome check answered aborted)"
		}
		ops = append(ops, op)
	}
	for _, inv := range pending {
		ops = append(ops, Op{Process: inv.Process, Node: inv.Node, F: inv.F, Type: Info, Invoke: inv.Time, Complete: -1, Value: inv.Value, Error: "never completed", Index: inv.Index, Label: inv.Label})
	}
	return ops
}
