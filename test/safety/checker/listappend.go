package checker

import (
	"fmt"
	"slices"
	"sort"
)

// Anomaly names.
const (
	G0                = "G0"       // write cycle (ww only)
	G1a               = "G1a"      // aborted read: a committed txn read a failed txn's append
	G1b               = "G1b"      // intermediate read: a read ended on a non-final append of another txn
	G1c               = "G1c"      // circular information flow (ww and wr, at least one wr)
	GSingle           = "G-single" // a cycle with exactly one rw edge (read skew)
	G2Item            = "G2-item"  // a cycle with two or more rw edges (write skew)
	LostUpdate        = "lost-update"
	IncompatibleOrder = "incompatible-order" // two reads of a key, neither a prefix of the other
	Duplicate         = "duplicate"          // a value twice in one read
	GarbageRead       = "garbage-read"       // a value nobody appended
	Internal          = "internal"           // a read that does not show the txn's own earlier appends
)

// Allowed returns the anomalies a protocol's promise permits: none under
// dbsm, pgr and cons (1-copy serializable), G2-item under dbsm-si (1-copy
// snapshot isolation), and under dbsm-rc (READ COMMITTED, no update lost
// across nodes) the cycles with anti-dependencies, G-single and G2-item,
// and lost-update as this checker names it (two transactions read one
// version of a key and both appended): a statement sees what committed
// before it started, and an UPDATE that waited for a row lock appends to
// the version committed meanwhile, so a transaction's reads need not
// agree with one snapshot. An acknowledged append missing from the final
// reads (CheckFinalReads) stays forbidden, as do G0, G1a, G1b, G1c and
// diverging reads, under every protocol.
func Allowed(protocol string) map[string]bool {
	switch protocol {
	case "dbsm-si":
		return map[string]bool{G2Item: true}
	case "dbsm-rc":
		return map[string]bool{GSingle: true, G2Item: true, LostUpdate: true}
	}
	return map[string]bool{}
}

// MOp is a micro-operation of a list-append transaction: append V to key K,
// or read key K (R is the list read; nil or empty both mean empty).
type MOp struct {
	F string `json:"f"` // "append" or "r"
	K int    `json:"k"`
	V int    `json:"v,omitempty"`
	R []int  `json:"r,omitempty"`
}

// Txn is a completed list-append transaction.
type Txn struct {
	ID     int    // unique; the history's completion index
	Status string // "ok", "fail" or "info"
	// Outcome is what the outcome check answered for an info
	// transaction ("committed" counts it as committed), if asked.
	Outcome string
	Ops     []MOp
	Node    int
}

// acknowledged reports whether t committed by its own completion or by
// the outcome check's answer.
func (t *Txn) acknowledged() bool {
	return t.Status == "ok" || (t.Status == "info" && t.Outcome == "committed")
}

// Anomaly is one violation found in a history.
type Anomaly struct {
	Kind string
	Txns []int
	Text string
}

func (a Anomaly) String() string { return a.Kind + ": " + a.Text }

// ListAppendResult is what CheckListAppend found.
type ListAppendResult struct {
	Anomalies []Anomaly
	// Committed counts the transactions in the graph (ok, and info ones
	// whose appends were read); Edges the graph's edges.
	Committed, Edges int
	// InfoCommitted and InfoUnknown count indeterminate transactions
	// resolved as committed (by the outcome check, or because an append
	// of theirs was read) or not.
	InfoCommitted, InfoUnknown int
}

// Kinds returns the distinct anomaly kinds found, sorted.
func (r ListAppendResult) Kinds() []string {
	seen := map[string]bool{}
	for _, a := range r.Anomalies {
		seen[a.Kind] = true
	}
	var ks []string
	for k := range seen {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// Forbidden returns the anomalies the protocol does not allow.
func (r ListAppendResult) Forbidden(protocol string) []Anomaly {
	allowed := Allowed(protocol)
	var out []Anomaly
	for _, a := range r.Anomalies {
		if !allowed[a.Kind] {
			out = append(out, a)
		}
	}
	return out
}

type kv struct{ k, v int }

// CheckListAppend checks list-append transactions. Every appended value
// must be unique per key. Reads of ok transactions are trusted; fail and
// info transactions' reads are ignored.
func CheckListAppend(txns []Txn) ListAppendResult {
	var res ListAppendResult
	byID := map[int]*Txn{}
	writer := map[kv]int{}
	// lastAppend[txn][k] is the txn's final append to k.
	lastAppend := map[int]map[int]int{}
	for i := range txns {
		t := &txns[i]
		byID[t.ID] = t
		for _, op := range t.Ops {
			if op.F != "append" {
				continue
			}
			if w, dup := writer[kv{op.K, op.V}]; dup && w != t.ID {
				res.Anomalies = append(res.Anomalies, Anomaly{Duplicate, []int{w, t.ID}, fmt.Sprintf("value %d appended to key %d by T%d and T%d", op.V, op.K, w, t.ID)})
			}
			writer[kv{op.K, op.V}] = t.ID
			if lastAppend[t.ID] == nil {
				lastAppend[t.ID] = map[int]int{}
			}
			lastAppend[t.ID][op.K] = op.V
		}
	}

	// External reads (what a txn saw of others, its own appends stripped)
	// and every full read, of ok txns.
	type read struct {
		txn, k int
		vals   []int
	}
	var full, external []read
	for i := range txns {
		t := &txns[i]
		if t.Status != "ok" {
			continue
		}
		own := map[int][]int{}
		seen := map[int]bool{}
		for _, op := range t.Ops {
			switch op.F {
			case "append":
				own[op.K] = append(own[op.K], op.V)
			case "r":
				full = append(full, read{t.ID, op.K, op.R})
				ext := op.R
				if mine := own[op.K]; len(mine) > 0 {
					if len(op.R) < len(mine) || !slices.Equal(op.R[len(op.R)-len(mine):], mine) {
						res.Anomalies = append(res.Anomalies, Anomaly{Internal, []int{t.ID}, fmt.Sprintf("T%d appended %v to key %d, then read %v", t.ID, mine, op.K, op.R)})
						continue
					}
					ext = op.R[:len(op.R)-len(mine)]
				}
				if !seen[op.K] {
					seen[op.K] = true
					external = append(external, read{t.ID, op.K, ext})
				}
			}
		}
	}

	// Version order: the longest read of each key; every other read must
	// be a prefix of it.
	order := map[int][]int{}
	longest := map[int]int{}
	for _, r := range full {
		if len(r.vals) > len(order[r.k]) || order[r.k] == nil {
			order[r.k], longest[r.k] = r.vals, r.txn
		}
	}
	committed := map[int]bool{}
	for i := range txns {
		if t := &txns[i]; t.acknowledged() {
			committed[t.ID] = true
			if t.Status == "info" {
				res.InfoCommitted++
			}
		}
	}
	for _, r := range full {
		o := order[r.k]
		if len(r.vals) > len(o) || !slices.Equal(o[:len(r.vals)], r.vals) {
			res.Anomalies = append(res.Anomalies, Anomaly{IncompatibleOrder, []int{r.txn, longest[r.k]}, fmt.Sprintf("key %d: T%d read %v, T%d read %v", r.k, r.txn, r.vals, longest[r.k], o)})
		}
		dup := map[int]bool{}
		for _, v := range r.vals {
			if dup[v] {
				res.Anomalies = append(res.Anomalies, Anomaly{Duplicate, []int{r.txn}, fmt.Sprintf("key %d: T%d read %d twice: %v", r.k, r.txn, v, r.vals)})
			}
			dup[v] = true
			w, ok := writer[kv{r.k, v}]
			switch {
			case !ok:
				res.Anomalies = append(res.Anomalies, Anomaly{GarbageRead, []int{r.txn}, fmt.Sprintf("key %d: T%d read %d, which nobody appended", r.k, r.txn, v)})
			case byID[w].Status == "fail" && w != r.txn:
				res.Anomalies = append(res.Anomalies, Anomaly{G1a, []int{w, r.txn}, fmt.Sprintf("key %d: T%d read %d, appended by T%d which failed", r.k, r.txn, v, w)})
			case byID[w].Status == "info" && !committed[w]:
				committed[w] = true
				res.InfoCommitted++
			}
		}
	}
	for _, t := range txns {
		if t.Status == "info" && !committed[t.ID] && len(lastAppend[t.ID]) > 0 {
			res.InfoUnknown++
		}
	}

	// G1b: an external read ending on another txn's non-final append.
	for _, r := range external {
		if len(r.vals) == 0 {
			continue
		}
		v := r.vals[len(r.vals)-1]
		if w, ok := writer[kv{r.k, v}]; ok && w != r.txn && lastAppend[w][r.k] != v {
			res.Anomalies = append(res.Anomalies, Anomaly{G1b, []int{w, r.txn}, fmt.Sprintf("key %d: T%d read %v, ending on %d, an intermediate append of T%d (its last was %d)", r.k, r.txn, r.vals, v, w, lastAppend[w][r.k])})
		}
	}

	// The dependency graph of committed txns.
	g := newGraph()
	for t := range committed {
		g.out[t] = map[int]uint8{}
	}
	in := func(id int) bool { return committed[id] }
	for k, o := range order {
		for i := 0; i+1 < len(o); i++ {
			a, b := writer[kv{k, o[i]}], writer[kv{k, o[i+1]}]
			if in(a) && in(b) {
				g.add(a, b, WW)
			}
		}
	}
	// readAt[k][p]: committed txns whose external read of k had length p
	// and which append to k (lost-update candidates).
	readAt := map[int]map[int][]int{}
	for _, r := range external {
		o := order[r.k]
		if len(r.vals) > len(o) || !slices.Equal(o[:len(r.vals)], r.vals) {
			continue // reported as incompatible-order
		}
		if n := len(r.vals); n > 0 {
			if w := writer[kv{r.k, r.vals[n-1]}]; in(w) {
				g.add(w, r.txn, WR)
			}
		}
		if n := len(r.vals); n < len(o) {
			if w := writer[kv{r.k, o[n]}]; in(w) {
				g.add(r.txn, w, RW)
			}
		}
		if _, appends := lastAppend[r.txn][r.k]; appends {
			if readAt[r.k] == nil {
				readAt[r.k] = map[int][]int{}
			}
			readAt[r.k][len(r.vals)] = append(readAt[r.k][len(r.vals)], r.txn)
		}
	}
	for k, byLen := range readAt {
		for p, ts := range byLen {
			if len(ts) > 1 {
				sort.Ints(ts)
				res.Anomalies = append(res.Anomalies, Anomaly{LostUpdate, ts, fmt.Sprintf("key %d: %s all read it at length %d and all appended to it", k, names(ts), p)})
			}
		}
	}
	res.Committed = len(committed)
	for _, m := range g.out {
		res.Edges += len(m)
	}

	// Cycles: in each SCC, the worst cycle first.
	name := func(id int) string { return fmt.Sprintf("T%d", id) }
	for _, comp := range g.sccs(nil, WW|WR|RW) {
		s := set(comp)
		if c := g.cycle(s, WW); c != nil {
			text, _ := g.describe(c, WW, name)
			res.Anomalies = append(res.Anomalies, Anomaly{G0, c[:len(c)-1], text})
			continue
		}
		if c := g.cycle(s, WW|WR); c != nil {
			text, _ := g.describe(c, WW|WR, name)
			res.Anomalies = append(res.Anomalies, Anomaly{G1c, c[:len(c)-1], text})
			continue
		}
		if c := gSingle(g, comp, s); c != nil {
			text, _ := g.describe(c, WW|WR|RW, name)
			res.Anomalies = append(res.Anomalies, Anomaly{GSingle, c[:len(c)-1], text})
			continue
		}
		if c := g.cycle(s, WW|WR|RW); c != nil {
			text, _ := g.describe(c, WW|WR|RW, name)
			res.Anomalies = append(res.Anomalies, Anomaly{G2Item, c[:len(c)-1], text})
		}
	}
	return res
}

// gSingle finds a cycle of exactly one rw edge a→b closed by a ww/wr path
// from b back to a.
func gSingle(g *graph, comp []int, s map[int]bool) []int {
	for _, a := range comp {
		for _, b := range g.succ(a, RW, s) {
			if g.out[a][b]&(WW|WR) != 0 {
				continue // that edge is not only rw
			}
			if p := g.path(b, a, WW|WR, s); p != nil {
				return append([]int{a}, p...)
			}
		}
	}
	return nil
}

func names(ids []int) string {
	s := ""
	for i, id := range ids {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("T%d", id)
	}
	return s
}

// LostAppend names an acknowledged append missing from the final state,
// FinalDivergent final reads that differ between nodes.
const (
	LostAppend     = "lost-append"
	FinalDivergent = "final-divergent"
)

// CheckFinalReads checks the final reads (txns whose ID is in final, one
// through every node after everything else completed): they must agree
// on every key, and every append of an ok txn must be in them.
func CheckFinalReads(txns []Txn, final map[int]bool) []Anomaly {
	var out []Anomaly
	state := map[int][]int{}
	from := map[int]int{}
	for _, t := range txns {
		if !final[t.ID] || t.Status != "ok" {
			continue
		}
		for _, op := range t.Ops {
			if op.F != "r" {
				continue
			}
			if prev, ok := state[op.K]; ok && !slices.Equal(prev, op.R) {
				out = append(out, Anomaly{FinalDivergent, []int{from[op.K], t.ID}, fmt.Sprintf("key %d: final read T%d (node %d) saw %v, T%d saw %v", op.K, t.ID, t.Node, op.R, from[op.K], prev)})
				continue
			}
			state[op.K], from[op.K] = op.R, t.ID
		}
	}
	if len(state) == 0 {
		return out
	}
	present := map[kv]bool{}
	for k, vs := range state {
		for _, v := range vs {
			present[kv{k, v}] = true
		}
	}
	for i := range txns {
		t := &txns[i]
		if !t.acknowledged() || final[t.ID] {
			continue
		}
		how := "acknowledged"
		if t.Status != "ok" {
			how = "indeterminate (the outcome check answered committed)"
		}
		for _, op := range t.Ops {
			if _, read := state[op.K]; op.F == "append" && read && !present[kv{op.K, op.V}] {
				out = append(out, Anomaly{LostAppend, []int{t.ID}, fmt.Sprintf("key %d: T%d's %s append of %d is not in the final state %v", op.K, t.ID, how, op.V, state[op.K])})
			}
		}
	}
	return out
}
