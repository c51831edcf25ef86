package checker

import (
	"fmt"
	"sort"
)

// Counter anomaly names.
const (
	CounterLost      = "counter-lost"      // a counter ends below its acknowledged increments
	CounterExtra     = "counter-extra"     // a counter ends above its acknowledged and indeterminate increments
	CounterDivergent = "counter-divergent" // nodes' final reads differ
	CounterReturned  = "counter-returned"  // a value an increment returned is one another returned too, or not one the counter passed
)

// CounterResult is what CheckCounter found.
type CounterResult struct {
	OK, Failed, Info int
	Returned         int // acknowledged increments that returned their value
	Final            map[int]int64
	Anomalies        []Anomaly
}

// CheckCounter checks blind increments of counters that start at 0 (each
// adds exactly 1 and returns nothing): ok[k] and info[k] count the
// acknowledged and indeterminate increments of counter k, failed those
// that certainly did not commit; final holds each node's final read. A
// counter must end at no less than its acknowledged increments (one lost)
// and no more than those plus the indeterminate ones (one applied twice,
// or one reported failed that committed); the nodes must agree.
// returned[k] holds the values acknowledged increments of counter k
// returned (RETURNING n, the value after the increment): increments of
// one row are serialized, so no two return the same value, and each is
// between 1 and the final value. (A client given the rows of an attempt
// that was rolled back and run again would see a value another
// increment returns too, or one the counter never committed.)
func CheckCounter(ok, info map[int]int, failed int, final map[int]map[int]int64, returned map[int][]int64) CounterResult {
	res := CounterResult{Failed: failed}
	for _, vs := range returned {
		res.Returned += len(vs)
	}
	for _, n := range ok {
		res.OK += n
	}
	for _, n := range info {
		res.Info += n
	}
	nodes := make([]int, 0, len(final))
	for n := range final {
		nodes = append(nodes, n)
	}
	sort.Ints(nodes)
	if len(nodes) == 0 {
		return res
	}
	res.Final = final[nodes[0]]
	for _, n := range nodes[1:] {
		if !sameCounters(final[n], res.Final) {
			res.Anomalies = append(res.Anomalies, Anomaly{CounterDivergent, nil, fmt.Sprintf("node %d's final counters %v, node %d's %v", n, final[n], nodes[0], res.Final)})
		}
	}
	keys := map[int]bool{}
	for k := range ok {
		keys[k] = true
	}
	for k := range res.Final {
		keys[k] = true
	}
	ks := make([]int, 0, len(keys))
	for k := range keys {
		ks = append(ks, k)
	}
	sort.Ints(ks)
	for _, k := range ks {
		f := res.Final[k]
		switch {
		case f < int64(ok[k]):
			res.Anomalies = append(res.Anomalies, Anomaly{CounterLost, nil, fmt.Sprintf("counter %d ends at %d after %d acknowledged increments", k, f, ok[k])})
		case f > int64(ok[k]+info[k]):
			res.Anomalies = append(res.Anomalies, Anomaly{CounterExtra, nil, fmt.Sprintf("counter %d ends at %d after %d acknowledged and %d indeterminate increments", k, f, ok[k], info[k])})
		}
		seen := map[int64]bool{}
		for _, v := range returned[k] {
			switch {
			case seen[v]:
				res.Anomalies = append(res.Anomalies, Anomaly{CounterReturned, nil, fmt.Sprintf("two increments of counter %d returned %d", k, v)})
			case v < 1 || v > f:
				res.Anomalies = append(res.Anomalies, Anomaly{CounterReturned, nil, fmt.Sprintf("an increment of counter %d returned %d, which it never held (it ends at %d)", k, v, f)})
			}
			seen[v] = true
		}
	}
	return res
}
