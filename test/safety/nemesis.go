package safety

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-db/ordo/test/safety/history"
)

// window is one fault, from its injection to its healing.
type window struct {
	Fault      string
	Node       int // 1-based
	Start, End time.Duration
	Note       string
}

// A fault is injected on node i (0-based), lasts d, and is healed before
// it returns; the note goes to the report.
type fault func(r *run, i int, d time.Duration) string

var nemeses = map[string]fault{
	"kill":             killOrdo,
	"partition":        partition,
	"backend-kill":     killBackend,
	"pause":            pause,
	"postmaster-kill":  killPostmaster,
	"kill-all":         killAll,
	"partition-leader": partition, // on the node aimAtLeader chose
	"partition-ring":   partitionRing,
	"partition-all":    partitionAll,
	"slow-fsync":       slowFsync, // on the leader (aimAtLeader) and the node after it
	"slow-pg-fsync":    slowPGFsync,
}

// aims choose the node of the faults that do not hit a random node: the
// fault receives it as i, the history and the report name it, and the note
// (what the choice was) goes before the fault's own.
var aims = map[string]func(r *run, i int) (int, string){
	"partition-leader": aimAtLeader,
	"slow-fsync":       aimAtLeader,
	"slow-pg-fsync":    aimAtLeader,
}

// nemesisNames lists the nemeses, sorted, for messages.
func nemesisNames() string {
	names := make([]string, 0, len(nemeses))
	for n := range nemeses {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// killOrdo: SIGKILL of node i's ordo process, restarted after d.
func killOrdo(r *run, i int, d time.Duration) string {
	r.nodeLock(i).Lock()
	defer r.nodeLock(i).Unlock()
	r.cluster.Kill(i)
	time.Sleep(d)
	if err := r.cluster.Start(i); err != nil {
		return fmt.Sprintf("restart failed (the supervisor retries): %v", err)
	}
	return "restarted"
}

// partition: every peer link of node i cut both ways for d, then restored.
func partition(r *run, i int, d time.Duration) string {
	r.cluster.Isolate(i)
	time.Sleep(d)
	r.cluster.Heal()
	return "healed"
}

// killBackend: SIGKILL of one client backend of node i's PostgreSQL (its
// postmaster then reinitializes: every connection dies and the unflushed
// WAL tail is lost). The node may exit by design; the supervisor restarts it.
func killBackend(r *run, i int, d time.Duration) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, r.cluster.PGDSN(i))
	if err != nil {
		return fmt.Sprintf("could not connect: %v", err)
	}
	var pid int
	err = conn.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend'
		AND pid <> pg_backend_pid() ORDER BY random() LIMIT 1`).Scan(&pid)
	conn.Close(ctx)
	if err != nil {
		return fmt.Sprintf("no backend to kill: %v", err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Sprintf("kill %d: %v", pid, err)
	}
	time.Sleep(d)
	return fmt.Sprintf("killed backend pid %d", pid)
}

// pause: SIGSTOP of node i's ordo process for d, then SIGCONT. The process
// keeps its sockets and PostgreSQL sessions (with whatever locks and
// prepared transactions they hold) but runs nothing: its peers and clients
// see it hang, not close. It holds the node's lock, so the supervisor
// leaves the node alone; it must never leave the process stopped (it is
// resumed even when the pause could not be confirmed).
func pause(r *run, i int, d time.Duration) string {
	r.nodeLock(i).Lock()
	defer r.nodeLock(i).Unlock()
	defer r.cluster.Resume(i)
	if err := r.cluster.Pause(i); err != nil {
		return fmt.Sprintf("not paused: %v", err)
	}
	time.Sleep(d)
	return "resumed"
}

// killPostmaster: SIGKILL of node i's PostgreSQL server (the postmaster
// and every process it started, as a crash of the server would leave it),
// restarted after d through crash recovery. The ordo process is not
// touched: it may exit by design when it loses its PostgreSQL, and the
// supervisor then restarts it (failing, with a backoff, until PostgreSQL
// is back). It must never leave the server down: if the restart fails,
// healAll restarts it before the final checks.
func killPostmaster(r *run, i int, d time.Duration) string {
	r.cluster.KillPG(i)
	time.Sleep(d)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.cluster.RestartPG(ctx, i); err != nil {
		return fmt.Sprintf("PostgreSQL restart failed (healing retries): %v", err)
	}
	return "PostgreSQL restarted"
}

// killAll: SIGKILL of every ordo process at once, all restarted after d,
// in parallel (a node waits for a quorum before it serves, so one started
// alone would time out). It holds every node's lock for the whole fault so
// the supervisor starts none of them early; PostgreSQL is left running.
func killAll(r *run, _ int, d time.Duration) string {
	n := r.cluster.N()
	for k := 0; k < n; k++ {
		r.nodeLock(k).Lock()
		defer r.nodeLock(k).Unlock()
	}
	var wg sync.WaitGroup
	for k := 0; k < n; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.cluster.Kill(k)
		}()
	}
	wg.Wait()
	time.Sleep(d)
	errs := make([]error, n)
	for k := 0; k < n; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[k] = r.cluster.Start(k)
		}()
	}
	wg.Wait()
	var failed []string
	for k, err := range errs {
		if err != nil {
			failed = append(failed, fmt.Sprintf("node %d: %s", k+1, summary(err)))
		}
	}
	if len(failed) > 0 {
		return fmt.Sprintf("every node killed; restart failed (the supervisor retries): %s", strings.Join(failed, "; "))
	}
	return "every node killed and restarted"
}

// aimAtLeader makes partition-leader isolate the current Raft leader
// (from the nodes' /metrics), node i when none is found within 5 s: the
// others must elect a new leader and go on, and the old one must not
// commit anything alone.
func aimAtLeader(r *run, i int) (int, string) {
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		leader, term := r.cluster.Leader()
		if leader >= 0 {
			return leader, fmt.Sprintf("the leader (term %g)", term)
		}
		if time.Now().After(deadline) {
			return i, "no leader found within 5 s: a random node"
		}
	}
}

// partitionRing: the link between node i and node i+1 (mod 3) cut both
// ways for d, then restored (Jepsen's "majorities ring" on 3 nodes): each
// of the two still reaches a majority through the third, which reaches
// both; Raft leadership may move or flap, and everything must go on. It
// must never cut more than that one pair.
func partitionRing(r *run, i int, d time.Duration) string {
	j := (i + 1) % r.cluster.N()
	r.cluster.Cut(i, j)
	time.Sleep(d)
	r.cluster.Heal()
	return fmt.Sprintf("nodes %d and %d cut apart; healed", i+1, j+1)
}

// partitionAll: every node cut off from every other for d, then healed: no
// majority anywhere, so nothing can commit; clients must get errors or
// indeterminate outcomes, never a wrong answer, and the cluster must
// recover after healing. It ignores i.
func partitionAll(r *run, _ int, d time.Duration) string {
	r.cluster.IsolateAll()
	time.Sleep(d)
	r.cluster.Heal()
	return "every node isolated; healed"
}

// slowSyncDelay is what slow-fsync adds to each fsync of the Raft log:
// commits wait for two of them, past the nodes' propose_timeout (3 s) when
// one batch waits behind another, so some outcomes become unknown.
const slowSyncDelay = 2 * time.Second

// slowFsync: every fsync of the Raft log of node i and of the node after
// it takes slowSyncDelay longer for d (a majority, so every commit waits
// for a slow disk), then back to normal. PostgreSQL's own fsync is
// slow-pg-fsync's.
func slowFsync(r *run, i int, d time.Duration) string {
	return slowTwo(r, i, d, r.cluster.SlowSync, slowSyncDelay, "Raft log fsyncs")
}

// slowPGSyncDelay is what slow-pg-fsync adds to each fsync and fdatasync
// of PostgreSQL: every commit, local or applied, waits for one.
const slowPGSyncDelay = 300 * time.Millisecond

// slowPGFsync: every fsync of the PostgreSQL servers of node i and of the
// node after it takes slowPGSyncDelay longer for d, then back to normal.
// The cluster runs PostgreSQL with fsync on and a preloaded library that
// adds the delay (proccluster.Options.SlowPGSync) when this nemesis is
// among a run's.
func slowPGFsync(r *run, i int, d time.Duration) string {
	return slowTwo(r, i, d, r.cluster.SlowPGSync, slowPGSyncDelay, "PostgreSQL fsyncs")
}

// slowTwo slows what of node i and of the node after it by delay (set)
// for d, then restores it.
func slowTwo(r *run, i int, d time.Duration, set func(int, time.Duration) error, delay time.Duration, what string) string {
	j := (i + 1) % r.cluster.N()
	for _, k := range []int{i, j} {
		if err := set(k, delay); err != nil {
			return fmt.Sprintf("could not slow node %d's %s: %v", k+1, what, err)
		}
	}
	time.Sleep(d)
	for _, k := range []int{i, j} {
		if err := set(k, 0); err != nil {
			return fmt.Sprintf("could not restore node %d's %s: %v", k+1, what, err)
		}
	}
	return fmt.Sprintf("%s of nodes %d and %d slowed by %s; restored", what, i+1, j+1, delay)
}

// summary is the first line of a start error and, when it goes on with
// the node's log tail, the last line of that (the reason the process gave).
func summary(err error) string {
	s := strings.TrimSpace(err.Error())
	first, rest, ok := strings.Cut(s, "\n")
	if !ok {
		return first
	}
	return first + " … " + rest[strings.LastIndexByte(rest, '\n')+1:]
}

func (r *run) nodeLock(i int) *nodeMutex {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.nodeMu == nil {
		r.nodeMu = map[int]*nodeMutex{}
	}
	if r.nodeMu[i] == nil {
		r.nodeMu[i] = &nodeMutex{}
	}
	return r.nodeMu[i]
}

// nemesis injects the configured faults in turn, each on a random node,
// until end (a time since the start of the history).
func (r *run) nemesis(end time.Duration) {
	if len(r.cfg.Nemeses) == 0 {
		return
	}
	rng := rand.New(rand.NewPCG(r.seed, 7))
	time.Sleep(2 * time.Second) // a fault-free start
	for k := 0; r.rec.Since()+r.cfg.FaultTime+time.Second < end; k++ {
		name := r.cfg.Nemeses[k%len(r.cfg.Nemeses)]
		i := rng.IntN(r.cluster.N())
		if r.cfg.FaultNode > 0 {
			i = r.cfg.FaultNode - 1
		}
		aimed := ""
		if aim := aims[name]; aim != nil {
			i, aimed = aim(r, i)
		}
		r.rec.Record(history.Info, history.NemesisProcess, i+1, "nemesis", map[string]string{"fault": name, "phase": "start"}, "")
		r.logf("%.1fs: %s node %d", r.rec.Since().Seconds(), name, i+1)
		w := window{Fault: name, Node: i + 1, Start: r.rec.Since()}
		w.Note = nemeses[name](r, i, r.cfg.FaultTime)
		if aimed != "" {
			w.Note = aimed + "; " + w.Note
		}
		w.End = r.rec.Since()
		r.rec.Record(history.Info, history.NemesisProcess, i+1, "nemesis", map[string]string{"fault": name, "phase": "end", "note": w.Note}, "")
		r.mu.Lock()
		r.windows = append(r.windows, w)
		r.mu.Unlock()
		time.Sleep(r.cfg.QuietTime)
	}
}

// supervise restarts any ordo process that exited on its own, as a
// supervisor (systemd, Kubernetes) would, until stop is closed. A paused
// (SIGSTOPped) process has not exited. After a start that failed (its
// PostgreSQL is down, say) the next attempt waits, 1 s, then 2 s, up to
// supervisorMaxBackoff, so a node that cannot start does not spin; a
// start that succeeds resets the wait.
func (r *run) supervise(stop <-chan struct{}) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	failures := make([]int, r.cluster.N())
	next := make([]time.Time, r.cluster.N())
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		for i := 0; i < r.cluster.N(); i++ {
			if time.Now().Before(next[i]) {
				continue
			}
			l := r.nodeLock(i)
			if !l.TryLock() {
				continue // the nemesis holds it down
			}
			if r.cluster.Exited(i) {
				r.cluster.Kill(i) // reap
				if failures[i] == 0 {
					r.note("supervisor: node %d exited on its own; restarting it. Log tail:\n        %s", i+1, indent(tailOf(r, i)))
				}
				r.rec.Record(history.Info, history.NemesisProcess, i+1, "supervisor", map[string]string{"action": "restart"}, "")
				if err := r.cluster.Start(i); err != nil {
					failures[i]++
					wait := min(time.Second<<(failures[i]-1), supervisorMaxBackoff)
					next[i] = time.Now().Add(wait)
					r.note("supervisor: node %d did not start, attempt %d (next in %s): %s", i+1, failures[i], wait, summary(err))
				} else {
					if failures[i] > 0 {
						r.note("supervisor: node %d started after %d failed attempts", i+1, failures[i])
					}
					failures[i] = 0
				}
			} else {
				failures[i] = 0 // running: started by the nemesis or healing
			}
			l.Unlock()
		}
	}
}

// supervisorMaxBackoff bounds the supervisor's wait between failed starts.
const supervisorMaxBackoff = 4 * time.Second
