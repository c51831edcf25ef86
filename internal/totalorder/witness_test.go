package totalorder

import (
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Two data nodes and a witness: the witness votes in Raft, so either data
// node may be lost with entries still committing; it is left out of the
// voters delivered to the consumers (votes on entries count only nodes
// that carry them out); it hands leadership over whenever it is elected;
// and every node keeps knowing it as a witness across a restart.
func TestWitness(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const w = 3
	c := newTestCluster(t, 3, func(cfg *Config) {
		cfg.DeliverMembership = true
		cfg.Witnesses = map[uint64]bool{w: true}
		cfg.Witness = cfg.ID == w
	})
	c.startAll()
	defer c.stopAll()
	c.proposeRetry([]uint64{1, 2}, 1, 3, "a")
	for _, id := range ids(3) {
		var last string
		for _, d := range c.node(id).deliveries() {
			if d.Type == DeliveryMembers {
				last = fmt.Sprint(Voters(d.Data))
			}
		}
		if last != "[1 2]" {
			t.Fatalf("node %d was delivered voters %s, want the data nodes [1 2]", id, last)
		}
		for _, mi := range c.node(id).MemberInfos() {
			if mi.Witness != (mi.ID == w) {
				t.Fatalf("node %d sees member %+v", id, mi)
			}
		}
	}

	// Whichever data node is lost, the other commits with the witness,
	// and leads: the witness never keeps the leadership.
	for _, lost := range []uint64{1, 2} {
		other := 3 - lost
		c.stop(lost)
		c.proposeRetry([]uint64{other}, 1, 3, "b"+itoa(lost))
		deadline := time.Now().Add(10 * time.Second)
		for c.node(other).Leader() != other {
			if time.Now().After(deadline) {
				t.Fatalf("with node %d down, the leader is %d, not data node %d", lost, c.node(other).Leader(), other)
			}
			time.Sleep(20 * time.Millisecond)
		}
		c.start(lost, c.node(other).Delivered(), false)
		c.proposeRetry(ids(2), 1, 1, "c"+itoa(lost))
	}

	// Restarted, the witness still knows itself and the others know it.
	c.stop(w)
	tn := c.start(w, 0, false)
	if !tn.IsWitness(w) || !c.node(1).IsWitness(w) || c.node(1).IsWitness(2) {
		t.Fatal("the witness is not known as one after a restart")
	}
}
