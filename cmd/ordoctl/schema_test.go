package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ordo-db/ordo/internal/replica"
)

// The CLI against a stand-in for a node's HTTP endpoints (the endpoints
// themselves are tested end to end in test/e2e).
func TestSchemaCheckReportsDifferences(t *testing.T) {
	status := replica.SchemaStatus{AtSeqno: 7, Hash: "abc", Peers: map[uint32]replica.PeerSchema{
		2: {AtSeqno: 7, Consistent: true},
		3: {AtSeqno: 7, Differences: []string{"table public.t (different definition)"}},
	}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /schema/check", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]uint64{"at_seqno": 7})
	})
	mux.HandleFunc("GET /schema", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(status)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	cmd := schemaCheckCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--node", srv.URL})
	err := cmd.Execute()
	if !errors.Is(err, errInconsistent) {
		t.Fatalf("want errInconsistent, got %v", err)
	}
	for _, want := range []string{"node 2: same schema", "node 3: DIFFERENT schema", "table public.t (different definition)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}

	status.Peers[3] = replica.PeerSchema{AtSeqno: 7, Consistent: true}
	out.Reset()
	cmd = schemaCheckCmd()
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--node", srv.URL})
	if err := cmd.Execute(); err != nil {
		t.Fatalf("consistent cluster: %v\n%s", err, out.String())
	}
}
