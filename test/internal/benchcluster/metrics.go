package benchcluster

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
)

// Histogram is a Prometheus histogram's running sum (seconds) and count.
type Histogram struct{ Sum, Count float64 }

// Where a commit's time goes: the histograms ReadHistograms sums, by the
// name Breakdown prints them under, in its order. The commit stages are
// ordo_session_commit_stage_seconds' stage labels.
var breakdown = []struct{ key, metric string }{
	{"probe", "stage=probe"},
	{"prepare", "stage=prepare"},
	{"capture", "stage=capture"},
	{"terminate", "stage=terminate"},
	{"total order", "ordo_totalorder_commit_latency_seconds"},
	{"raft log save", "ordo_totalorder_log_save_seconds"},
	{"commit prepared", "ordo_replica_local_commit_seconds"},
	{"visibility wait", "ordo_replica_visibility_wait_seconds"},
	{"apply elsewhere", "ordo_replica_apply_seconds"},
}

var histLine = regexp.MustCompile(`^(ordo_[a-z_]+)_(sum|count)(\{[^}]*\})? ([0-9.e+-]+)$`)
var stageLabel = regexp.MustCompile(`stage="([a-z]+)"`)

// ReadHistograms sums the histograms of Breakdown over the nodes' /metrics
// at addrs (host:port); a node that does not answer counts for nothing.
func ReadHistograms(addrs []string) map[string]Histogram {
	out := map[string]Histogram{}
	for _, a := range addrs {
		resp, err := http.Get("http://" + a + "/metrics")
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range strings.Split(string(b), "\n") {
			m := histLine.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			key := m[1]
			if key == "ordo_session_commit_stage_seconds" {
				s := stageLabel.FindStringSubmatch(m[3])
				if s == nil {
					continue
				}
				key = "stage=" + s[1]
			}
			v, _ := strconv.ParseFloat(m[4], 64)
			h := out[key]
			if m[2] == "sum" {
				h.Sum += v
			} else {
				h.Count += v
			}
			out[key] = h
		}
	}
	return out
}

// Breakdown prints the mean, in ms, of each histogram of the breakdown
// that moved between two readings ("probe 0.12, prepare 0.35, …"), or ""
// if none did.
func Breakdown(before, after map[string]Histogram) string {
	var parts []string
	for _, b := range breakdown {
		a, o := after[b.metric], before[b.metric]
		if a.Count > o.Count {
			parts = append(parts, fmt.Sprintf("%s %.2f", b.key, 1000*(a.Sum-o.Sum)/(a.Count-o.Count)))
		}
	}
	return strings.Join(parts, ", ")
}

// Moved returns what each histogram gained between two readings, added to
// into (nil: a new map), so the runs of one configuration can be summed.
func Moved(into, before, after map[string]Histogram) map[string]Histogram {
	if into == nil {
		into = map[string]Histogram{}
	}
	for k, a := range after {
		o := before[k]
		h := into[k]
		h.Sum += a.Sum - o.Sum
		h.Count += a.Count - o.Count
		into[k] = h
	}
	return into
}
