package config

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func write(t *testing.T, text string) string {
	p := filepath.Join(t.TempDir(), "node.yaml")
	require.NoError(t, os.WriteFile(p, []byte(text), 0o600))
	return p
}

func TestLoadValid(t *testing.T) {
	n, err := Load(write(t, `
id: 2
listen: 127.0.0.1:5433
peer_listen: 127.0.0.1:7002
metrics_listen: 127.0.0.1:9102
postgres: postgres://ordo:ordo@127.0.0.1:5533/postgres
data_dir: /tmp/ordo2
protocol: dbsm-si
peers:
  1: 127.0.0.1:7001
  2: 127.0.0.1:7002
  3: 127.0.0.1:7003
`))
	require.NoError(t, err)
	require.Equal(t, uint32(2), n.ID)
	require.Equal(t, "dbsm-si", n.Protocol)
	require.Len(t, n.Peers, 3)
	require.True(t, *n.TLS.AllowPlaintext)
	require.NotZero(t, n.CommitTimeout)
}

func TestLoadReportsEveryProblem(t *testing.T) {
	_, err := Load(write(t, `
id: 0
listen: nonsense
protocol: paxos
peers:
  1: 127.0.0.1:7001
`))
	require.Error(t, err)
	for _, want := range []string{"id: must be between", "listen: \"nonsense\" is not host:port", "peer_listen: required",
		"postgres: required", "data_dir: required", "protocol: \"paxos\""} {
		require.Contains(t, err.Error(), want)
	}
}

func TestUnknownFieldIsAnError(t *testing.T) {
	_, err := Load(write(t, "id: 1\nlisten_addr: 127.0.0.1:1\n"))
	require.ErrorContains(t, err, "listen_addr")
}

const base = `
id: 1
listen: 127.0.0.1:5433
postgres: postgres://ordo:ordo@127.0.0.1:5533/postgres
data_dir: /tmp/ordo1
peers:
  1: "%s"
`

func node(peerListen string, extra ...string) string {
	s := fmt.Sprintf(base, peerListen) + "peer_listen: \"" + peerListen + "\"\n"
	for _, e := range extra {
		s += e + "\n"
	}
	return s
}

// TestPlaintextPeersRefused: a node reachable from other hosts without peer
// TLS does not start unless told insecure: true, and the error says how to
// fix it.
func TestPlaintextPeersRefused(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:7001", "10.0.0.1:7001", ":7001", "[::]:7001", "ordo1:7001"} {
		_, err := Load(write(t, node(addr)))
		require.ErrorIs(t, err, ErrPlaintextPeers, addr)
		for _, want := range []string{"peer_listen is " + addr, "ordo cert create-ca", "ordo cert create-node", "docs/security.md", "insecure: true"} {
			require.ErrorContains(t, err, want, addr)
		}
	}
}

func TestLoopbackPlaintextPeersAccepted(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:7001", "127.0.0.2:7001", "[::1]:7001", "localhost:7001"} {
		n, err := Load(write(t, node(addr)))
		require.NoError(t, err, addr)
		require.False(t, n.Insecure)
	}
}

func TestInsecureAccepted(t *testing.T) {
	n, err := Load(write(t, node("0.0.0.0:7001", "insecure: true")))
	require.NoError(t, err)
	require.True(t, n.Insecure)
}

func TestPeerTLSAccepted(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"node.crt", "node.key", "ca.crt"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o600))
	}
	tls := fmt.Sprintf("peer_tls: {cert_file: %s/node.crt, key_file: %s/node.key, ca_file: %s/ca.crt}", dir, dir, dir)
	_, err := Load(write(t, node("0.0.0.0:7001", tls)))
	require.NoError(t, err)

	// insecure and peer TLS contradict each other
	_, err = Load(write(t, node("0.0.0.0:7001", tls, "insecure: true")))
	require.ErrorContains(t, err, "insecure: true and peer_tls both set")

	// Parse does not look for the files (they are on another machine);
	// Load does.
	far := "peer_tls: {cert_file: /nonexistent/node.crt, key_file: /nonexistent/node.key, ca_file: /nonexistent/ca.crt}"
	_, err = Parse(write(t, node("0.0.0.0:7001", far)))
	require.NoError(t, err)
	_, err = Load(write(t, node("0.0.0.0:7001", far)))
	require.ErrorIs(t, err, os.ErrNotExist)
	// and still refuses plaintext peers
	_, err = Parse(write(t, node("0.0.0.0:7001")))
	require.ErrorIs(t, err, ErrPlaintextPeers)
}

// TestAdminListenDefault: without admin_listen, the admin API listens on
// a free loopback port.
func TestAdminListenDefault(t *testing.T) {
	n, err := Load(write(t, node("127.0.0.1:7001")))
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:0", n.AdminListen)
	require.True(t, Loopback(n.AdminListen))
}

// TestAnonymousAdminRefused: an admin API reachable from other hosts
// without peer TLS or a token does not start, and the error says how to
// fix it; a token or peer TLS makes it acceptable.
func TestAnonymousAdminRefused(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:7401", "10.0.0.1:7401", ":7401", "ordo1:7401"} {
		_, err := Load(write(t, node("127.0.0.1:7001", "admin_listen: \""+addr+"\"")))
		require.ErrorIs(t, err, ErrAnonymousAdmin, addr)
		for _, want := range []string{"admin_listen is " + addr, "peer_tls", "admin_token_file", "docs/admin.md"} {
			require.ErrorContains(t, err, want, addr)
		}
	}
	n, err := Load(write(t, node("127.0.0.1:7001", "admin_listen: 0.0.0.0:7401", "admin_token: 0123456789abcdef0123")))
	require.NoError(t, err)
	require.Equal(t, "0123456789abcdef0123", n.AdminToken)

	far := "peer_tls: {cert_file: /nonexistent/node.crt, key_file: /nonexistent/node.key, ca_file: /nonexistent/ca.crt}"
	_, err = Parse(write(t, node("0.0.0.0:7001", far, "admin_listen: 0.0.0.0:7401")))
	require.NoError(t, err, "peer TLS: the admin API requires client certificates")

	// the token file must exist (Load), not when parsing for elsewhere
	_, err = Load(write(t, node("127.0.0.1:7001", "admin_listen: 0.0.0.0:7401", "admin_token_file: /nonexistent/token")))
	require.ErrorIs(t, err, os.ErrNotExist)
	_, err = Parse(write(t, node("127.0.0.1:7001", "admin_listen: 0.0.0.0:7401", "admin_token_file: /nonexistent/token")))
	require.NoError(t, err)
}

func TestAdminTokenProblems(t *testing.T) {
	_, err := Load(write(t, node("127.0.0.1:7001", "admin_token: short")))
	require.ErrorContains(t, err, "admin_token: at least 16 characters")
	_, err = Parse(write(t, node("127.0.0.1:7001", "admin_token: 0123456789abcdef0123", "admin_token_file: /x")))
	require.ErrorContains(t, err, "admin_token and admin_token_file both set")
	far := "peer_tls: {cert_file: /nonexistent/node.crt, key_file: /nonexistent/node.key, ca_file: /nonexistent/ca.crt}"
	_, err = Parse(write(t, node("0.0.0.0:7001", far, "admin_token_file: /x")))
	require.ErrorContains(t, err, "not used with peer_tls")
	_, err = Parse(write(t, node("127.0.0.1:7001", "admin_listen: nonsense")))
	require.ErrorContains(t, err, `admin_listen: "nonsense" is not host:port`)
}

func TestClientLimits(t *testing.T) {
	n, err := Load(write(t, node("127.0.0.1:7001")))
	require.NoError(t, err)
	require.Equal(t, 60*time.Second, n.AuthTimeout)
	require.Equal(t, 256, n.MaxUnauthenticated)
	require.Equal(t, 64, n.MaxUnauthenticatedPerSource)
	require.Equal(t, 10000, n.MaxStartupPacketBytes)

	n, err = Load(write(t, node("127.0.0.1:7001")+"auth_timeout: 10s\nmax_unauthenticated_connections: 50\nmax_unauthenticated_per_source: 5\nmax_startup_packet_bytes: 4096\n"))
	require.NoError(t, err)
	require.Equal(t, 10*time.Second, n.AuthTimeout)
	require.Equal(t, 50, n.MaxUnauthenticated)
	require.Equal(t, 5, n.MaxUnauthenticatedPerSource)
	require.Equal(t, 4096, n.MaxStartupPacketBytes)

	_, err = Load(write(t, node("127.0.0.1:7001")+"auth_timeout: 10ms\nmax_unauthenticated_connections: 8\nmax_unauthenticated_per_source: 9\nmax_startup_packet_bytes: 100\n"))
	for _, want := range []string{"auth_timeout: must be at least 1s", "max_unauthenticated_per_source: must be between 1 and max_unauthenticated_connections (8), got 9",
		"max_startup_packet_bytes: must be between 1024"} {
		require.ErrorContains(t, err, want)
	}
}
