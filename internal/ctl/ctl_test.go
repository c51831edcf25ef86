package ctl

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/ordo-db/ordo/internal/admin"
)

// The commands against stand-ins for nodes' admin APIs (the API itself is
// tested in internal/admin, both together against real nodes in
// test/e2e).

const token = "0123456789abcdef-token"

type standIn struct {
	mu       sync.Mutex
	status   admin.Status
	protocol admin.Protocol
	schema   admin.SchemaStatus
	checkAt  uint64
}

func (s *standIn) serve(t *testing.T) *httptest.Server {
	mux := http.NewServeMux()
	reply := func(v func() any) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			if r.Header.Get("Authorization") != "Bearer "+token {
				w.WriteHeader(http.StatusUnauthorized)
				_ = json.NewEncoder(w).Encode(admin.ErrorBody{Error: "unauthenticated: wrong token"})
				return
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			_ = json.NewEncoder(w).Encode(v())
		}
	}
	mux.HandleFunc("GET "+admin.PathStatus, reply(func() any { return s.status }))
	mux.HandleFunc("GET "+admin.PathProtocol, reply(func() any { return s.protocol }))
	mux.HandleFunc("GET "+admin.PathSchema, reply(func() any { return s.schema }))
	mux.HandleFunc("POST "+admin.PathSchemaCheck, reply(func() any { return admin.SchemaCheck{AtSeqno: s.checkAt} }))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func u64(v uint64) *uint64 { return &v }

// node returns a healthy stand-in for node id of three, node 1 leading.
func node(id uint32) *standIn {
	return &standIn{
		status: admin.Status{NodeID: id, Protocol: "dbsm", Leader: 1, AppliedPrefix: 40, DeliveredSeqno: 42, Lag: 2, PostgresVersion: "15.8",
			Raft:    admin.Raft{State: map[bool]string{true: "leader", false: "follower"}[id == 1], Term: 2, Commit: 42, Applied: 42},
			Members: []admin.Member{{ID: 1, Leader: true, Applied: u64(40), Lag: u64(2)}, {ID: 2, Applied: u64(41), Lag: u64(1)}, {ID: 3, Applied: u64(39), Lag: u64(3)}},
			Ready:   admin.Ready{Ready: true, ReadIndex: 42, AppliedPrefix: 40},
			Transactions: []admin.TxnCount{{Origin: "local", Outcome: "commit", Count: 5}, {Origin: "remote", Outcome: "commit", Count: 7},
				{Origin: "local", Outcome: "abort", Reason: "certification", Count: 2}}},
		protocol: admin.Protocol{NodeID: id, Name: "dbsm", Guarantee: "1-copy serializable", CertifiesReads: true, CertificationWindow: 100000},
		schema:   admin.SchemaStatus{AtSeqno: 9, Hash: "abc", Peers: map[uint32]admin.PeerSchema{}},
		checkAt:  9,
	}
}

func run(args ...string) (stdout, stderr string, code int) {
	var o, e bytes.Buffer
	code = Main(args, &o, &e)
	return o.String(), e.String(), code
}

func addr(srv *httptest.Server) string { return strings.TrimPrefix(srv.URL, "http://") }

func TestStatus(t *testing.T) {
	n1, n2 := node(1).serve(t), node(2).serve(t)
	eps := addr(n1) + "," + addr(n2)

	out, errOut, code := run("status", "--endpoints", eps, "--token", token)
	require.Equal(t, ExitOK, code, errOut)
	lines := strings.Split(out, "\n")
	require.Regexp(t, `^NODE +ENDPOINT +STATE +LEADER +TERM +COMMIT +APPLIED +LAG +READY +UPDATES +PROTOCOL +POSTGRES`, lines[0])
	require.Regexp(t, `^1 +`+addr(n1)+` +leader +1 +2 +42 +40 +2 +yes +accepted +dbsm +15.8`, lines[1])
	require.Regexp(t, `^2 +`+addr(n2)+` +follower +1 +2 +42 +40 +2 +yes`, lines[2])
	require.Regexp(t, `^3 +\(seen by node 1\) +member +- +- +- +39 +3`, lines[3], "the member no endpoint covers, as node 1 sees it")
	require.Contains(t, out, "certification 2")
	require.Regexp(t, `(?m)^1 +12 +5 +7 +2 +certification 2$`, out)

	out, errOut, code = run("status", "--endpoints", eps, "--token", token, "-o", "json")
	require.Equal(t, ExitOK, code, errOut)
	var js statusOutput
	require.NoError(t, json.Unmarshal([]byte(out), &js))
	require.Len(t, js.Nodes, 2)
	require.EqualValues(t, 2, js.Nodes[1].Status.NodeID)
	require.EqualValues(t, 40, js.Nodes[0].Status.AppliedPrefix)

	out, errOut, code = run("status", "--endpoints", eps, "--token", token, "-o", "yaml")
	require.Equal(t, ExitOK, code, errOut)
	var y struct {
		Nodes []struct {
			Endpoint string
			Status   struct {
				NodeID          uint32 `yaml:"node_id"`
				PostgresVersion string `yaml:"postgres_version"`
				Raft            struct {
					Commit uint64 `yaml:"commit_index"`
				}
			}
		}
	}
	require.NoError(t, yaml.Unmarshal([]byte(out), &y), out)
	require.Len(t, y.Nodes, 2)
	require.EqualValues(t, 1, y.Nodes[0].Status.NodeID)
	require.Equal(t, "15.8", y.Nodes[0].Status.PostgresVersion, "a string that looks like a number stays a string")
	require.EqualValues(t, 42, y.Nodes[0].Status.Raft.Commit)
	require.NotContains(t, out, "{", "block style, not JSON")
}

func TestStatusExitCodes(t *testing.T) {
	good := node(1).serve(t)
	sick := node(2)
	sick.status.Ready = admin.Ready{Reason: "no Raft leader known"}
	sick.status.RefusesUpdates, sick.status.Refusal = true, "replica inconsistent"
	bad := sick.serve(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gone := ln.Addr().String()
	ln.Close()

	_, errOut, code := run("status", "--endpoints", addr(good)+","+addr(bad), "--token", token)
	require.Equal(t, ExitFailed, code)
	require.Contains(t, errOut, "node 2 is not ready: no Raft leader known")
	require.Contains(t, errOut, "node 2 refuses updates: replica inconsistent")

	out, errOut, code := run("status", "--endpoints", addr(good)+","+gone, "--token", token)
	require.Equal(t, ExitUnreachable, code, "one node of those asked did not answer")
	require.Contains(t, errOut, "cannot reach the admin API "+gone)
	require.Regexp(t, `(?m)^- +`+gone+` +unreachable`, out)

	_, errOut, code = run("status", "--endpoints", addr(good), "--token", "wrong-token-0123456789")
	require.Equal(t, ExitUnreachable, code)
	require.Contains(t, errOut, "refused the credentials")
	_, _, code = run("status", "--endpoints", addr(good))
	require.Equal(t, ExitUnreachable, code, "no token")

	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(token+"\n"), 0o600))
	_, errOut, code = run("status", "--endpoints", addr(good), "--token-file", tokenFile)
	require.Equal(t, ExitOK, code, errOut)

	for _, args := range [][]string{
		{"status"}, // no nodes named
		{"status", "--endpoints", addr(good), "--token", token, "--token-file", tokenFile},
		{"status", "--endpoints", addr(good), "-o", "xml"},
		{"status", "--endpoints", addr(good), "--cert", "c.crt"},
		{"status", "--endpoints", addr(good), "--cert", "c.crt", "--key", "c.key"},
		{"status", "--endpoints", addr(good), "--cacert", "ca.crt", "--token", token},
		{"status", "--endpoints", addr(good), "--token-file", "/nonexistent"},
		{"status", "extra"},
		{"status", "--nonsense"},
		{"nonsense"},
		{"protocol", "nonsense"},
	} {
		_, errOut, code := run(args...)
		require.Equal(t, ExitUsage, code, "%v: %s", args, errOut)
	}
	_, _, code = run("version")
	require.Equal(t, ExitOK, code)
	out, _, code = run("completion", "bash")
	require.Equal(t, ExitOK, code)
	require.Contains(t, out, "ordoctl")
}

// TestDataDir: --data-dir finds the node's address and generated token.
func TestDataDir(t *testing.T) {
	srv := node(1).serve(t)
	dir := t.TempDir()
	_, _, code := run("status", "--data-dir", dir)
	require.Equal(t, ExitUnreachable, code, "no admin.addr: the node is not running")
	require.NoError(t, admin.WriteAddrFile(dir, addr(srv)))
	_, _, code = run("status", "--data-dir", dir)
	require.Equal(t, ExitUnreachable, code, "no token")
	require.NoError(t, os.WriteFile(filepath.Join(dir, admin.TokenFileName), []byte(token+"\n"), 0o600))
	out, errOut, code := run("status", "--data-dir", dir, "-o", "json")
	require.Equal(t, ExitOK, code, errOut)
	var js statusOutput
	require.NoError(t, json.Unmarshal([]byte(out), &js))
	require.Equal(t, addr(srv), js.Nodes[0].Endpoint)
}

func TestProtocolShow(t *testing.T) {
	a, b := node(1), node(2)
	sa, sb := a.serve(t), b.serve(t)
	eps := addr(sa) + "," + addr(sb)
	out, errOut, code := run("protocol", "show", "--endpoints", eps, "--token", token)
	require.Equal(t, ExitOK, code, errOut)
	require.Regexp(t, `(?m)^1 +`+addr(sa)+` +dbsm +1-copy serializable +true +100000`, out)

	b.mu.Lock()
	b.protocol.Name, b.protocol.Guarantee = "dbsm-si", "1-copy snapshot isolation"
	b.mu.Unlock()
	out, errOut, code = run("protocol", "show", "--endpoints", eps, "--token", token, "-o", "json")
	require.Equal(t, ExitFailed, code)
	require.Contains(t, errOut, "different protocols")
	var js protocolOutput
	require.NoError(t, json.Unmarshal([]byte(out), &js))
	require.Equal(t, "dbsm-si", js.Nodes[1].Protocol.Name)
}

func TestSchemaCheckReportsDifferences(t *testing.T) {
	n := node(1)
	n.schema = admin.SchemaStatus{AtSeqno: 9, Hash: "abc", Peers: map[uint32]admin.PeerSchema{
		2: {AtSeqno: 9, Consistent: true},
		3: {AtSeqno: 9, Differences: []string{"table public.t (different definition)"}},
	}}
	srv := n.serve(t)
	out, errOut, code := run("schema-check", "--endpoints", addr(srv), "--token", token)
	require.Equal(t, ExitFailed, code)
	require.Contains(t, errOut, "schemas differ")
	for _, want := range []string{"schema check at seqno 9", "node 2: same schema", "node 3: DIFFERENT schema", "table public.t (different definition)"} {
		require.Contains(t, out, want)
	}

	n.mu.Lock()
	n.schema.Peers[3] = admin.PeerSchema{AtSeqno: 9, Consistent: true}
	n.mu.Unlock()
	out, errOut, code = run("schema-check", "--endpoints", addr(srv), "--token", token, "-o", "json")
	require.Equal(t, ExitOK, code, errOut)
	var js schemaCheckOutput
	require.NoError(t, json.Unmarshal([]byte(out), &js))
	require.True(t, js.Complete)
	require.True(t, js.Consistent)
	require.EqualValues(t, 9, js.AtSeqno)

	// node 3's fingerprint never arrives
	n.mu.Lock()
	delete(n.schema.Peers, 3)
	n.mu.Unlock()
	out, errOut, code = run("schema-check", "--endpoints", addr(srv), "--token", token, "--timeout", "300ms")
	require.Equal(t, ExitFailed, code)
	require.Contains(t, errOut, "not every node's fingerprint arrived")
	require.Contains(t, out, "node 3: no fingerprint at seqno 9 yet")

	// the first endpoint is down: the next one starts the check
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gone := ln.Addr().String()
	ln.Close()
	n.mu.Lock()
	n.schema.Peers[3] = admin.PeerSchema{AtSeqno: 9, Consistent: true}
	n.mu.Unlock()
	_, errOut, code = run("schema-check", "--endpoints", gone+","+addr(srv), "--token", token)
	require.Equal(t, ExitOK, code, errOut)
}
