package transport

import (
	"bytes"
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/ordo-db/ordo/internal/certs"
	ordov1 "github.com/ordo-db/ordo/pkg/api/ordo/v1"
)

// certDir is a CA with node certificates, made as `ordo cert` makes them.
type certDir struct {
	t   *testing.T
	dir string
}

func newCertDir(t *testing.T, ids ...uint64) *certDir {
	t.Helper()
	d := &certDir{t: t, dir: t.TempDir()}
	if _, err := certs.CreateCA(certs.Options{Dir: d.dir}); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if _, err := certs.CreateNode(certs.Options{Dir: d.dir}, id, []string{"127.0.0.1"}); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// peer loads node id's peer TLS.
func (d *certDir) peer(id uint64) *certs.Peer {
	d.t.Helper()
	cert, key := certs.NodeFiles(id)
	p, err := certs.LoadPeer(certs.Files{Cert: filepath.Join(d.dir, cert), Key: filepath.Join(d.dir, key), CA: filepath.Join(d.dir, certs.CACertFile)}, id)
	if err != nil {
		d.t.Fatal(err)
	}
	return p
}

type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startTLS starts a transport for node id that presents tlsPeer's
// certificate and binds connections to node ids.
func startTLS(t *testing.T, id uint64, tlsPeer *certs.Peer, h Handler, logs *logBuffer) *GRPC {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tr, err := NewGRPC(GRPCConfig{ID: id, Listener: l, IdleApplied: 10 * time.Millisecond,
		ServerTLS: tlsPeer.ServerConfig(), ClientTLS: tlsPeer.ClientConfig(), PeerID: certs.NodeID,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Start(h); err != nil {
		t.Fatal(err)
	}
	return tr
}

func heartbeat(from, to uint64) []raftpb.Message {
	return []raftpb.Message{{Type: raftpb.MsgHeartbeat, Term: 1, From: from, To: to}}
}

// sendFor keeps sending from tr to node `to` for d (a refused sender
// retries), and returns whether h received anything.
func sendFor(tr *GRPC, from, to uint64, h *handler, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		tr.Send(heartbeat(from, to))
		if h.count() > 0 {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return h.count() > 0
}

func waitLog(t *testing.T, logs *logBuffer, want string) {
	t.Helper()
	waitFor(t, "log line "+want, func() bool { return strings.Contains(logs.String(), want) })
}

// TestIdentityRightCertificate: nodes with their own certificates of the
// cluster's CA talk both ways.
func TestIdentityRightCertificate(t *testing.T) {
	defer goleak.VerifyNone(t)
	d := newCertDir(t, 1, 2)
	var logs logBuffer
	h1, h2 := newHandler(), newHandler()
	t1, t2 := startTLS(t, 1, d.peer(1), h1, &logs), startTLS(t, 2, d.peer(2), h2, &logs)
	defer t2.Stop()
	defer t1.Stop()
	t1.AddPeer(2, t2.Addr())
	t2.AddPeer(1, t1.Addr())
	if !sendFor(t1, 1, 2, h2, 5*time.Second) || !sendFor(t2, 2, 1, h1, 5*time.Second) {
		t.Fatalf("nodes with the right certificates could not talk; log:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "refused") {
		t.Fatalf("refusals between good nodes:\n%s", logs.String())
	}
}

// TestIdentityWrongNode: node 3 presenting node 2's certificate (same CA)
// is refused both ways: its stream claiming node 3 is closed and nothing
// it sent is stepped, and node 1 dialing "node 3" refuses the node-2
// certificate it is shown.
func TestIdentityWrongNode(t *testing.T) {
	defer goleak.VerifyNone(t)
	d := newCertDir(t, 1, 2)
	var logs1, logs3 logBuffer
	h1, h3 := newHandler(), newHandler()
	t1 := startTLS(t, 1, d.peer(1), h1, &logs1)
	defer t1.Stop()
	impostor := startTLS(t, 3, d.peer(2), h3, &logs3)
	defer impostor.Stop()

	impostor.AddPeer(1, t1.Addr())
	if sendFor(impostor, 3, 1, h1, time.Second) {
		t.Fatal("node 1 stepped a message from node 3 sent with node 2's certificate")
	}
	waitLog(t, &logs1, "certificate_node=2 claimed_node=3")
	waitLog(t, &logs3, "a peer refused this node's stream")

	t1.AddPeer(3, impostor.Addr())
	if sendFor(t1, 1, 3, h3, time.Second) {
		t.Fatal("node 1 sent to a peer whose certificate is node 2's, dialed as node 3")
	}
	waitLog(t, &logs1, "dialed as node 3, presents the certificate of node 2")
}

// TestIdentityForgedMessages: a connection with node 2's certificate may
// send batches from node 2 only, each message from node 2 to the receiver;
// a batch that smuggles a message from node 3 is refused whole.
func TestIdentityForgedMessages(t *testing.T) {
	defer goleak.VerifyNone(t)
	d := newCertDir(t, 1, 2)
	var logs logBuffer
	h1 := newHandler()
	t1 := startTLS(t, 1, d.peer(1), h1, &logs)
	defer t1.Stop()

	conn, err := grpc.NewClient(t1.Addr(), grpc.WithTransportCredentials(credentials.NewTLS(d.peer(2).ClientConfig())))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := ordov1.NewRaftClient(conn)
	send := func(b *ordov1.RaftBatch) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := client.Stream(ctx)
		if err != nil {
			return err
		}
		if err := s.Send(b); err != nil && err.Error() != "EOF" {
			return err
		}
		_, err = s.CloseAndRecv()
		return err
	}
	raw := func(ms ...raftpb.Message) [][]byte {
		var out [][]byte
		for _, m := range ms {
			b, err := m.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, b)
		}
		return out
	}
	good := raftpb.Message{Type: raftpb.MsgHeartbeat, Term: 1, From: 2, To: 1}
	for name, c := range map[string]struct {
		b    *ordov1.RaftBatch
		code codes.Code
	}{
		"batch claims node 3":         {&ordov1.RaftBatch{From: 3, To: 1, Messages: raw(raftpb.Message{Type: raftpb.MsgHeartbeat, Term: 1, From: 3, To: 1})}, codes.PermissionDenied},
		"message from node 3":         {&ordov1.RaftBatch{From: 2, To: 1, Messages: raw(good, raftpb.Message{Type: raftpb.MsgApp, Term: 1, From: 3, To: 1})}, codes.PermissionDenied},
		"message to another node":     {&ordov1.RaftBatch{From: 2, To: 1, Messages: raw(good, raftpb.Message{Type: raftpb.MsgApp, Term: 1, From: 2, To: 3})}, codes.PermissionDenied},
		"batch addressed to node 3":   {&ordov1.RaftBatch{From: 2, To: 3, Messages: raw(good)}, codes.InvalidArgument},
		"the right sender and target": {&ordov1.RaftBatch{From: 2, To: 1, Messages: raw(good, good)}, codes.OK},
		// Malformed: refused whole too, whoever sends it.
		"unknown message type":  {&ordov1.RaftBatch{From: 2, To: 1, Messages: raw(good, raftpb.Message{Type: 99, Term: 1, From: 2, To: 1})}, codes.InvalidArgument},
		"negative message type": {&ordov1.RaftBatch{From: 2, To: 1, Messages: raw(good, raftpb.Message{Type: -1, Term: 1, From: 2, To: 1})}, codes.InvalidArgument},
		"a local message":       {&ordov1.RaftBatch{From: 2, To: 1, Messages: raw(good, raftpb.Message{Type: raftpb.MsgStorageAppendResp, Term: 1, From: 2, To: 1})}, codes.InvalidArgument},
		"a vote without a term": {&ordov1.RaftBatch{From: 2, To: 1, Messages: raw(good, raftpb.Message{Type: raftpb.MsgPreVote, From: 2, To: 1})}, codes.InvalidArgument},
		"entries out of sequence": {&ordov1.RaftBatch{From: 2, To: 1, Messages: raw(good, raftpb.Message{Type: raftpb.MsgApp, Term: 2, From: 2, To: 1, Index: 5,
			Entries: []raftpb.Entry{{Index: 6, Term: 2}, {Index: 2, Term: 2}}})}, codes.InvalidArgument},
		"not a raft message": {&ordov1.RaftBatch{From: 2, To: 1, Messages: [][]byte{{0xff, 0xff}}}, codes.InvalidArgument},
	} {
		before := h1.count()
		err := send(c.b)
		if status.Code(err) != c.code {
			t.Fatalf("%s: got %v, want %v", name, err, c.code)
		}
		if c.code != codes.OK && h1.count() != before {
			t.Fatalf("%s: %d messages of a refused batch were stepped", name, h1.count()-before)
		}
		if c.code == codes.OK && h1.count() != before+2 {
			t.Fatalf("%s: %d messages stepped, want 2", name, h1.count()-before)
		}
	}
	waitLog(t, &logs, "message_from=3")
}

// TestIdentityOtherCA: a node certificate of another CA, even for a member
// id, and a client certificate of the cluster's CA (no node id) are refused
// at the handshake by whichever end checks it, logged.
func TestIdentityOtherCA(t *testing.T) {
	defer goleak.VerifyNone(t)
	d := newCertDir(t, 1, 2)
	other := newCertDir(t, 2)
	var logs, strangerLogs logBuffer
	h1, h2 := newHandler(), newHandler()
	t1 := startTLS(t, 1, d.peer(1), h1, &logs)
	defer t1.Stop()
	stranger := startTLS(t, 2, other.peer(2), h2, &strangerLogs)
	defer stranger.Stop()
	stranger.AddPeer(1, t1.Addr())
	if sendFor(stranger, 2, 1, h1, time.Second) {
		t.Fatal("a certificate of another CA was accepted")
	}
	waitLog(t, &strangerLogs, "refused the certificate of a peer dialed") // it does not trust node 1 either
	t1.AddPeer(2, stranger.Addr())
	if sendFor(t1, 1, 2, h2, time.Second) {
		t.Fatal("node 1 sent to a peer with a certificate of another CA")
	}
	waitLog(t, &logs, "refused the certificate of a peer dialed")

	// The server's own check, against clients that trust anything: a node
	// certificate of another CA, a client certificate of the right CA.
	if _, err := certs.CreateClient(certs.Options{Dir: d.dir}, "alice"); err != nil {
		t.Fatal(err)
	}
	cert, key := certs.ClientFiles("alice")
	alice, err := tls.LoadX509KeyPair(filepath.Join(d.dir, cert), filepath.Join(d.dir, key))
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		cfg  *tls.Config
		want string
	}{
		"another CA":  {other.peer(2).ClientConfig(), "certificate signed by unknown authority"},
		"client cert": {d.peer(2).ClientConfig(), "names no Ordo node id"},
	} {
		c.cfg.VerifyConnection = nil // trusts any server
		if name == "client cert" {
			c.cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &alice, nil }
		}
		conn, err := grpc.NewClient(t1.Addr(), grpc.WithTransportCredentials(credentials.NewTLS(c.cfg)))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s, err := ordov1.NewRaftClient(conn).Stream(ctx)
		if err == nil {
			b, _ := heartbeat(2, 1)[0].Marshal()
			_ = s.Send(&ordov1.RaftBatch{From: 2, To: 1, Messages: [][]byte{b}})
			_, err = s.CloseAndRecv()
		}
		cancel()
		conn.Close()
		if err == nil || h1.count() != 0 {
			t.Fatalf("%s: reached the Raft service: %v, %d messages", name, err, h1.count())
		}
		waitLog(t, &logs, c.want)
	}
	if !strings.Contains(logs.String(), "refused a peer connection") || !strings.Contains(logs.String(), "remote=127.0.0.1:") {
		t.Fatalf("refused handshakes are not logged with their address:\n%s", logs.String())
	}
}

func TestPeerIDNeedsMutualTLS(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := NewGRPC(GRPCConfig{ID: 1, Listener: l, PeerID: certs.NodeID}); err == nil {
		t.Fatal("PeerID without TLS accepted")
	}
	if _, err := NewGRPC(GRPCConfig{ID: 1, Listener: l, PeerID: certs.NodeID, ServerTLS: &tls.Config{}, ClientTLS: &tls.Config{}}); err == nil {
		t.Fatal("PeerID with a server that asks for no client certificate accepted")
	}
}
