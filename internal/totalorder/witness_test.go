package totalorder

import (
	"errors"
	"fmt"
	"strings"
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

// A bootstrap node whose witnesses list differs from the others' (node 2
// forgot that 3 is a witness) would count other voters on entries: every
// node refuses its streams and it refuses theirs, so it delivers nothing,
// while the data node and the witness that agree go on committing.
func TestWitnessListsMustAgree(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const w, odd = 3, 2
	c := newTestCluster(t, 3, func(cfg *Config) {
		cfg.DeliverMembership = true
		cfg.Witnesses = map[uint64]bool{w: true}
		if cfg.ID == odd {
			cfg.Witnesses = nil
		}
		cfg.Witness = cfg.ID == w
	})
	c.startAll()
	defer c.stopAll()
	requireCutOff(t, c, odd, "whose witnesses list differs")
	// Both ways, and saying why.
	m1, w1, b1 := c.node(1).MembershipView()
	err := c.node(odd).CheckMembershipView(1, m1, w1, b1)
	if !errors.Is(err, ErrWitnessMismatch) || !strings.Contains(err.Error(), "node 1 counts member 3 as a witness, node 2 as a data node") {
		t.Fatalf("node %d checking node 1's view: %v", odd, err)
	}
	m2, w2, b2 := c.node(odd).MembershipView()
	err = c.node(1).CheckMembershipView(odd, m2, w2, b2)
	if !errors.Is(err, ErrWitnessMismatch) || !strings.Contains(err.Error(), "node 2 counts member 3 as a data node, node 1 as a witness") {
		t.Fatalf("node 1 checking node %d's view: %v", odd, err)
	}
	m3, w3, b3 := c.node(w).MembershipView()
	if err := c.node(1).CheckMembershipView(w, m3, w3, b3); err != nil {
		t.Fatalf("nodes that agree: %v", err)
	}
	// A member only one side knows yet (being added) is not compared, nor
	// is the bootstrap set of a node that joined (none).
	if err := c.node(1).CheckMembershipView(7, []uint64{1, 3, 7}, []uint64{3, 7}, nil); err != nil {
		t.Fatalf("a member node 1 does not know yet: %v", err)
	}
}

// A bootstrap node whose peers list names other ids than the others'
// (node 3 was told of a fourth node) wrote other voters into its first
// entries, so it may count another quorum: the others refuse its streams
// and it refuses theirs, across restarts too (the ids are kept beside the
// log), while the two that agree go on committing.
func TestBootstrapPeersMustAgree(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const odd = 3
	c := newTestCluster(t, 3, nil)
	extra := freeAddr(t)
	c.tune = func(cfg *Config) {
		if cfg.ID == odd {
			cfg.Peers[4] = extra
		}
	}
	c.startAll()
	defer c.stopAll()
	requireCutOff(t, c, odd, "bootstrapped with other peers")
	check := func(from, to uint64) error {
		m, w, b := c.node(from).MembershipView()
		return c.node(to).CheckMembershipView(from, m, w, b)
	}
	err := check(1, odd)
	if !errors.Is(err, ErrBootstrapMismatch) || !strings.Contains(err.Error(), "node 1 bootstrapped its log with the peers [1 2 3], node 3 with [1 2 3 4]") {
		t.Fatalf("node %d checking node 1's view: %v", odd, err)
	}
	if err := check(odd, 2); !errors.Is(err, ErrBootstrapMismatch) {
		t.Fatalf("node 2 checking node %d's view: %v", odd, err)
	}
	if err := check(1, 2); err != nil {
		t.Fatalf("nodes that agree: %v", err)
	}
	// Restarted, a node still knows what it bootstrapped with.
	c.stop(1)
	c.start(1, c.node(2).Delivered(), false)
	if err := check(1, odd); !errors.Is(err, ErrBootstrapMismatch) {
		t.Fatalf("after a restart of node 1: %v", err)
	}
	if err := check(1, 2); err != nil {
		t.Fatalf("after a restart of node 1, nodes that agree: %v", err)
	}
	c.proposeRetry([]uint64{1, 2}, 1, 2, "b")
}

// A witness removed from the group is still in the configuration a node
// that joined later replays from (its log starts before the removal), and
// that node never learnt it was a witness: neither side compares it, or
// the joiner would be cut off for good.
func TestMembershipViewIgnoresRemovedMembers(t *testing.T) {
	member := &Node{id: 1, members: map[uint64]bool{1: true, 2: true, 3: true}, removed: map[uint64]bool{4: true},
		witnesses: map[uint64]bool{4: true}, bootPeers: map[uint64]bool{}, bootstrap: []uint64{1, 2, 3, 4}}
	joiner := &Node{id: 5, members: map[uint64]bool{1: true, 2: true, 3: true, 4: true, 5: true}, removed: map[uint64]bool{},
		witnesses: map[uint64]bool{}, bootPeers: map[uint64]bool{}}
	m, w, b := member.MembershipView()
	if fmt.Sprint(m, w) != "[1 2 3] []" {
		t.Fatalf("the member's view: members %v witnesses %v", m, w)
	}
	if err := joiner.CheckMembershipView(1, m, w, b); err != nil {
		t.Fatalf("the joiner refuses the member: %v", err)
	}
	m, w, b = joiner.MembershipView()
	if err := member.CheckMembershipView(5, m, w, b); err != nil {
		t.Fatalf("the member refuses the joiner: %v", err)
	}
	// A member both count now is still compared.
	joiner.members[6], member.members[6], member.witnesses[6] = true, true, true
	m, w, b = member.MembershipView()
	if err := joiner.CheckMembershipView(1, m, w, b); !errors.Is(err, ErrWitnessMismatch) {
		t.Fatalf("witness 6, which the joiner counts as a data node: %v", err)
	}
}

// requireCutOff commits entries through node 1 and checks that node odd,
// which the others refuse, was delivered none of them.
func requireCutOff(t *testing.T, c *testCluster, odd uint64, why string) {
	t.Helper()
	c.proposeRetry([]uint64{1}, 1, 3, "a")
	time.Sleep(time.Second)
	for _, d := range c.node(odd).deliveries() {
		if d.Type == DeliveryEntry {
			t.Fatalf("node %d, %s, was delivered entry %d", odd, why, d.Seqno)
		}
	}
}
