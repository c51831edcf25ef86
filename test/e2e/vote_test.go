package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// replicaErr is node i's reason for refusing updates, "" if it serves.
func (c *cluster) replicaErr(i int) string {
	if err := c.nodes[i].Replica().Err(); err != nil {
		return err.Error()
	}
	return ""
}

// requireMajoritySkipped checks the verdict of a failing majority on an
// entry of node 1: node 1 leaves, saying its client's commit is lost; nodes
// 2 and 3 serve, and an insert of id through node 2 into table reaches node
// 3, where it is then the table's only row.
func (c *cluster) requireMajoritySkipped(table string, id int) {
	t, ctx := c.t, context.Background()
	require.Eventually(t, func() bool { return c.replicaErr(0) != "" }, 60*time.Second, 100*time.Millisecond)
	require.Contains(t, c.replicaErr(0), "lost with it", "the origin says loudly what is lost")
	require.Empty(t, c.replicaErr(1))
	require.Empty(t, c.replicaErr(2))
	_, err := c.connect(1).Exec(ctx, "INSERT INTO "+table+" VALUES ($1, 'after')", id)
	require.NoError(t, err, "the majority serves")
	require.Eventually(t, func() bool {
		var n int
		return c.direct(2).QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n) == nil && n == 1
	}, 30*time.Second, 100*time.Millisecond, "and replicates")
}

// TestOneBadEntryNeverStopsAMajority: an entry that some nodes cannot
// carry out (here, a table created behind Ordo's back on them) is put to
// a vote. A failing minority leaves; a failing majority skips the entry
// and keeps serving while the node that applied it leaves (it used to
// stop every failing node, and with them the cluster).
func TestOneBadEntryNeverStopsAMajority(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("minority fails", func(t *testing.T) {
		c := startCluster(t, 3, "dbsm-si")
		_, err := c.direct(2).Exec(ctx, "CREATE TABLE clash (id int PRIMARY KEY)")
		require.NoError(t, err)
		_, err = c.connect(0).Exec(ctx, "CREATE TABLE clash (id int PRIMARY KEY)")
		require.NoError(t, err)
		require.Eventually(t, func() bool { return c.replicaErr(2) != "" }, 30*time.Second, 100*time.Millisecond)
		require.Contains(t, c.replicaErr(2), "leaves the cluster")
		require.Contains(t, c.replicaErr(2), "--rejoin", "it says how to bring it back")
		require.Empty(t, c.replicaErr(0))
		require.Empty(t, c.replicaErr(1))
		_, err = c.connect(1).Exec(ctx, "INSERT INTO clash VALUES (1)")
		require.NoError(t, err, "the majority serves")

		// It comes back under its own id by state transfer: its database
		// is replaced by node 1's, it replays the order after the copy
		// (the entry it could not carry out and the votes on it
		// included) and serves again.
		c.rejoin(2, 0)
		_, err = c.connect(2).Exec(ctx, "INSERT INTO clash VALUES (2)")
		require.NoError(t, err, "the rejoined node serves")
		_, err = c.connect(0).Exec(ctx, "INSERT INTO clash VALUES (3)")
		require.NoError(t, err)
		c.waitConverged()
		require.Empty(t, c.replicaErr(2), "the rejoined node stays")
		c.requireIdentical()
	})
	t.Run("majority fails", func(t *testing.T) {
		c := startCluster(t, 3, "dbsm-si")
		for _, i := range []int{1, 2} {
			_, err := c.direct(i).Exec(ctx, "CREATE TABLE clash (id int PRIMARY KEY, v text)")
			require.NoError(t, err)
		}
		_, err := c.connect(0).Exec(ctx, "CREATE TABLE clash (id int PRIMARY KEY, v text)")
		require.NoError(t, err, "the origin commits: it cannot know the others will fail")
		c.requireMajoritySkipped("clash", 1)

		// The origin comes back under its own id by state transfer, with
		// the majority's table in place of its own.
		c.rejoin(0, 1)
		_, err = c.connect(0).Exec(ctx, "INSERT INTO clash VALUES (2, 'rejoined')")
		require.NoError(t, err, "the rejoined node serves")
		c.waitConverged()
		require.Empty(t, c.replicaErr(0), "the rejoined node stays")
		c.requireIdentical()
	})
}

// TestOneBadRowApplyNeverStopsAMajority: the same for a plain row apply (a
// run of remote transactions without DDL). A row written behind Ordo's back
// on one node makes the others' apply of that node's next update find no
// row (or a duplicate key); they used to stop, and with them the cluster.
func TestOneBadRowApplyNeverStopsAMajority(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	setup := func(t *testing.T) *cluster {
		c := startCluster(t, 3, "dbsm-si")
		_, err := c.connect(0).Exec(ctx, "CREATE TABLE r (id int PRIMARY KEY, v text)")
		require.NoError(t, err)
		c.waitConverged()
		return c
	}
	t.Run("majority fails", func(t *testing.T) {
		c := setup(t)
		_, err := c.direct(0).Exec(ctx, "INSERT INTO r VALUES (1, 'behind Ordo')")
		require.NoError(t, err)
		_, err = c.connect(0).Exec(ctx, "UPDATE r SET v = 'through Ordo' WHERE id = 1")
		require.NoError(t, err, "the origin commits: it cannot know the others will fail")
		c.requireMajoritySkipped("r", 2)

		// A node of the majority restarted replays the entry it skipped
		// and the votes on it: it skips it again and stays (it used to
		// take the replayed verdict for one against an entry it applied,
		// and leave).
		c.nodes[1].Stop()
		c.startNode(1)
		_, err = c.connect(1).Exec(ctx, "INSERT INTO r VALUES (3, 'after the restart')")
		require.NoError(t, err, "the restarted node serves")
		time.Sleep(time.Second)
		require.Empty(t, c.replicaErr(1), "the restarted node stays")
		require.Eventually(t, func() bool {
			var n int
			return c.direct(2).QueryRow(ctx, "SELECT count(*) FROM r").Scan(&n) == nil && n == 2
		}, 30*time.Second, 100*time.Millisecond)
	})
	t.Run("minority fails", func(t *testing.T) {
		c := setup(t)
		_, err := c.direct(2).Exec(ctx, "INSERT INTO r VALUES (1, 'behind Ordo')")
		require.NoError(t, err)
		_, err = c.connect(0).Exec(ctx, "INSERT INTO r VALUES (1, 'through Ordo')")
		require.NoError(t, err)
		require.Eventually(t, func() bool { return c.replicaErr(2) != "" }, 60*time.Second, 100*time.Millisecond)
		require.Contains(t, c.replicaErr(2), "leaves the cluster")
		require.Empty(t, c.replicaErr(0))
		require.Empty(t, c.replicaErr(1))
		_, err = c.connect(1).Exec(ctx, "INSERT INTO r VALUES (2, 'after')")
		require.NoError(t, err, "the majority serves")
	})
}
