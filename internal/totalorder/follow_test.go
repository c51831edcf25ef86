package totalorder

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
)

// Writes that come through one follower move the leadership to it; writes
// spread over the nodes move nothing.
func TestLeadershipFollowsTheWrites(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	defer func(q time.Duration) { followQuiet = q }(followQuiet)
	followQuiet = 300 * time.Millisecond
	c := newTestCluster(t, 3, func(cfg *Config) { cfg.FollowWrites = 200 * time.Millisecond })
	c.startAll()
	defer c.stopAll()
	lead := c.leader(10 * time.Second)

	// Spread over every node for a few windows: the leader stays.
	c.proposeRetry(ids(3), 2, 40, "spread")
	if l := c.leader(time.Second); l != lead {
		t.Fatalf("writes spread over the nodes moved the leadership from %d to %d", lead, l)
	}

	// Through one follower only: it leads within a few windows.
	to := lead%3 + 1
	deadline := time.Now().Add(10 * time.Second)
	for c.leader(5*time.Second) != to {
		if time.Now().After(deadline) {
			t.Fatalf("node %d proposed every entry for 10 s and node %d still leads", to, c.leader(time.Second))
		}
		c.proposeRetry([]uint64{to}, 6, 20, "one") // several at once: the target is rarely idle
	}
	var transfers float64
	for _, id := range ids(3) {
		transfers += testutil.ToFloat64(c.node(id).m.followTransfers)
	}
	if transfers < 1 {
		t.Fatalf("the leadership moved without a transfer counted (%v)", transfers)
	}
}
