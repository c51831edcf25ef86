package checker

import (
	"fmt"
	"sort"
)

// SetsResult is what CheckSets found.
type SetsResult struct {
	Anomalies []Anomaly
	// OK, Failed and Info count the adds by outcome; InfoPresent and
	// InfoAbsent resolve the info adds by the final read (the same on every
	// node, or Anomalies says otherwise).
	OK, Failed, Info, InfoPresent, InfoAbsent int
}

// CheckSets checks unique adds against a final read of every node:
// adds maps each added value to its outcome ("ok", "fail", "info");
// final[node] is the set that node's final read returned. An acknowledged
// add missing on any node, a failed add present anywhere, a value never
// added, or nodes that disagree are anomalies.
func CheckSets(adds map[int]string, final map[int]map[int]bool) SetsResult {
	var r SetsResult
	nodes := make([]int, 0, len(final))
	for n := range final {
		nodes = append(nodes, n)
	}
	sort.Ints(nodes)
	values := make([]int, 0, len(adds))
	for v := range adds {
		values = append(values, v)
	}
	sort.Ints(values)
	var lost, failedPresent []string
	for _, v := range values {
		outcome := adds[v]
		var on, off []int
		for _, n := range nodes {
			if final[n][v] {
				on = append(on, n)
			} else {
				off = append(off, n)
			}
		}
		switch outcome {
		case "ok":
			r.OK++
			if len(off) > 0 {
				lost = append(lost, fmt.Sprintf("%d (missing on nodes %v)", v, off))
			}
		case "fail":
			r.Failed++
			if len(on) > 0 {
				failedPresent = append(failedPresent, fmt.Sprintf("%d (present on nodes %v)", v, on))
			}
		default:
			r.Info++
			switch {
			case len(off) == 0:
				r.InfoPresent++
			case len(on) == 0:
				r.InfoAbsent++
			default:
				r.Anomalies = append(r.Anomalies, Anomaly{"sets-divergent", nil, fmt.Sprintf("indeterminate add %d present on nodes %v, absent on %v", v, on, off)})
			}
		}
	}
	if len(lost) > 0 {
		r.Anomalies = append(r.Anomalies, Anomaly{"sets-lost", nil, fmt.Sprintf("%d acknowledged adds missing: %v", len(lost), head(lost))})
	}
	if len(failedPresent) > 0 {
		r.Anomalies = append(r.Anomalies, Anomaly{"sets-failed-present", nil, fmt.Sprintf("%d failed adds present: %v", len(failedPresent), head(failedPresent))})
	}
	for _, n := range nodes {
		var unexpected []int
		for v := range final[n] {
			if _, ok := adds[v]; !ok {
				unexpected = append(unexpected, v)
			}
		}
		if len(unexpected) > 0 {
			sort.Ints(unexpected)
			r.Anomalies = append(r.Anomalies, Anomaly{"sets-unexpected", nil, fmt.Sprintf("node %d holds values nobody added: %v", n, unexpected)})
		}
	}
	return r
}

func head(s []string) []string {
	if len(s) > 10 {
		return append(s[:10:10], fmt.Sprintf("… %d more", len(s)-10))
	}
	return s
}
