package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/test/internal/proccluster"
)

// TestConsWaiterOfANodeTakenForGone: under cons, when the leader loses its
// link to node Y (Y still reaches the third node) and takes Y for gone, it
// orders the abort of Y's transactions that hold or await classes. A
// session on Y waiting for its classes learns it as soon as Y hears the
// abort (40001); it used to wait out class_wait (30 s) for a grant that
// could no longer come (found by the safety suite's partition-ring
// nemesis).
func TestConsWaiterOfANodeTakenForGone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := proccluster.Start(ctx, proccluster.Options{N: 3, Protocol: "cons", Dir: t.TempDir(), Bin: buildOrdo(t)})
	require.NoError(t, err)
	t.Cleanup(c.Stop)
	var leader int
	require.Eventually(t, func() bool { leader, _ = c.Leader(); return leader >= 0 }, 30*time.Second, 100*time.Millisecond)
	y, x := (leader+1)%3, (leader+2)%3 // Y loses the leader; X holds the class
	connect := func(i int) *pgx.Conn {
		conn, err := pgx.Connect(ctx, c.DSN(i))
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close(context.Background()) })
		return conn
	}
	setup := connect(x)
	_, err = setup.Exec(ctx, "CREATE TABLE hot (id int PRIMARY KEY, n int NOT NULL)")
	require.NoError(t, err)
	_, err = setup.Exec(ctx, "INSERT INTO hot VALUES (1, 0)")
	require.NoError(t, err)

	// X's transaction takes the class and stays open.
	tx, err := setup.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SET LOCAL ordo.conflict_classes = 'public.hot'")
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "UPDATE hot SET n = n + 100 WHERE id = 1")
	require.NoError(t, err)

	// Y's transaction on the same class waits behind it …
	waiter := connect(y)
	done := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		_, err := waiter.Exec(wctx, "UPDATE hot SET n = n + 1 WHERE id = 1")
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("node %d's transaction ran while node %d held the class: %v", y+1, x+1, err)
	case <-time.After(time.Second):
	}
	// … the leader loses its link to Y for a few seconds and takes Y for
	// gone (Y hears nothing from the order meanwhile: only the leader
	// sends it entries) …
	c.Cut(leader, y)
	time.Sleep(4 * time.Second)
	healed := time.Now()
	c.Heal()
	// … and once Y hears the abort, its session ends.
	select {
	case err = <-done:
	case <-time.After(15 * time.Second):
		t.Fatalf("node %d's session still waits for its classes %s after the link was restored", y+1, time.Since(healed).Round(time.Millisecond))
	}
	t.Logf("node %d's session ended %s after the link was restored: %v", y+1, time.Since(healed).Round(time.Millisecond), err)
	require.Equal(t, "40001", sqlstate(err), "%v", err)
	require.NoError(t, tx.Commit(ctx), "X's transaction commits")
}
