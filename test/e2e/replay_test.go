package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/pkg/config"
)

// TestRestartedNodeCertifiesLikeTheOthers: a node restarted after it
// applied T1, a transaction whose snapshot is older than the window the
// node replays (proven − certification_window) but that committed, must
// still count T1 when it certifies U, a transaction concurrent with T1
// that read what T1 wrote. Every node aborts U (dbsm); none applies it.
// Rebuilding the certifier by certifying the replayed entries anew would
// find T1 too old, forget its keys, commit U on the restarted node alone,
// and diverge.
func TestRestartedNodeCertifiesLikeTheOthers(t *testing.T) {
	t.Parallel()
	const window = 40
	c := startClusterWith(t, 3, "dbsm", func(n *config.Node) { n.CertificationWindow = window })
	ctx := context.Background()
	a, b, noise := c.connect(0), c.connect(1), c.connect(0)
	_, err := a.Exec(ctx, "CREATE TABLE kv (k int PRIMARY KEY, v int); CREATE TABLE noise (id serial PRIMARY KEY)")
	require.NoError(t, err)
	_, err = a.Exec(ctx, "INSERT INTO kv VALUES (1, 0), (2, 0)")
	require.NoError(t, err)
	c.waitConverged()
	prefix := func() uint64 { return c.nodes[0].Replica().AppliedPrefix() }
	advanceTo := func(target uint64) {
		for prefix() < target {
			_, err := noise.Exec(ctx, "INSERT INTO noise DEFAULT VALUES")
			require.NoError(t, err)
		}
		c.waitConverged()
	}

	s0 := prefix()
	t1, err := a.Begin(ctx)
	require.NoError(t, err)
	_, err = t1.Exec(ctx, "UPDATE kv SET v = v + 1 WHERE k = 1")
	require.NoError(t, err)
	advanceTo(s0 + 10)
	u, err := b.Begin(ctx)
	require.NoError(t, err)
	var v int
	require.NoError(t, u.QueryRow(ctx, "SELECT v FROM kv WHERE k = 1").Scan(&v))
	_, err = u.Exec(ctx, "UPDATE kv SET v = v + 100 WHERE k = 2")
	require.NoError(t, err)
	advanceTo(s0 + 30)
	require.NoError(t, t1.Commit(ctx), "T1 commits: its snapshot is inside the window")
	f := prefix()
	advanceTo(s0 + window + 3)
	p := c.nodes[2].Replica().AppliedPrefix()
	require.Greater(t, p-window, s0+1, "the restarted node must replay from after T1's snapshot")
	require.Greater(t, f, p-window, "and T1 must be among the replayed entries")

	c.nodes[2].Stop()
	c.startNode(2)
	c.waitConverged()
	err = u.Commit(ctx)
	require.Equal(t, "40001", sqlstate(err), "U read row 1, which T1 wrote after U's snapshot: %v", err)
	c.waitConverged()
	for i := 1; i < len(c.nodes); i++ {
		require.Equal(t, c.checksum(0, "kv"), c.checksum(i, "kv"), "kv differs on node %d", i+1)
	}
	// Proof rows (remote applies and, since they decide a replay too,
	// local commits) are kept for two windows, not forever.
	var oldest, newest int64
	require.NoError(t, c.direct(0).QueryRow(ctx, "SELECT min(seqno), max(seqno) FROM _ordo.applied").Scan(&oldest, &newest))
	require.Greater(t, oldest, int64(1), "old proof rows are forgotten")
	require.LessOrEqual(t, newest-oldest, int64(3*window))
}

// TestPostgresRestartUnderANodeStopsIt: a node whose PostgreSQL crashed
// and came back while the node ran does not carry on (the applies and
// commits PostgreSQL acknowledged without flushing may be gone): it stops
// with an error that says so, and once restarted it replays and converges.
func TestPostgresRestartUnderANodeStopsIt(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm-si")
	ctx := context.Background()
	a := c.connect(0)
	_, err := a.Exec(ctx, "CREATE TABLE t (id int PRIMARY KEY)")
	require.NoError(t, err)
	_, err = a.Exec(ctx, "INSERT INTO t SELECT generate_series(1, 10)")
	require.NoError(t, err)
	c.waitConverged()

	c.pg.Servers[2].Kill()
	require.NoError(t, c.pg.Servers[2].Restart(ctx))
	_, err = a.Exec(ctx, "INSERT INTO t VALUES (11)")
	require.NoError(t, err, "the other two nodes go on")
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	err = c.nodes[2].Wait(wctx)
	require.ErrorContains(t, err, "PostgreSQL restarted", "node 3 must stop")

	c.nodes[2].Stop()
	c.startNode(2)
	c.waitConverged()
	require.Equal(t, c.checksum(0, "t"), c.checksum(2, "t"))
}
