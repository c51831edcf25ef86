package e2e

import (
	"context"
	"errors"
	"fmt"
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
	t.Parallel()
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
	t.Parallel()
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

// TestNodeConnectionsStayWithinItsShare: the connections a node opens to
// its PostgreSQL for itself, counted while it is as busy as it gets
// (clients committing and conflicting through it, applies of the others'
// writes, brute-force aborts of local transactions that block them,
// DDL with its catalog reloads, fingerprints and sequence normalization),
// stay within what it keeps from its clients (node.OwnConnections); and
// each says it is Ordo's (application_name), so a DBA can tell them from
// the clients' sessions in pg_stat_activity.
func TestNodeConnectionsStayWithinItsShare(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm-si")
	ctx := context.Background()
	_, err := c.connect(0).Exec(ctx, "CREATE TABLE share (id int PRIMARY KEY, v int); INSERT INTO share SELECT g, 0 FROM generate_series(1, 8) g")
	require.NoError(t, err)
	c.waitConverged()

	watch := c.direct(1)
	var most, unnamed int
	count := func() {
		var n, u int
		// (A backend still starting shows no name yet, whoever it is:
		// on PostgreSQL 18, state 'starting', 5-13 ms old when seen.)
		require.NoError(t, watch.QueryRow(ctx, `SELECT count(*) FILTER (WHERE application_name = 'ordo'),
  count(*) FILTER (WHERE application_name NOT IN ('ordo', 'client', 'watch') AND backend_start < clock_timestamp() - interval '500 milliseconds')
FROM pg_stat_activity WHERE backend_type IN ('client backend', 'walsender') AND pid <> pg_backend_pid()`).Scan(&n, &u))
		most, unnamed = max(most, n), max(unnamed, u)
	}
	_, err = watch.Exec(ctx, "SET application_name = 'watch'")
	require.NoError(t, err)

	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		ddl := c.connectWith(0, map[string]string{"application_name": "client"})
		var sessions []*pgx.Conn
		for i := 0; i < 6; i++ {
			sessions = append(sessions, c.connectWith(1+i%2, map[string]string{"application_name": "client"}))
		}
		for round := 0; ; round++ {
			select {
			case <-stop:
				return
			default:
			}
			// A local transaction on node 2 holding a row node 1 then
			// updates: node 2 aborts it to apply.
			holder := sessions[0]
			_, _ = holder.Exec(ctx, "BEGIN")
			_, _ = holder.Exec(ctx, "UPDATE share SET v = v + 1 WHERE id = 1")
			_, _ = ddl.Exec(ctx, "UPDATE share SET v = v + 1 WHERE id = 1")
			_, _ = holder.Exec(ctx, "ROLLBACK")
			for i, s := range sessions[1:] {
				_, _ = s.Exec(ctx, "UPDATE share SET v = v + 1 WHERE id = $1", 2+(round+i)%7)
			}
			_, _ = ddl.Exec(ctx, fmt.Sprintf("CREATE TABLE share_%d (id serial PRIMARY KEY, v text)", round))
			_, _ = ddl.Exec(ctx, fmt.Sprintf("INSERT INTO share_%d (v) VALUES ('x')", round))
			_, _ = ddl.Exec(ctx, fmt.Sprintf("DROP TABLE share_%d", round))
		}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		count()
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	<-done
	count()
	// (apply_workers 1, the default the harness leaves.)
	t.Logf("node 2's own connections to PostgreSQL: at most %d at once (it keeps %d)", most, node.OwnConnections(1))
	require.Positive(t, most)
	require.LessOrEqual(t, most, node.OwnConnections(1))
	require.Zero(t, unnamed, "a connection of the node's without its name")
}
