package e2e

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/internal/node"
	"github.com/ordo-db/ordo/internal/pglocal"
	"github.com/ordo-db/ordo/pkg/config"
)

// TestClientsLeaveTheNodeItsConnections: clients of node 2 up to its
// limit leave PostgreSQL room for the connections the node opens for
// itself. With the default limit of 1000 sessions against PostgreSQL's
// max_connections (200 here), clients took every slot: then nothing could
// connect to end a backend that blocked an apply, and node 2 stopped
// applying. Here a backend connected directly holds a row an update from
// node 1 changes: node 2 ends it (from a connection of its own) and
// applies the update while its clients hold every session it admits.
func TestClientsLeaveTheNodeItsConnections(t *testing.T) {
	c := startCluster(t, 3, "dbsm-si")
	ctx := context.Background()
	_, err := c.connect(0).Exec(ctx, "CREATE TABLE slots (id int PRIMARY KEY, v int); INSERT INTO slots VALUES (1, 0)")
	require.NoError(t, err)
	c.waitConverged()

	var clients []*pgx.Conn
	defer func() {
		for _, cn := range clients {
			cn.Close(context.Background())
		}
	}()
	var refused error
	for len(clients) < 400 {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		cn, err := pgx.Connect(cctx, c.dsn(1))
		cancel()
		if err != nil {
			refused = err
			break
		}
		clients = append(clients, cn)
	}
	var pe *pgconn.PgError
	require.True(t, errors.As(refused, &pe), "the client beyond the limit: %v", refused)
	require.Equal(t, "53300", pe.Code)
	require.Contains(t, pe.Message, "ordo max connections", "the node's limit, not PostgreSQL's")
	t.Logf("%d client sessions admitted on node 2", len(clients))

	blocker, err := c.direct(1).Begin(ctx)
	require.NoError(t, err, "room left on node 2's PostgreSQL")
	defer blocker.Rollback(context.Background())
	_, err = blocker.Exec(ctx, "SELECT v FROM slots WHERE id = 1 FOR UPDATE")
	require.NoError(t, err)
	_, err = c.connect(0).Exec(ctx, "UPDATE slots SET v = 1 WHERE id = 1")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var v int
		err := clients[0].QueryRow(ctx, "SELECT v FROM slots WHERE id = 1").Scan(&v)
		return err == nil && v == 1
	}, 20*time.Second, 100*time.Millisecond, "node 2 applies the update")
}

// TestNodeRefusesPostgresWithoutPreparedTransactions: PostgreSQL's
// default max_prepared_transactions is 0, and Ordo prepares every update
// transaction. The node started, and then failed every update commit.
func TestNodeRefusesPostgresWithoutPreparedTransactions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pg, err := pglocal.Start(ctx, pglocal.Options{N: 1, Settings: map[string]string{"max_prepared_transactions": "0"}})
	require.NoError(t, err)
	defer pg.Stop()
	cfg := &config.Node{ID: 1, Listen: freeAddr(t), PeerListen: freeAddr(t), Postgres: pg.Servers[0].DSN("postgres"),
		DataDir: t.TempDir(), Protocol: "dbsm-si"}
	cfg.Peers = map[uint32]string{1: cfg.PeerListen}
	cfg.Defaults()
	require.NoError(t, cfg.Validate())
	nd, err := node.Start(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil {
		nd.Stop()
	}
	require.ErrorContains(t, err, "max_prepared_transactions is 0")
}
