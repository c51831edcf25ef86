package config

import (
	"os"
	"path/filepath"
	"testing"

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
