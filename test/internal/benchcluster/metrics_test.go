package benchcluster

import (
	"fmt"
	"net"
	"net/http"
	"testing"
)

// ReadHistograms parses what a node's /metrics serves, and Breakdown prints
// the means of what moved, in its order.
func TestReadHistogramsAndBreakdown(t *testing.T) {
	body := ""
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, body) })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	defer srv.Close()

	body = `# HELP ordo_session_commit_stage_seconds x
ordo_session_commit_stage_seconds_bucket{stage="probe",le="0.001"} 3
ordo_session_commit_stage_seconds_sum{stage="probe"} 0.001
ordo_session_commit_stage_seconds_count{stage="probe"} 10
ordo_totalorder_commit_latency_seconds_sum 0.01
ordo_totalorder_commit_latency_seconds_count 10
`
	before := ReadHistograms([]string{l.Addr().String(), "127.0.0.1:1"})
	body = `ordo_session_commit_stage_seconds_sum{stage="probe"} 0.003
ordo_session_commit_stage_seconds_count{stage="probe"} 20
ordo_totalorder_commit_latency_seconds_sum 0.02
ordo_totalorder_commit_latency_seconds_count 10
ordo_replica_apply_seconds_sum 0.5
ordo_replica_apply_seconds_count 1000
`
	after := ReadHistograms([]string{l.Addr().String()})
	if got, want := Breakdown(before, after), "probe 0.20, apply elsewhere 0.50"; got != want {
		t.Fatalf("Breakdown = %q, want %q", got, want)
	}
}
