package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/internal/certs"
	"github.com/ordo-db/ordo/pkg/config"
)

func run(cmd *cobra.Command, args ...string) (string, error) {
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

// TestCertCommands walks the documented steps: a CA, three nodes, a
// client; each node's files make a configuration a node starts with.
func TestCertCommands(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	out, err := run(certCmd(), "create-ca", "--dir", dir)
	require.NoError(t, err)
	require.Contains(t, out, "wrote "+filepath.Join(dir, "ca.key"))
	for id := 1; id <= 3; id++ {
		_, err := run(certCmd(), "create-node", "--dir", dir, "--id", fmt.Sprint(id), "--host", "127.0.0.1", "--host", fmt.Sprintf("node%d.example", id))
		require.NoError(t, err)
	}
	_, err = run(certCmd(), "create-client", "--dir", dir, "--name", "alice")
	require.NoError(t, err)
	_, err = run(certCmd(), "create-server", "--dir", dir, "--name", "db", "--host", "db.example")
	require.NoError(t, err)
	for name, mode := range map[string]os.FileMode{"ca.crt": 0o644, "ca.key": 0o600, "node-2.crt": 0o644, "node-2.key": 0o600, "client-alice.key": 0o600,
		"server-db.crt": 0o644, "server-db.key": 0o600} {
		st, err := os.Stat(filepath.Join(dir, name))
		require.NoError(t, err)
		require.Equal(t, mode, st.Mode().Perm(), name)
	}

	// existing files are kept unless --overwrite
	_, err = run(certCmd(), "create-node", "--dir", dir, "--id", "2", "--host", "127.0.0.1")
	require.ErrorIs(t, err, certs.ErrExists)
	require.ErrorContains(t, err, "--overwrite")
	_, err = run(certCmd(), "create-node", "--dir", dir, "--id", "2", "--host", "127.0.0.1", "--overwrite")
	require.NoError(t, err)
	_, err = run(certCmd(), "create-node", "--dir", dir, "--id", "4")
	require.ErrorContains(t, err, "host")

	// node 2's files make a valid configuration on a public address
	cfg := filepath.Join(t.TempDir(), "node.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`id: 2
listen: 0.0.0.0:5433
peer_listen: 0.0.0.0:7001
postgres: postgres://ordo@127.0.0.1:5432/postgres
data_dir: /tmp/x
peers: {1: "node1.example:7001", 2: "node2.example:7001", 3: "node3.example:7001"}
peer_tls: {cert_file: %[1]s/node-2.crt, key_file: %[1]s/node-2.key, ca_file: %[1]s/ca.crt}
`, dir)), 0o600))
	n, err := config.Load(cfg)
	require.NoError(t, err)
	_, err = certs.LoadPeer(certs.Files{Cert: n.PeerTLS.CertFile, Key: n.PeerTLS.KeyFile, CA: n.PeerTLS.CAFile}, uint64(n.ID))
	require.NoError(t, err)
}

// TestStartRefusesPlaintextPeers: `ordo start` on a public peer address
// without peer TLS stops before touching anything, saying how to fix it.
func TestStartRefusesPlaintextPeers(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "node.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(`id: 1
listen: 0.0.0.0:5433
peer_listen: 0.0.0.0:7001
postgres: postgres://ordo@127.0.0.1:1/postgres
data_dir: /tmp/x
peers: {1: "10.0.0.1:7001"}
`), 0o600))
	_, err := run(startCmd(), "--config", cfg)
	require.ErrorIs(t, err, config.ErrPlaintextPeers)
	for _, want := range []string{"peer_listen is 0.0.0.0:7001", "ordo cert create-ca", "docs/security.md", "insecure: true"} {
		require.ErrorContains(t, err, want)
	}
}
