package checker

import (
	"fmt"
	"sort"
	"strings"
)

// Long-fork anomaly names.
const (
	LongFork               = "long-fork"                // two reads saw two writes in opposite orders
	LongForkAbortedRead    = "longfork-aborted-read"    // a committed read saw a register whose write failed
	LongForkGarbage        = "longfork-garbage"         // a read saw a register nobody wrote, or another value
	LongForkLost           = "longfork-lost-write"      // an acknowledged write missing from a node's final read
	LongForkFailedPresent  = "longfork-failed-present"  // a failed write present in a node's final read
	LongForkFinalDivergent = "longfork-final-divergent" // nodes' final reads differ on an indeterminate write
)

// RegisterWrite is a single-write transaction: register K written once,
// with V.
type RegisterWrite struct {
	ID     int
	Status string // ok, fail or info
	K, V   int
}

// RegisterRead is a read of a group of registers in one snapshot: Keys
// are the registers it read, Seen those it found written (register →
// value).
type RegisterRead struct {
	ID, Node int
	Keys     []int
	Seen     map[int]int
}

// LongForkResult is what CheckLongFork found.
type LongForkResult struct {
	Anomalies []Anomaly
	// Reads counts the committed reads compared, Groups the groups of
	// registers they read, Forks the incompatible pairs of reads.
	Reads, Groups, Forks int
}

// CheckLongFork checks Jepsen's long-fork workload: each register is
// written once, by a transaction of its own, and reads read a whole group
// of registers at once. Every committed read sees a prefix of one order of
// the writes (the total order, under serializability and snapshot
// isolation alike), so the sets of registers the reads of one group saw
// are nested: two reads A and B with A seeing x but not y and B seeing y
// but not x are a long fork (each saw one write without the other: the
// two writes were observed in opposite orders). Only the reads given
// (committed ones) count. A read may not see a register whose write
// failed, or a value nobody wrote. final[node] is the final read of every
// register through that node: every acknowledged write in it, no failed
// one, and the indeterminate ones the same everywhere.
func CheckLongFork(writes []RegisterWrite, reads []RegisterRead, final map[int]map[int]int) LongForkResult {
	var res LongForkResult
	byKey := map[int]RegisterWrite{}
	for _, w := range writes {
		byKey[w.K] = w
	}
	seenOK := func(r RegisterRead, k, v int) bool {
		w, ok := byKey[k]
		switch {
		case !ok || w.V != v:
			res.Anomalies = append(res.Anomalies, Anomaly{LongForkGarbage, []int{r.ID}, fmt.Sprintf("read T%d on node %d saw register %d = %d, which nobody wrote", r.ID, r.Node, k, v)})
			return false
		case w.Status == "fail":
			res.Anomalies = append(res.Anomalies, Anomaly{LongForkAbortedRead, []int{w.ID, r.ID}, fmt.Sprintf("read T%d on node %d saw register %d, written by T%d which failed", r.ID, r.Node, k, w.ID)})
			return false
		}
		return true
	}
	groups := map[string][]RegisterRead{}
	var order []string
	for _, r := range reads {
		for k, v := range r.Seen {
			seenOK(r, k, v)
		}
		keys := append([]int(nil), r.Keys...)
		sort.Ints(keys)
		g := fmt.Sprint(keys)
		if _, ok := groups[g]; !ok {
			order = append(order, g)
		}
		groups[g] = append(groups[g], r)
		res.Reads++
	}
	res.Groups = len(groups)
	for _, g := range order {
		rs := groups[g]
		// Nested sets: sorted by size, each is a subset of every larger one.
		sort.SliceStable(rs, func(i, j int) bool { return len(rs[i].Seen) < len(rs[j].Seen) })
		forks := 0
		var first string
		var firstIDs []int
		for i := range rs {
			for j := i + 1; j < len(rs); j++ {
				a, b := rs[i], rs[j]
				x, onlyA := onlyIn(a.Seen, b.Seen)
				if !onlyA {
					continue // a's writes are all in b's
				}
				y, _ := onlyIn(b.Seen, a.Seen) // b is at least as large: it has one a lacks
				forks++
				if first == "" {
					first = fmt.Sprintf("read T%d on node %d saw register %d but not %d (saw %v); read T%d on node %d saw %d but not %d (saw %v)",
						a.ID, a.Node, x, y, sortedKeys(a.Seen), b.ID, b.Node, y, x, sortedKeys(b.Seen))
					firstIDs = []int{a.ID, b.ID}
				}
			}
		}
		if forks > 0 {
			res.Forks += forks
			res.Anomalies = append(res.Anomalies, Anomaly{LongFork, firstIDs, fmt.Sprintf("registers %s: %d incompatible pairs of reads, e.g. %s", g, forks, first)})
		}
	}

	// The final reads.
	nodes := make([]int, 0, len(final))
	for n := range final {
		nodes = append(nodes, n)
	}
	sort.Ints(nodes)
	for _, n := range nodes {
		var lost, failed, garbage []string
		for _, w := range writes {
			v, present := final[n][w.K]
			switch {
			case w.Status == "ok" && !present:
				lost = append(lost, fmt.Sprint(w.K))
			case w.Status == "fail" && present:
				failed = append(failed, fmt.Sprint(w.K))
			case present && v != w.V:
				garbage = append(garbage, fmt.Sprintf("%d=%d", w.K, v))
			}
		}
		for k := range final[n] {
			if _, ok := byKey[k]; !ok {
				garbage = append(garbage, fmt.Sprintf("%d (nobody wrote it)", k))
			}
		}
		if len(lost) > 0 {
			res.Anomalies = append(res.Anomalies, Anomaly{LongForkLost, nil, fmt.Sprintf("node %d: %d acknowledged writes missing from the final read: registers %v", n, len(lost), head(lost))})
		}
		if len(failed) > 0 {
			res.Anomalies = append(res.Anomalies, Anomaly{LongForkFailedPresent, nil, fmt.Sprintf("node %d: %d failed writes present in the final read: registers %v", n, len(failed), head(failed))})
		}
		if len(garbage) > 0 {
			sort.Strings(garbage)
			res.Anomalies = append(res.Anomalies, Anomaly{LongForkGarbage, nil, fmt.Sprintf("node %d: final read holds values nobody wrote: %v", n, head(garbage))})
		}
	}
	for _, w := range writes {
		var on, off []int
		for _, n := range nodes {
			if _, ok := final[n][w.K]; ok {
				on = append(on, n)
			} else {
				off = append(off, n)
			}
		}
		if w.Status == "info" && len(on) > 0 && len(off) > 0 {
			res.Anomalies = append(res.Anomalies, Anomaly{LongForkFinalDivergent, []int{w.ID}, fmt.Sprintf("register %d (written by T%d, %s) present on nodes %v, absent on %v", w.K, w.ID, w.Status, on, off)})
		}
	}
	return res
}

// onlyIn returns the smallest key of a that b lacks.
func onlyIn(a, b map[int]int) (int, bool) {
	found, best := false, 0
	for k := range a {
		if _, ok := b[k]; !ok && (!found || k < best) {
			found, best = true, k
		}
	}
	return best, found
}

func sortedKeys(m map[int]int) string {
	ks := make([]int, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Ints(ks)
	s := make([]string, len(ks))
	for i, k := range ks {
		s[i] = fmt.Sprint(k)
	}
	return "[" + strings.Join(s, " ") + "]"
}
