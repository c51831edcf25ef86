package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/ordo-db/ordo/internal/admin"
	"github.com/ordo-db/ordo/internal/certs"
	ordov1 "github.com/ordo-db/ordo/pkg/api/ordo/v1"
	"github.com/ordo-db/ordo/pkg/config"
)

// TestPeerTLSRefusesImpostors runs three real `ordo start` processes with
// mutual TLS between them (certificates made as `ordo cert` makes them),
// checks they replicate, then speaks to node 1's peer port as an impostor:
// node 2's certificate used to send as node 3, a client certificate of
// another CA, a client certificate of the cluster's CA (no node id), and
// node 2's own certificate sending malformed Raft messages. Each is refused
// and logged by node 1, and the cluster keeps working. Clients must use TLS
// (the node's certificate made by `ordo cert create-server`); SIGHUP
// reloads both the peer and the client certificate.
func TestPeerTLSRefusesImpostors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, err := certs.CreateCA(certs.Options{Dir: dir})
	require.NoError(t, err)
	for id := uint64(1); id <= 3; id++ {
		_, err := certs.CreateNode(certs.Options{Dir: dir}, id, []string{"127.0.0.1"})
		require.NoError(t, err)
	}
	_, err = certs.CreateClient(certs.Options{Dir: dir}, "alice")
	require.NoError(t, err)
	_, err = certs.CreateServer(certs.Options{Dir: dir}, "clients", []string{"127.0.0.1"})
	require.NoError(t, err)
	otherDir := t.TempDir()
	_, err = certs.CreateCA(certs.Options{Dir: otherDir})
	require.NoError(t, err)
	_, err = certs.CreateClient(certs.Options{Dir: otherDir}, "mallory")
	require.NoError(t, err)

	c := startProcCluster(t, 3, "dbsm", fmt.Sprintf("peer_tls: {cert_file: %[1]s/node-@ID@.crt, key_file: %[1]s/node-@ID@.key, ca_file: %[1]s/ca.crt}", dir),
		fmt.Sprintf("tls: {cert_file: %[1]s/server-clients.crt, key_file: %[1]s/server-clients.key, allow_plaintext: false}", dir))
	ctx := context.Background()
	// Clients must use TLS, and can verify the node's certificate with the CA.
	tlsDSN := strings.Replace(c.dsn(0), "sslmode=disable", "sslmode=verify-full&sslrootcert="+filepath.Join(dir, "ca.crt"), 1)
	_, err = pgx.Connect(ctx, c.dsn(0))
	require.Error(t, err, "a plaintext client")
	require.Equal(t, "28000", sqlstate(err), "%v", err)
	clientSerial := func() string {
		conn, err := pgx.Connect(ctx, tlsDSN)
		require.NoError(t, err)
		defer conn.Close(ctx)
		return conn.PgConn().Conn().(*tls.Conn).ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	replicated := func(table string) {
		t.Helper()
		conn, err := pgx.Connect(ctx, tlsDSN)
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "CREATE TABLE "+table+" (k int PRIMARY KEY)")
		require.NoError(t, err)
		_, err = conn.Exec(ctx, "INSERT INTO "+table+" VALUES (1)")
		require.NoError(t, err)
		require.Eventually(t, func() bool { return c.settled("SELECT count(*)::text FROM " + table) }, 30*time.Second, 100*time.Millisecond, c.state())
	}
	replicated("over_mtls")

	n1, err := config.Parse(c.config(0))
	require.NoError(t, err)
	node1 := func() string {
		b, _ := os.ReadFile(filepath.Join(c.dir, "node1.log"))
		return string(b)
	}

	node2, err := certs.LoadPeer(certs.Files{Cert: filepath.Join(dir, "node-2.crt"), Key: filepath.Join(dir, "node-2.key"), CA: filepath.Join(dir, "ca.crt")}, 2)
	require.NoError(t, err)
	withCert := func(file, name string) *tls.Config {
		cert, key := certs.ClientFiles(name)
		pair, err := tls.LoadX509KeyPair(filepath.Join(file, cert), filepath.Join(file, key))
		require.NoError(t, err)
		cfg := node2.ClientConfig()
		cfg.VerifyConnection = nil // an impostor trusts any server
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &pair, nil }
		return cfg
	}
	// sendMsg opens a stream to node 1 with cfg and sends one message as
	// node `from`; it returns the status the stream ended with.
	sendMsg := func(cfg *tls.Config, from uint64, msg raftpb.Message) error {
		conn, err := grpc.NewClient(n1.PeerListen, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		require.NoError(t, err)
		defer conn.Close()
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		s, err := ordov1.NewRaftClient(conn).Stream(sctx)
		if err != nil {
			return err
		}
		msg.From, msg.To = from, 1
		m, err := msg.Marshal()
		require.NoError(t, err)
		_ = s.Send(&ordov1.RaftBatch{From: from, To: 1, Messages: [][]byte{m}})
		_, err = s.CloseAndRecv()
		return err
	}

	send := func(cfg *tls.Config, from uint64) error {
		return sendMsg(cfg, from, raftpb.Message{Type: raftpb.MsgHeartbeat})
	}

	// node 2's certificate, sending as node 3
	err = send(node2.ClientConfig(), 3)
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	require.Eventually(t, func() bool { return strings.Contains(node1(), `"certificate_node":2,"claimed_node":3`) }, 10*time.Second, 50*time.Millisecond, node1())

	// a client certificate of another CA
	err = send(withCert(otherDir, "mallory"), 2)
	require.Error(t, err)
	require.Eventually(t, func() bool { return strings.Contains(node1(), "certificate signed by unknown authority") }, 10*time.Second, 50*time.Millisecond, node1())

	// a client certificate of the cluster's CA names no node
	err = send(withCert(dir, "alice"), 2)
	require.Error(t, err)
	require.Eventually(t, func() bool { return strings.Contains(node1(), "names no Ordo node id") }, 10*time.Second, 50*time.Millisecond, node1())

	// node 2's own certificate, but messages raft would panic on or take
	// for its own: refused before raft sees them
	for _, m := range []raftpb.Message{{Type: -3, Term: 1}, {Type: raftpb.MsgStorageAppendResp, Term: 1, Index: 1 << 40}} {
		err = sendMsg(node2.ClientConfig(), 2, m)
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
	}
	require.Eventually(t, func() bool { return strings.Contains(node1(), "refused a peer stream: a malformed raft message") }, 10*time.Second, 50*time.Millisecond, node1())

	// none of it disturbed the cluster
	replicated("after_impostors")
	for i := range c.metrics {
		require.Equal(t, 0.0, c.metric(i, "ordo_insecure"), "node %d", i+1)
	}

	// Rotation: a new certificate for node 1 on disk and SIGHUP; new peer
	// connections to node 1 are shown the new certificate.
	served := func() string {
		cfg := node2.ClientConfig()
		cfg.NextProtos = []string{"h2"}
		conn, err := tls.Dial("tcp", n1.PeerListen, cfg)
		require.NoError(t, err)
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	before, clientBefore := served(), clientSerial()
	_, err = certs.CreateNode(certs.Options{Dir: dir, Overwrite: true}, 1, []string{"127.0.0.1"})
	require.NoError(t, err)
	_, err = certs.CreateServer(certs.Options{Dir: dir, Overwrite: true}, "clients", []string{"127.0.0.1"})
	require.NoError(t, err)
	require.NoError(t, c.procs[0].Process.Signal(syscall.SIGHUP))
	// (the node's own watch may see the new files first: either reloads)
	require.Eventually(t, func() bool {
		return strings.Contains(node1(), "peer TLS files reloaded") || strings.Contains(node1(), "peer TLS files changed: reloaded")
	},
		10*time.Second, 50*time.Millisecond, node1())
	require.NotEqual(t, before, served())
	// the client certificate too, on the same signal
	require.Eventually(t, func() bool {
		return strings.Contains(node1(), "client TLS files reloaded") || strings.Contains(node1(), "client TLS files changed: reloaded")
	},
		10*time.Second, 50*time.Millisecond, node1())
	require.NotEqual(t, clientBefore, clientSerial())
	replicated("after_rotation")

	// A removed node is refused, its certificate valid as it is.
	node3, err := certs.LoadPeer(certs.Files{Cert: filepath.Join(dir, "node-3.crt"), Key: filepath.Join(dir, "node-3.key"), CA: filepath.Join(dir, "ca.crt")}, 3)
	require.NoError(t, err)
	asNode3 := func() error {
		return sendMsg(node3.ClientConfig(), 3, raftpb.Message{Type: raftpb.MsgHeartbeat, Term: 1}) // a stale term: raft ignores it
	}
	require.NoError(t, asNode3(), "node 3 is a member")
	adminAddr, err := admin.ReadAddrFile(n1.DataDir)
	require.NoError(t, err)
	cert, key := certs.ClientFiles("alice")
	out, errOut, code := buildOrdoctl(t).run("member", "remove", "3", "--endpoints", adminAddr,
		"--cert", filepath.Join(dir, cert), "--key", filepath.Join(dir, key), "--cacert", filepath.Join(dir, "ca.crt"))
	require.Zero(t, code, "ordoctl member remove: %s%s", out, errOut)
	require.Eventually(t, func() bool {
		err := asNode3()
		return status.Code(err) == codes.FailedPrecondition && strings.Contains(err.Error(), "removed")
	}, 10*time.Second, 100*time.Millisecond, "node 1 still takes node 3's messages")
}
