package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/test/internal/proccluster"
)

// TestCommitLostOnItsWayToTheLeader: a follower's commit whose entry the
// network loses on its way to the leader (written on a connection that
// then breaks: nothing tells the follower, and Raft never resends a
// proposal) is not ordered within propose_timeout. The follower orders
// the transaction's abort, and its client hears that outcome, 40001, from
// a cluster that orders again: it used to hear 08007 ("outcome unknown").
// The transaction is nowhere.
func TestCommitLostOnItsWayToTheLeader(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := proccluster.Start(ctx, proccluster.Options{N: 3, Protocol: "dbsm", Dir: t.TempDir(), Bin: buildOrdo(t),
		Extra: []string{"leader_follows_writes: false"}})
	require.NoError(t, err)
	t.Cleanup(c.Stop)
	var leader int
	require.Eventually(t, func() bool { leader, _ = c.Leader(); return leader >= 0 }, 30*time.Second, 100*time.Millisecond)
	y := (leader + 1) % 3
	connect := func(i int) *pgx.Conn {
		conn, err := pgx.Connect(ctx, c.DSN(i))
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close(context.Background()) })
		return conn
	}
	setup := connect(leader)
	_, err = setup.Exec(ctx, "CREATE TABLE lost (id int PRIMARY KEY)")
	require.NoError(t, err)
	client := connect(y)
	_, err = client.Exec(ctx, "SET ordo.read_consistency = 'sync'") // sees the table
	require.NoError(t, err)
	_, err = client.Exec(ctx, "INSERT INTO lost VALUES (0)") // the follower's path works
	require.NoError(t, err)
	_, err = client.Exec(ctx, "RESET ordo.read_consistency") // (a sync read would wait for the link)
	require.NoError(t, err)

	// What y sends the leader is lost (y still hears the leader) …
	c.SwallowLink(y, leader)
	done := make(chan error, 1)
	began := time.Now()
	go func() {
		_, err := client.Exec(ctx, "INSERT INTO lost VALUES (1)")
		done <- err
	}()
	time.Sleep(500 * time.Millisecond)
	// … then the connection breaks, and y reconnects.
	c.CutLink(y, leader)
	c.Heal()
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the commit still waits")
	}
	t.Logf("the commit ended after %s: %v", time.Since(began).Round(time.Millisecond), err)
	require.Equal(t, "40001", sqlstate(err), "%v", err)
	require.True(t, strings.Contains(err.Error(), "not ordered in time"), "%v", err)
	require.Eventually(t, func() bool {
		for i := range 3 {
			var n int
			d, err := pgx.Connect(ctx, c.PGDSN(i))
			if err != nil {
				return false
			}
			err = d.QueryRow(ctx, "SELECT count(*) FROM lost WHERE id = 1").Scan(&n)
			d.Close(ctx)
			if err != nil || n != 0 {
				return false
			}
		}
		return true
	}, 10*time.Second, 200*time.Millisecond, "the aborted insert is on no node")
	_, err = client.Exec(ctx, "INSERT INTO lost VALUES (2)")
	require.NoError(t, err, "y commits again")
}
