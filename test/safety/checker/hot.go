package checker

import (
	"fmt"
	"sort"
)

// Hot-key anomaly names.
const (
	HotLostUpdate     = "hot-lost-update"     // two acknowledged increments wrote the same value
	HotLostIncrement  = "hot-lost-increment"  // an acknowledged increment's value is above the final one
	HotUnexplained    = "hot-unexplained"     // a final counter value no acknowledged or indeterminate increment wrote
	HotReadRange      = "hot-read-range"      // a committed read outside 0…final
	HotFinalDivergent = "hot-final-divergent" // nodes' final reads differ
)

// HotIncr is one increment of a hot counter: K incremented to Wrote
// (the value its UPDATE wrote, read+1 or what RETURNING said; 0 when the
// transaction failed before it), after reading Read (counter → value).
type HotIncr struct {
	ID     int
	Node   int
	Status string // ok, fail or info
	K      int
	Wrote  int64
	Read   map[int]int64
}

// HotRead is a committed read of counters (counter → value).
type HotRead struct {
	ID, Node int
	Values   map[int]int64
}

// HotResult is what CheckHot found.
type HotResult struct {
	Anomalies []Anomaly
	// Final is the counters' final values (from the first node's final read).
	Final map[int]int64
	// OK, Failed, Info count the increments by outcome; InfoCommitted the
	// indeterminate ones the final values need (F minus the acknowledged).
	OK, Failed, Info, InfoCommitted int
}

// CheckHot checks increments of counters that all start at 0 against the
// final reads through every node (final[node]: counter → value). Every
// committed increment adds exactly 1, so the committed increments of a
// counter wrote 1, 2, …, F, its final value, each once: two acknowledged
// increments that wrote the same value lost an update; an acknowledged
// one that wrote more than F was lost; a value in 1…F that no
// acknowledged or indeterminate increment wrote came from nowhere (a
// failed increment took effect). Hence F is the number of acknowledged
// increments plus some of the indeterminate ones. Every committed read
// (of reads and of ok increments) must be in 0…F.
func CheckHot(incrs []HotIncr, reads []HotRead, final map[int]map[int]int64) HotResult {
	var res HotResult
	nodes := make([]int, 0, len(final))
	for n := range final {
		nodes = append(nodes, n)
	}
	sort.Ints(nodes)
	if len(nodes) > 0 {
		res.Final = final[nodes[0]]
		for _, n := range nodes[1:] {
			if !sameCounters(final[n], res.Final) {
				res.Anomalies = append(res.Anomalies, Anomaly{HotFinalDivergent, nil, fmt.Sprintf("node %d's final counters %v, node %d's %v", n, final[n], nodes[0], res.Final)})
			}
		}
	}
	// okBy[k][v] / infoBy[k][v]: the acknowledged / indeterminate increments of k that wrote v.
	okBy := map[int]map[int64][]int{}
	infoBy := map[int]map[int64][]int{}
	add := func(m map[int]map[int64][]int, k int, v int64, id int) {
		if m[k] == nil {
			m[k] = map[int64][]int{}
		}
		m[k][v] = append(m[k][v], id)
	}
	for _, in := range incrs {
		switch in.Status {
		case "ok":
			res.OK++
			add(okBy, in.K, in.Wrote, in.ID)
		case "fail":
			res.Failed++
		default:
			res.Info++
			if in.Wrote > 0 {
				add(infoBy, in.K, in.Wrote, in.ID)
			}
		}
	}
	keys := map[int]bool{}
	for k := range okBy {
		keys[k] = true
	}
	for k := range res.Final {
		keys[k] = true
	}
	var ks []int
	for k := range keys {
		ks = append(ks, k)
	}
	sort.Ints(ks)
	for _, k := range ks {
		var vs []int64
		for v := range okBy[k] {
			vs = append(vs, v)
		}
		sort.Slice(vs, func(i, j int) bool { return vs[i] < vs[j] })
		var dups []string
		var dupIDs []int
		for _, v := range vs {
			if ids := okBy[k][v]; len(ids) > 1 {
				dups = append(dups, fmt.Sprintf("%s all wrote %d", names(ids), v))
				dupIDs = append(dupIDs, ids...)
			}
		}
		if len(dups) > 0 {
			res.Anomalies = append(res.Anomalies, Anomaly{HotLostUpdate, dupIDs, fmt.Sprintf("counter %d: %d values written by more than one acknowledged increment: %v", k, len(dups), head(dups))})
		}
		f, known := res.Final[k]
		if !known {
			continue
		}
		var above []string
		for _, v := range vs {
			if v > f || v < 1 {
				above = append(above, fmt.Sprintf("%s wrote %d", names(okBy[k][v]), v))
			}
		}
		if len(above) > 0 {
			res.Anomalies = append(res.Anomalies, Anomaly{HotLostIncrement, nil, fmt.Sprintf("counter %d ends at %d, but acknowledged increments wrote more: %v", k, f, head(above))})
		}
		var unexplained []int64
		for v := int64(1); v <= f; v++ {
			if len(okBy[k][v]) > 0 {
				continue
			}
			if len(infoBy[k][v]) > 0 {
				res.InfoCommitted++
				continue
			}
			unexplained = append(unexplained, v)
		}
		if len(unexplained) > 0 {
			if len(unexplained) > 10 {
				unexplained = unexplained[:10]
			}
			res.Anomalies = append(res.Anomalies, Anomaly{HotUnexplained, nil, fmt.Sprintf("counter %d ends at %d (%d acknowledged increments, %d indeterminate), but no acknowledged or indeterminate increment wrote %v", k, f, countIDs(okBy[k]), countIDs(infoBy[k]), unexplained)})
		}
	}
	if res.Final == nil {
		return res
	}
	check := func(id, node int, what string, values map[int]int64) {
		for k, v := range values {
			if f, ok := res.Final[k]; ok && (v < 0 || v > f) {
				res.Anomalies = append(res.Anomalies, Anomaly{HotReadRange, []int{id}, fmt.Sprintf("%s T%d on node %d read counter %d = %d, outside 0…%d (its final value)", what, id, node, k, v, f)})
			}
		}
	}
	for _, r := range reads {
		check(r.ID, r.Node, "read", r.Values)
	}
	for _, in := range incrs {
		if in.Status == "ok" {
			check(in.ID, in.Node, "increment", in.Read)
		}
	}
	return res
}

func sameCounters(a, b map[int]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func countIDs(m map[int64][]int) int {
	n := 0
	for _, ids := range m {
		n += len(ids)
	}
	return n
}
