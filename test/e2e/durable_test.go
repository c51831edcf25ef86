package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAppliedReachesTheOrderWhenIdle: once a node's PostgreSQL has
// flushed what the node applied, the node tells the total order (which
// compacts the log only below what every node says it applied), even when
// no further entry comes. The loop used to read the WAL positions only
// when it carried out the next batch, so after the last write of a burst
// the others kept hearing an older applied index until something else
// was written.
func TestAppliedReachesTheOrderWhenIdle(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm-si")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := c.connect(0)
	_, err := conn.Exec(ctx, `CREATE TABLE idle (k int PRIMARY KEY, v int)`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `INSERT INTO idle SELECT g, g FROM generate_series(1, 100) g`)
	require.NoError(t, err)
	c.waitConverged()
	last := c.nodes[0].Order().Delivered()
	deadline := time.Now().Add(10 * time.Second)
	for {
		applied := c.nodes[0].Order().PeersApplied()
		if applied[2] >= last && applied[3] >= last {
			break
		}
		require.True(t, time.Now().Before(deadline),
			"nodes 2 and 3 applied seqno %d, and no more entries came, but node 1 hears they applied %v", last, applied)
		time.Sleep(50 * time.Millisecond)
	}
}
