package e2e

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/test/internal/proccluster"
)

// TestClientCancelEndsOrdosOwnWaits: a statement that waits inside Ordo,
// where PostgreSQL runs nothing of its session (the cancel the wire layer
// forwards there finds nothing to cancel), ends at its client's
// CancelRequest with 57014, as one waiting in PostgreSQL would: under cons,
// a transaction waiting for a conflict class another holds (it used to wait
// out class_wait, 30 s), and a sync read on a node cut off from the others
// (its propose_timeout). The canceled transaction holds nothing: the other
// one commits, and the canceled one's update is nowhere. (A statement
// waiting for its node's told commits after a restart:
// TestToldCommitVisibleAfterARestart.)
func TestClientCancelEndsOrdosOwnWaits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, connect := tableCluster(t, "canceled", proccluster.Options{Protocol: "cons"})
	a, b := connect(c.DSN(0)), connect(c.DSN(1))
	_, err := a.Exec(ctx, "INSERT INTO canceled VALUES (1, 0)")
	require.NoError(t, err)

	// Node 1's transaction holds the table's class; node 2's waits for it.
	tx, err := a.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "UPDATE canceled SET v = v + 100 WHERE k = 1")
	require.NoError(t, err)
	requireCanceled(t, b, "UPDATE canceled SET v = v + 1 WHERE k = 1", "a wait for conflict classes")
	require.NoError(t, tx.Commit(ctx), "the class holder commits")
	_, err = b.Exec(ctx, "UPDATE canceled SET v = v + 10 WHERE k = 1")
	require.NoError(t, err, "the canceled session goes on")
	var n int
	require.NoError(t, b.QueryRow(ctx, "SELECT v FROM canceled WHERE k = 1").Scan(&n))
	require.Equal(t, 110, n, "the canceled update is nowhere")

	// A sync read through a node that cannot reach the others.
	_, err = b.Exec(ctx, "SET ordo.read_consistency = 'sync'")
	require.NoError(t, err)
	c.Isolate(1)
	requireCanceled(t, b, "SELECT v FROM canceled WHERE k = 1", "a sync read cut off from the cluster")
	c.Heal()
}

// requireCanceled runs sql on conn, which must still wait after half a
// second, then sends its CancelRequest: sql must fail with 57014 within a
// few seconds. what names the wait for the messages.
func requireCanceled(t *testing.T, conn *pgx.Conn, sql, what string) {
	t.Helper()
	err := cancelWhileWaiting(t, conn, what, func() error {
		_, err := conn.Exec(context.Background(), sql)
		return err
	})
	var pe *pgconn.PgError
	require.True(t, errors.As(err, &pe), "%s: %v", what, err)
	require.Equal(t, "57014", pe.Code, "%s: canceled as PostgreSQL cancels: %v", what, err)
	t.Logf("%s: %s", what, pe.Message)
}

// cancelWhileWaiting runs run, a statement on conn, which must still wait
// after half a second, then sends conn's CancelRequest: run must end
// within a few seconds, and its error is returned.
func cancelWhileWaiting(t *testing.T, conn *pgx.Conn, what string, run func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- run() }()
	select {
	case err := <-done:
		t.Fatalf("%s: the statement did not wait (%v): the test does not try what it is about", what, err)
	case <-time.After(500 * time.Millisecond):
	}
	sent := time.Now()
	require.NoError(t, conn.PgConn().CancelRequest(context.Background()))
	select {
	case err := <-done:
		require.Less(t, time.Since(sent), 2*time.Second, "%s: ended long after its cancel", what)
		t.Logf("%s: ended %s after its cancel", what, time.Since(sent).Round(time.Millisecond))
		return err
	case <-time.After(15 * time.Second):
		t.Fatalf("%s: still waiting 15 s after its client's cancel", what)
	}
	return nil
}
