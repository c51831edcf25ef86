package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// TestLeftoverPreparedDoesNotBlockReplay: a transaction whose outcome
// became unknown (its node was cut off from the majority) stays prepared,
// holding its row locks, when its node is killed. The majority then
// commits an update of the same row. When the node comes back, its replay
// must not block on its own leftover for ever (the node used to give up
// and stop, again after every restart): the leftover is rolled back,
// the update applied, and the leftover's abort ordered, so every node ends
// with the majority's value and no prepared transaction.
func TestLeftoverPreparedDoesNotBlockReplay(t *testing.T) {
	t.Parallel()
	c := startProcCluster(t, 3, "dbsm-si")
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.dsn(0))
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "CREATE TABLE kv (k int PRIMARY KEY, v int NOT NULL)")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "INSERT INTO kv VALUES (1, 0)")
	require.NoError(t, err)
	conn.Close(ctx)
	require.Eventually(t, func() bool { return c.settled("SELECT count(*)::text FROM kv") }, 30*time.Second, 200*time.Millisecond)

	// Node 3 alone: its commit cannot be confirmed.
	c.kill(0)
	c.kill(1)
	minority, err := pgx.Connect(ctx, c.dsn(2))
	require.NoError(t, err)
	_, err = minority.Exec(ctx, "UPDATE kv SET v = 3 WHERE k = 1")
	require.Error(t, err)
	require.Equal(t, "08007", sqlstate(err), "the outcome is unknown: %v", err)
	minority.Close(ctx)
	c.kill(2) // its prepared transaction stays behind in its PostgreSQL

	// The majority commits an update of the same row meanwhile.
	c.start(0)
	c.start(1)
	majority, err := pgx.Connect(ctx, c.dsn(0))
	require.NoError(t, err)
	defer majority.Close(ctx)
	_, err = majority.Exec(ctx, "UPDATE kv SET v = 1 WHERE k = 1")
	require.NoError(t, err)

	// Node 3 replays that update although its leftover holds the row.
	c.start(2)
	if !assertEventually(func() bool { return c.settled("SELECT v::text FROM kv WHERE k = 1") }, 60*time.Second) {
		t.Fatalf("the cluster did not settle:\n%s", c.state())
	}
	var v int
	d, err := pgx.Connect(ctx, c.pg.Servers[2].DSN("postgres"))
	require.NoError(t, err)
	defer d.Close(ctx)
	require.NoError(t, d.QueryRow(ctx, "SELECT v FROM kv WHERE k = 1").Scan(&v))
	require.Equal(t, 1, v, "the majority's update wins; the leftover was never committed anywhere")

	// And node 3 serves updates again.
	third, err := pgx.Connect(ctx, c.dsn(2))
	require.NoError(t, err)
	defer third.Close(ctx)
	_, err = third.Exec(ctx, "UPDATE kv SET v = v + 10 WHERE k = 1")
	require.NoError(t, err)
}

// assertEventually polls cond every 200ms until it holds or within passes.
func assertEventually(cond func() bool, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(200 * time.Millisecond)
	}
	return cond()
}
