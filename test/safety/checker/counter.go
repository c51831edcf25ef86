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
)

// CounterResult is what CheckCounter found.
type CounterResult struct {
	OK, Failed, Info int
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
func CheckCounter(ok, info map[int]int, failed int, final map[int]map[int]int64) CounterResult {
	res := CounterResult{Failed: failed}
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
	}
	return res
}
