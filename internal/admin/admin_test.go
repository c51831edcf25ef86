package admin

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"

	"github.com/ordo-db/ordo/internal/certs"
	"github.com/ordo-db/ordo/internal/replica"
	ordov1 "github.com/ordo-db/ordo/pkg/api/ordo/v1"
	"github.com/ordo-db/ordo/pkg/config"
)

// fakeOrder and fakeReplica stand in for a node's total order and
// delivery engine.
type fakeOrder struct {
	mu        sync.Mutex
	leader    uint64
	members   []uint64
	status    raft.Status
	peers     map[uint64]uint64
	delivered uint64
	readIndex uint64
	readErr   error
	err       error
	reads     int
}

func (o *fakeOrder) Leader() uint64 { o.mu.Lock(); defer o.mu.Unlock(); return o.leader }
func (o *fakeOrder) Members() []uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.members
}
func (o *fakeOrder) Status() raft.Status { o.mu.Lock(); defer o.mu.Unlock(); return o.status }
func (o *fakeOrder) Delivered() uint64   { o.mu.Lock(); defer o.mu.Unlock(); return o.delivered }
func (o *fakeOrder) PeersApplied() map[uint64]uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.peers
}
func (o *fakeOrder) ReadIndex(ctx context.Context) (uint64, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.reads++
	return o.readIndex, o.readErr
}
func (o *fakeOrder) Err() error { o.mu.Lock(); defer o.mu.Unlock(); return o.err }

type fakeReplica struct {
	name     string
	prefix   uint64
	err      error
	schema   replica.SchemaStatus
	checkAt  uint64
	checkErr error
}

func (r *fakeReplica) Name() string                 { return r.name }
func (r *fakeReplica) CertifiesReads() bool         { return r.name == "dbsm" }
func (r *fakeReplica) AppliedPrefix() uint64        { return r.prefix }
func (r *fakeReplica) Err() error                   { return r.err }
func (r *fakeReplica) Schema() replica.SchemaStatus { return r.schema }
func (r *fakeReplica) Data() replica.DataStatus     { return replica.DataStatus{} }
func (r *fakeReplica) RequestDataCheck(ctx context.Context) (uint64, error) {
	return r.checkAt, r.checkErr
}
func (r *fakeReplica) TxnStatus(ctx context.Context, label string) (string, error) {
	return "unknown", nil
}
func (r *fakeReplica) RequestSchemaCheck(ctx context.Context) (uint64, error) {
	return r.checkAt, r.checkErr
}
func (r *fakeReplica) Classes() *ordov1.ClassConfig { return &ordov1.ClassConfig{} }
func (r *fakeReplica) ProtocolSince() uint64        { return 0 }
func (r *fakeReplica) HotConflicts() replica.HotConflicts {
	return replica.HotConflicts{Minutes: 5, Keys: []replica.Hot{}, Tables: []replica.Hot{}}
}
func (r *fakeReplica) SwitchProtocol(ctx context.Context, name string) (uint64, error) {
	return 0, errors.New("not in this fake")
}
func (r *fakeReplica) ChangeClasses(ctx context.Context, e *ordov1.ClassesEntry) (*ordov1.ClassConfig, error) {
	return nil, errors.New("not in this fake")
}

// healthy is node 1 of three, following leader 2: its log is applied to
// 100, its replica was delivered 99 (100 is a leader's empty entry) and
// carried out 95.
func healthy() (*fakeOrder, *fakeReplica) {
	st := raft.Status{BasicStatus: raft.BasicStatus{ID: 1, HardState: raftpb.HardState{Term: 4, Commit: 100},
		SoftState: raft.SoftState{Lead: 2, RaftState: raft.StateFollower}, Applied: 100}}
	return &fakeOrder{leader: 2, members: []uint64{1, 2, 3}, status: st, peers: map[uint64]uint64{2: 90}, delivered: 99, readIndex: 99},
		&fakeReplica{name: "dbsm", prefix: 95, checkAt: 120}
}

const token = "0123456789abcdef-token"

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newServer(t *testing.T, o *fakeOrder, r *fakeReplica, reg prometheus.Gatherer) *httptest.Server {
	t.Helper()
	s, err := New(Config{NodeID: 1, Order: o, Replica: r, Ready: NewReadiness(o, r), Metrics: reg,
		PostgresVersion: "15.8", CertificationWindow: 100000, Auth: Auth{Token: StaticToken(token)}, Logger: quiet})
	require.NoError(t, err)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return srv
}

func client(t *testing.T, url, tok string) *Client {
	c := NewClient(url, ClientOptions{Token: tok, Timeout: 5 * time.Second})
	t.Cleanup(c.Close)
	return c
}

func TestTokenAuthentication(t *testing.T) {
	o, r := healthy()
	srv := newServer(t, o, r, nil)
	get := func(header string) int {
		req, err := http.NewRequest(http.MethodGet, srv.URL+PathStatus, nil)
		require.NoError(t, err)
		if header != "" {
			req.Header.Set("Authorization", header)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, http.StatusUnauthorized, get(""))
	require.Equal(t, http.StatusUnauthorized, get("Bearer wrong-token-of-some-length"))
	require.Equal(t, http.StatusUnauthorized, get("Basic "+token))
	require.Equal(t, http.StatusUnauthorized, get("Bearer "+token+"x"))
	require.Equal(t, http.StatusOK, get("Bearer "+token))
	require.Equal(t, http.StatusOK, get("bearer "+token))

	// unknown paths are refused before they are found missing
	resp, err := http.Get(srv.URL + "/v1/nothing")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	_, err = client(t, srv.URL, "wrong-token-of-some-length").Status(context.Background())
	require.ErrorIs(t, err, ErrUnauthenticated)
	_, err = client(t, srv.URL, "").Status(context.Background())
	require.ErrorIs(t, err, ErrUnauthenticated)
	_, err = client(t, srv.URL, token).Status(context.Background())
	require.NoError(t, err)
}

func TestShortStaticTokenRefusesEverything(t *testing.T) {
	_, err := StaticToken("short").Token()
	require.ErrorIs(t, err, ErrNoToken)
	_, err = New(Config{Auth: Auth{}})
	require.Error(t, err, "no authentication at all")
}

func TestTokenFileIsReloaded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	_, err := NewTokenFile(path, quiet)
	require.ErrorIs(t, err, ErrNoToken, "missing file")
	require.NoError(t, os.WriteFile(path, []byte("short\n"), 0o600))
	_, err = NewTokenFile(path, quiet)
	require.ErrorIs(t, err, ErrNoToken, "too short")

	require.NoError(t, os.WriteFile(path, []byte("  first-token-0123456789\n"), 0o600))
	f, err := NewTokenFile(path, quiet)
	require.NoError(t, err)
	tok, err := f.Token()
	require.NoError(t, err)
	require.Equal(t, "first-token-0123456789", string(tok))

	require.NoError(t, os.WriteFile(path, []byte("second-token-0123456789-longer\n"), 0o600))
	tok, err = f.Token()
	require.NoError(t, err)
	require.Equal(t, "second-token-0123456789-longer", string(tok))

	// an unusable file keeps the previous token
	require.NoError(t, os.WriteFile(path, []byte("x"), 0o600))
	tok, err = f.Token()
	require.NoError(t, err)
	require.Equal(t, "second-token-0123456789-longer", string(tok))
	require.NoError(t, os.Remove(path))
	tok, err = f.Token()
	require.NoError(t, err)
	require.Equal(t, "second-token-0123456789-longer", string(tok))
}

func TestLoadOrCreateToken(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data", TokenFileName)
	created, err := LoadOrCreateToken(path)
	require.NoError(t, err)
	require.True(t, created)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	first, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Len(t, strings.TrimSpace(string(first)), 64)

	created, err = LoadOrCreateToken(path)
	require.NoError(t, err)
	require.False(t, created, "an existing token is kept")
	again, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, first, again)
	f, err := NewTokenFile(path, quiet)
	require.NoError(t, err)
	tok, err := f.Token()
	require.NoError(t, err)
	require.Equal(t, strings.TrimSpace(string(first)), string(tok))
	entries, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary file left behind")
}

// TestMutualTLS: with peer TLS, a client certificate of the cluster's CA
// (or a node's) is required; none, or one of another CA, is refused at the
// handshake; ordoctl refuses a server its CA did not sign.
func TestMutualTLS(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	for _, d := range []string{dir, other} {
		_, err := certs.CreateCA(certs.Options{Dir: d})
		require.NoError(t, err)
		_, err = certs.CreateClient(certs.Options{Dir: d}, "alice")
		require.NoError(t, err)
		_, err = certs.CreateNode(certs.Options{Dir: d}, 1, []string{"127.0.0.1"})
		require.NoError(t, err)
	}
	in := func(d, f string) string { return filepath.Join(d, f) }
	peer, err := certs.LoadPeer(certs.Files{Cert: in(dir, "node-1.crt"), Key: in(dir, "node-1.key"), CA: in(dir, "ca.crt")}, 1)
	require.NoError(t, err)
	o, r := healthy()
	s, err := New(Config{NodeID: 1, Order: o, Replica: r, Ready: NewReadiness(o, r), Auth: Auth{TLS: peer.AdminServerConfig()}, Logger: quiet})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	t.Cleanup(func() {
		require.NoError(t, s.Shutdown(context.Background()))
		require.ErrorIs(t, <-done, http.ErrServerClosed)
	})
	addr := ln.Addr().String()
	status := func(cert, key, ca string) error {
		cfg, err := certs.AdminClientConfig(cert, key, ca)
		require.NoError(t, err)
		c := NewClient(addr, ClientOptions{TLS: cfg, Timeout: 5 * time.Second})
		defer c.Close()
		_, err = c.Status(context.Background())
		return err
	}
	require.NoError(t, status(in(dir, "client-alice.crt"), in(dir, "client-alice.key"), in(dir, "ca.crt")))
	require.NoError(t, status(in(dir, "node-1.crt"), in(dir, "node-1.key"), in(dir, "ca.crt")), "a node certificate is a client too")
	require.ErrorIs(t, status("", "", in(dir, "ca.crt")), ErrUnreachable, "no client certificate")
	require.ErrorIs(t, status(in(other, "client-alice.crt"), in(other, "client-alice.key"), in(dir, "ca.crt")), ErrUnreachable, "another CA's client")
	err = status(in(dir, "client-alice.crt"), in(dir, "client-alice.key"), in(other, "ca.crt"))
	require.ErrorIs(t, err, ErrUnreachable, "a server another CA signed")
	require.ErrorIs(t, err, certs.ErrUntrusted)

	// plaintext against the TLS port
	c := NewClient(addr, ClientOptions{Token: token, Timeout: 5 * time.Second})
	defer c.Close()
	_, err = c.Status(context.Background())
	require.ErrorIs(t, err, ErrUnreachable)
}

func TestStatus(t *testing.T) {
	o, r := healthy()
	o.status.Progress = map[uint64]tracker.Progress{1: {Match: 100}, 2: {Match: 100}, 3: {Match: 40}}
	reg := prometheus.NewRegistry()
	outcomes := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ordo_replica_transactions_total"}, []string{"protocol", "origin", "outcome", "reason"})
	reg.MustRegister(outcomes)
	outcomes.WithLabelValues("dbsm", "local", "commit", "").Add(7)
	outcomes.WithLabelValues("dbsm", "remote", "commit", "").Add(3)
	outcomes.WithLabelValues("dbsm", "local", "abort", "certification").Add(2)
	outcomes.WithLabelValues("dbsm-si", "local", "abort", "certification").Add(1)
	outcomes.WithLabelValues("dbsm", "local", "abort", "too_old")
	srv := newServer(t, o, r, reg)

	st, err := client(t, srv.URL, token).Status(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, 1, st.NodeID)
	require.Equal(t, "dbsm", st.Protocol)
	require.EqualValues(t, 2, st.Leader)
	require.Equal(t, Raft{State: "follower", Term: 4, Commit: 100, Applied: 100}, st.Raft)
	require.EqualValues(t, 95, st.AppliedPrefix)
	require.Equal(t, "15.8", st.PostgresVersion)
	require.NotEmpty(t, st.Version)
	require.False(t, st.RefusesUpdates)
	require.Equal(t, Ready{Ready: true, ReadIndex: 99, AppliedPrefix: 95}, st.Ready)
	require.EqualValues(t, 99, st.DeliveredSeqno)
	require.EqualValues(t, 4, st.Lag, "the replica's backlog; the undelivered entry 100 does not count")
	require.Len(t, st.Members, 3)
	u := func(v uint64) *uint64 { return &v }
	require.Equal(t, Member{ID: 1, Applied: u(95), Lag: u(4), Match: u(100)}, st.Members[0])
	require.Equal(t, Member{ID: 2, Leader: true, Applied: u(90), Lag: u(9), Match: u(100)}, st.Members[1])
	require.Equal(t, Member{ID: 3, Match: u(40)}, st.Members[2], "not heard from: no applied prefix")
	require.Equal(t, []TxnCount{
		{Origin: "local", Outcome: "commit", Count: 7},
		{Origin: "remote", Outcome: "commit", Count: 3},
		{Origin: "local", Outcome: "abort", Reason: "certification", Count: 3},
		{Origin: "local", Outcome: "abort", Reason: "too_old", Count: 0},
	}, st.Transactions)

	// the JSON names are the documented ones
	req, _ := http.NewRequest(http.MethodGet, srv.URL+PathStatus, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var raw map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&raw))
	for _, k := range []string{"node_id", "leader", "raft", "applied_prefix", "members", "refuses_updates", "ready", "transactions", "postgres_version", "protocol"} {
		require.Contains(t, raw, k)
	}
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
}

func TestStatusOfARefusingNode(t *testing.T) {
	o, r := healthy()
	r.err = errors.New("replica inconsistent: an apply failed")
	st, err := client(t, newServer(t, o, r, nil).URL, token).Status(context.Background())
	require.NoError(t, err)
	require.True(t, st.RefusesUpdates)
	require.Contains(t, st.Refusal, "an apply failed")
	require.False(t, st.Ready.Ready)
	require.Contains(t, st.Ready.Reason, "refuses updates")
	require.NotNil(t, st.Transactions, "an empty list, not null")

	o, r = healthy()
	o.err = errors.New("totalorder: node removed from the group")
	o.status = raft.Status{}
	st, err = client(t, newServer(t, o, r, nil).URL, token).Status(context.Background())
	require.NoError(t, err)
	require.True(t, st.RefusesUpdates)
	require.Contains(t, st.Refusal, "removed")
	require.Equal(t, "stopped", st.Raft.State)
}

func TestProtocolAndSchema(t *testing.T) {
	o, r := healthy()
	r.name = "dbsm-si"
	r.schema = replica.SchemaStatus{AtSeqno: 120, Hash: "abc", Peers: map[uint32]replica.PeerSchema{
		2: {AtSeqno: 120, Consistent: true}, 3: {AtSeqno: 120, Differences: []string{"table public.t (different definition)"}}}}
	srv := newServer(t, o, r, nil)
	c := client(t, srv.URL, token)
	p, err := c.Protocol(context.Background())
	require.NoError(t, err)
	require.Equal(t, Protocol{NodeID: 1, Name: "dbsm-si", Guarantee: "1-copy snapshot isolation; SERIALIZABLE transactions 1-copy serializable", CertificationWindow: 100000,
		Source: "node configuration (protocol:); the same on every node"}, p)

	at, err := c.StartSchemaCheck(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, 120, at)
	s, err := c.Schema(context.Background())
	require.NoError(t, err)
	require.Equal(t, r.schema, s)

	r.checkErr = errors.New("totalorder: no quorum")
	_, err = c.StartSchemaCheck(context.Background())
	var apiErr *APIError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusServiceUnavailable, apiErr.Code)
	require.Contains(t, apiErr.Message, "no quorum")

	// a schema check is a POST
	req, _ := http.NewRequest(http.MethodGet, srv.URL+PathSchemaCheck, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
}

func TestNotAnAdminAPI(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler()) // e.g. a metrics address
	defer srv.Close()
	_, err := client(t, srv.URL, token).Status(context.Background())
	require.ErrorIs(t, err, ErrUnreachable)
	require.ErrorContains(t, err, "not an Ordo admin API answer")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	_, err = client(t, addr, token).Status(context.Background())
	require.ErrorIs(t, err, ErrUnreachable, "nothing listening")
}

// TestReadiness: each rule, in order, and the answer /readyz gives.
func TestReadiness(t *testing.T) {
	for _, tc := range []struct {
		name   string
		adjust func(*fakeOrder, *fakeReplica)
		reason string
	}{
		{"healthy", func(*fakeOrder, *fakeReplica) {}, ""},
		{"order stopped", func(o *fakeOrder, _ *fakeReplica) { o.err = errors.New("storage failed") }, "the total order stopped: storage failed"},
		{"replica failed", func(_ *fakeOrder, r *fakeReplica) { r.err = errors.New("apply failed") }, "refuses updates: apply failed"},
		{"no leader", func(o *fakeOrder, _ *fakeReplica) { o.leader = 0 }, "no Raft leader known"},
		{"no quorum", func(o *fakeOrder, _ *fakeReplica) { o.readErr = errors.New("totalorder: no quorum") }, "no quorum confirmed within 2s"},
		{"behind", func(o *fakeOrder, r *fakeReplica) { o.readIndex = r.prefix + MaxReadyLag + 1 }, "catching up: applied prefix 95, 1001 seqnos behind"},
		{"a little behind", func(o *fakeOrder, r *fakeReplica) { o.readIndex = r.prefix + MaxReadyLag }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, r := healthy()
			tc.adjust(o, r)
			rec := httptest.NewRecorder()
			NewReadiness(o, r).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, PathReady, nil))
			var rd Ready
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &rd))
			if tc.reason == "" {
				require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
				require.True(t, rd.Ready)
				return
			}
			require.Equal(t, http.StatusServiceUnavailable, rec.Code)
			require.False(t, rd.Ready)
			require.Contains(t, rd.Reason, tc.reason)
		})
	}
}

func TestReadinessIsCached(t *testing.T) {
	o, r := healthy()
	rd := NewReadiness(o, r)
	for i := 0; i < 10; i++ {
		require.True(t, rd.Check(context.Background()).Ready)
	}
	require.Equal(t, 1, o.reads, "one quorum round per second at most")
	rec := httptest.NewRecorder()
	rd.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, PathReady, nil))
	require.Equal(t, http.StatusMethodNotAllowed, rec.Code)
}

// TestNodeAuth: how a node's configuration becomes its admin
// authentication.
func TestNodeAuth(t *testing.T) {
	dir := t.TempDir()
	cfg := &config.Node{AdminListen: "127.0.0.1:6433", DataDir: filepath.Join(dir, "data")}

	// loopback, nothing configured: a token generated into the data dir
	a, file, err := NodeAuth(cfg, nil, quiet)
	require.NoError(t, err)
	require.Equal(t, filepath.Join(cfg.DataDir, TokenFileName), file)
	generated, err := a.Token.Token()
	require.NoError(t, err)
	a, _, err = NodeAuth(cfg, nil, quiet)
	require.NoError(t, err)
	again, err := a.Token.Token()
	require.NoError(t, err)
	require.Equal(t, generated, again, "kept across restarts")

	// off loopback, nothing configured: refused (config.Validate says so first)
	cfg.AdminListen = "0.0.0.0:6433"
	_, _, err = NodeAuth(cfg, nil, quiet)
	require.ErrorIs(t, err, config.ErrAnonymousAdmin)

	cfg.AdminToken = token
	a, file, err = NodeAuth(cfg, nil, quiet)
	require.NoError(t, err)
	require.Empty(t, file)
	got, err := a.Token.Token()
	require.NoError(t, err)
	require.Equal(t, token, string(got))

	cfg.AdminToken, cfg.AdminTokenFile = "", filepath.Join(dir, "token")
	_, _, err = NodeAuth(cfg, nil, quiet)
	require.ErrorIs(t, err, ErrNoToken, "a missing token file stops the node")
	require.NoError(t, os.WriteFile(cfg.AdminTokenFile, []byte(token+"\n"), 0o600))
	a, file, err = NodeAuth(cfg, nil, quiet)
	require.NoError(t, err)
	require.Equal(t, cfg.AdminTokenFile, file)
	got, err = a.Token.Token()
	require.NoError(t, err)
	require.Equal(t, token, string(got))

	_, err = certs.CreateCA(certs.Options{Dir: dir})
	require.NoError(t, err)
	_, err = certs.CreateNode(certs.Options{Dir: dir}, 1, []string{"127.0.0.1"})
	require.NoError(t, err)
	peer, err := certs.LoadPeer(certs.Files{Cert: filepath.Join(dir, "node-1.crt"), Key: filepath.Join(dir, "node-1.key"), CA: filepath.Join(dir, "ca.crt")}, 1)
	require.NoError(t, err)
	a, _, err = NodeAuth(&config.Node{AdminListen: "0.0.0.0:6433"}, peer, quiet)
	require.NoError(t, err)
	require.NotNil(t, a.TLS)
	require.Nil(t, a.Token)
	require.NoError(t, a.validate())
}
