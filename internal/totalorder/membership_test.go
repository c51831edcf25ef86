package totalorder

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/ordo-db/ordo/internal/totalorder/transport"
)

// A node is wiped, removed, and re-added under a new id with an empty
// directory; the others have compacted their logs meanwhile, so it catches up
// by snapshot and then delivers the same entries as everybody else.
func TestWipedNodeRejoinsBySnapshot(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	snapData := func(seqno uint64) ([]byte, error) { return []byte("state@" + itoa(seqno)), nil }
	c := newTestCluster(t, 3, func(cfg *Config) {
		cfg.SnapshotEntries = 50
		cfg.SnapshotData = snapData
	})
	c.startAll()
	defer func() {
		for _, tn := range c.running() {
			c.stop(tn.ID())
		}
	}()
	lead := c.leader(5 * time.Second)
	victim := uint64(3)
	if victim == lead {
		victim = 2
	}
	acks := c.proposeAll(ids(3), 2, 20, "a")
	c.stop(victim)
	must(t, os.RemoveAll(c.dirs[victim]))
	var rest []uint64
	for _, id := range ids(3) {
		if id != victim {
			rest = append(rest, id)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	must(t, c.node(rest[0]).RemoveNode(ctx, victim))
	for p, s := range c.proposeAll(rest, 2, 60, "b") {
		acks[p] = s
	}
	// wait until the survivors have compacted past the first entries
	deadline := time.Now().Add(5 * time.Second)
	for {
		fi, _ := c.node(lead).st.Raft().FirstIndex()
		if fi > 50 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("leader did not compact (first index %d)", fi)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// re-add the wiped node as node 4 at a new address
	const newID = 4
	c.addrs[newID] = freeAddr(t)
	c.dirs[newID] = t.TempDir()
	must(t, c.node(rest[0]).AddNode(ctx, newID, c.addrs[newID]))
	delete(c.addrs, victim)
	tn := c.start(newID, 0, true)
	for p, s := range c.proposeRetry(append(rest, newID), 1, 10, "c") {
		acks[p] = s
	}
	checkAgreement(t, c.running(), acks)
	got := tn.deliveries()
	if got[0].Type != DeliverySnapshot {
		t.Fatalf("rejoined node first delivery %+v, want a snapshot", got[0])
	}
	if want := "state@" + itoa(got[0].Seqno); string(got[0].Data) != want {
		t.Fatalf("snapshot data %q, want %q", got[0].Data, want)
	}
	if m := c.node(newID).Members(); len(m) != 3 {
		t.Fatalf("members %v", m)
	}
}

func TestRemovedNodeStops(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c := newTestCluster(t, 3, nil)
	c.startAll()
	defer c.stopAll()
	lead := c.leader(5 * time.Second)
	victim := uint64(1)
	if victim == lead {
		victim = 2
	}
	c.proposeAll(ids(3), 1, 5, "x")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	must(t, c.node(lead).RemoveNode(ctx, victim))
	select {
	case <-c.node(victim).Done():
	case <-time.After(5 * time.Second):
		t.Fatal("removed node did not stop")
	}
	if !errors.Is(c.node(victim).Err(), ErrRemoved) {
		t.Fatalf("removed node Err = %v", c.node(victim).Err())
	}
	if _, err := c.node(victim).Propose(ctx, []byte("no")); !errors.Is(err, ErrRemoved) {
		t.Fatalf("propose on removed node: %v", err)
	}
	// the remaining two still commit
	var rest []uint64
	for _, id := range ids(3) {
		if id != victim {
			rest = append(rest, id)
		}
	}
	acks := c.proposeAll(rest, 1, 5, "y")
	var nodes []*testNode
	for _, id := range rest {
		nodes = append(nodes, c.node(id))
	}
	checkAgreement(t, nodes, acks)
	// the removed node's own leader-less view cannot disturb them
	c.stop(victim)
}

// The removed node may learn of its removal only from a peer rejecting it
// (the leader stops replicating to it once the change commits): even
// isolated from the commit, it ends up stopped.
func TestRemoveFollowerThatMissesTheCommit(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c := newTestCluster(t, 3, nil)
	c.startAll()
	defer c.stopAll()
	lead := c.leader(5 * time.Second)
	victim := uint64(1)
	if victim == lead {
		victim = 2
	}
	c.proposeAll(ids(3), 1, 3, "x")
	for _, id := range ids(3) {
		if id != victim {
			c.node(victim).faults.SetLink(id, linkCut)
			c.node(id).faults.SetLink(victim, linkCut)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	must(t, c.node(lead).RemoveNode(ctx, victim))
	for _, tn := range c.running() {
		tn.faults.Heal()
	}
	select {
	case <-c.node(victim).Done():
	case <-time.After(5 * time.Second):
		t.Fatal("removed node did not stop after the partition healed")
	}
}

func itoa(n uint64) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for n > 0 {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
	}
	return string(b)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A consumer that lost its state (StartAfter below the node's own snapshot)
// is handed the snapshot first, then every later entry.
func TestRestartBehindLocalSnapshot(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c := newTestCluster(t, 3, func(cfg *Config) {
		cfg.SnapshotEntries = 20
		cfg.SnapshotData = func(seqno uint64) ([]byte, error) { return []byte("at " + itoa(seqno)), nil }
	})
	c.startAll()
	defer c.stopAll()
	c.leader(5 * time.Second)
	acks := c.proposeAll(ids(3), 2, 15, "s")
	deadline := time.Now().Add(5 * time.Second)
	for testutil.ToFloat64(c.node(2).m.snapshotsMade) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("node 2 made no snapshot")
		}
		c.proposeAll([]uint64{1}, 1, 1, "poke"+itoa(uint64(time.Now().UnixNano())))
		time.Sleep(20 * time.Millisecond)
	}
	c.stop(2)
	tn := c.start(2, 0, false)
	for p, s := range c.proposeRetry(ids(3), 1, 5, "after") {
		acks[p] = s
	}
	checkAgreement(t, c.running(), acks)
	got := tn.deliveries()
	if got[0].Type != DeliverySnapshot || string(got[0].Data) != "at "+itoa(got[0].Seqno) {
		t.Fatalf("first delivery after restart %+v, want the local snapshot", got[0])
	}
	if got[1].Seqno <= got[0].Seqno {
		t.Fatalf("entry %d after snapshot %d", got[1].Seqno, got[0].Seqno)
	}
}

// A node joins as a learner (it receives the log, does not count for a
// quorum), promotes itself to voter, and is then removed: its directory
// can never start again, its id cannot be added again, and the others
// keep its removal and its address in members.json across a restart
// whose Peers does not name it.
func TestLearnerPromotedThenRemoved(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	// Configuration changes are not retried after a leader change: give
	// them time on a loaded machine.
	c := newTestCluster(t, 3, func(cfg *Config) { cfg.ProposeTimeout = 15 * time.Second })
	c.startAll()
	defer c.stopAll()
	lead := c.leader(5 * time.Second)
	acks := c.proposeAll(ids(3), 2, 10, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	const newID = 4
	addr4 := freeAddr(t)
	c.addrs[newID], c.dirs[newID] = addr4, t.TempDir()
	must(t, c.node(lead).AddLearner(ctx, newID, addr4))
	tn := c.start(newID, 0, true)
	for p, s := range c.proposeAll(ids(3), 2, 10, "b") {
		acks[p] = s
	}
	role := func(on, id uint64) (found, learner bool, addr string) {
		for _, m := range c.node(on).MemberInfos() {
			if m.ID == id {
				return true, m.Learner, m.Addr
			}
		}
		return false, false, ""
	}
	if found, learner, addr := role(lead, newID); !found || !learner || addr != addr4 {
		t.Fatalf("after AddLearner the leader sees node 4 as found=%v learner=%v addr=%q", found, learner, addr)
	}
	if st := c.node(lead).Status(); !st.Progress[newID].IsLearner {
		t.Fatalf("raft progress of node 4 is not a learner's: %+v", st.Progress[newID])
	}
	must(t, tn.Promote(ctx, newID)) // a learner promotes itself
	// Promote returns once node 4 applied the change; the leader applies
	// it at its own pace (CI, on a loaded machine, once looked first).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		found, learner, _ := role(lead, newID)
		if found && !learner {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after Promote the leader sees node 4 as found=%v learner=%v", found, learner)
		}
	}
	for p, s := range c.proposeRetry([]uint64{1, 2, 3, newID}, 1, 5, "c") {
		acks[p] = s
	}
	checkAgreement(t, c.running(), acks)

	// Remove it; it stops and its directory never starts again.
	must(t, c.node(c.leader(5*time.Second)).RemoveNode(ctx, newID))
	select {
	case <-tn.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("removed node did not stop")
	}
	c.stop(newID)
	tr, err := transport.NewGRPC(transport.GRPCConfig{ID: newID, Listener: mustListen(t, addr4)})
	must(t, err)
	cfg := c.config(newID)
	cfg.Transport = tr
	if _, err := Start(cfg); !errors.Is(err, ErrRemoved) {
		t.Fatalf("restart of the removed node: %v, want ErrRemoved", err)
	}
	if err := c.node(1).AddLearner(ctx, newID, addr4); !errors.Is(err, ErrRemovedID) {
		t.Fatalf("re-adding the removed id: %v, want ErrRemovedID", err)
	}

	// Node 1 restarts with the bootstrap peers only: members.json still
	// names node 4's address and its removal.
	delete(c.addrs, newID)
	c.stop(1)
	c.start(1, 0, false)
	if !c.node(1).IsRemoved(newID) {
		t.Fatal("after a restart node 1 forgot that node 4 was removed")
	}
	c.node(1).mu.Lock()
	got := c.node(1).addrs[newID]
	c.node(1).mu.Unlock()
	if got != addr4 {
		t.Fatalf("after a restart node 1 has node 4's address %q, want %q", got, addr4)
	}
	c.proposeRetry(ids(3), 1, 3, "d")
}

func mustListen(t *testing.T, addr string) net.Listener {
	t.Helper()
	var err error
	for i := 0; i < 250; i++ {
		var l net.Listener
		if l, err = net.Listen("tcp", addr); err == nil {
			return l
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("listen %s: %v", addr, err)
	return nil
}

// With DeliverMembership every node hands its consumer the same voters at
// the same seqnos: the bootstrap configuration, a learner's addition (no
// new voter), its promotion, a removal; a joiner sees the same changes
// from the log.
func TestDeliverMembership(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	// Configuration changes are not retried after a leader change: give
	// them time on a loaded machine.
	c := newTestCluster(t, 3, func(cfg *Config) { cfg.DeliverMembership = true; cfg.ProposeTimeout = 15 * time.Second })
	c.startAll()
	defer c.stopAll()
	lead := c.leader(5 * time.Second)
	c.proposeAll(ids(3), 1, 3, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const newID = 4
	c.addrs[newID], c.dirs[newID] = freeAddr(t), t.TempDir()
	must(t, c.node(lead).AddLearner(ctx, newID, c.addrs[newID]))
	tn := c.start(newID, 0, true)
	must(t, tn.Promote(ctx, newID))
	lead = c.leader(5 * time.Second)
	victim, keep := uint64(2), uint64(1)
	if lead == victim {
		victim, keep = 1, 2
	}
	must(t, c.node(lead).RemoveNode(ctx, victim))
	c.stop(victim)
	c.proposeRetry([]uint64{keep, 3, newID}, 1, 3, "b")

	type change struct {
		seqno  uint64
		voters string
	}
	changes := func(id uint64) []change {
		var out []change
		for _, d := range c.node(id).deliveries() {
			if d.Type != DeliveryMembers || d.Seqno <= 3 {
				continue // the bootstrap entries differ on a joiner (raft's Bootstrap)
			}
			// A change proposed again (confChange) may repeat the voters.
			if v := fmt.Sprint(Voters(d.Data)); len(out) == 0 || out[len(out)-1].voters != v {
				out = append(out, change{d.Seqno, v})
			}
		}
		return out
	}
	want := changes(keep)
	after := fmt.Sprint([]uint64{min(keep, 3), max(keep, 3), newID})
	if n := len(want); n != 3 || want[n-1].voters != after || want[n-2].voters != "[1 2 3 4]" || want[n-3].voters != "[1 2 3]" {
		t.Fatalf("node %d's voters over time: %v", keep, want)
	}
	if got := changes(3); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("node 3 saw voters %v, node %d %v", got, keep, want)
	}
	if got := changes(newID); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("the joiner saw voters %v, node %d %v", got, keep, want)
	}
}

// With RetainEntries a member that is down no longer holds compaction
// back for good: the others compact past it once they are RetainEntries
// ahead, and when it returns its consumer is handed a snapshot.
func TestRetentionCompactsPastADownNode(t *testing.T) {
	testRetention(t, "b", func(cfg *Config) { cfg.SnapshotEntries, cfg.RetainEntries = 20, 60 })
}

// The same with a limit in bytes: entries of about 1 KiB, 60 KiB retained,
// no limit in entries (and compactions only every 2^20 entries but for
// the bytes).
func TestRetentionInBytesCompactsPastADownNode(t *testing.T) {
	testRetention(t, strings.Repeat("x", 1000), func(cfg *Config) { cfg.SnapshotEntries, cfg.RetainBytes = 1<<20, 60<<10 })
}

// testRetention: a member down while the others write is compacted past
// once the limit tune sets is reached, and is handed a snapshot when it
// returns; compactions keep KeepEntries.
func testRetention(t *testing.T, tag string, tune func(*Config)) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c := newTestCluster(t, 3, func(cfg *Config) {
		tune(cfg)
		cfg.KeepEntries = 100
		cfg.SnapshotData = func(seqno uint64) ([]byte, error) { return []byte("state@" + itoa(seqno)), nil }
	})
	c.startAll()
	defer c.stopAll()
	lead := c.leader(5 * time.Second)
	victim := uint64(3)
	if victim == lead {
		victim = 2
	}
	var rest []uint64
	for _, id := range ids(3) {
		if id != victim {
			rest = append(rest, id)
		}
	}
	c.proposeAll(ids(3), 1, 5, "a")
	got := c.stop(victim)
	last := got[len(got)-1].Seqno
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.proposeRetry(rest, 1, 10, tag+itoa(uint64(time.Now().UnixNano())))
		// Every survivor, so whichever leads must send a snapshot.
		fi := uint64(1 << 62)
		for _, id := range rest {
			f, _ := c.node(id).st.Raft().FirstIndex()
			fi = min(fi, f)
		}
		if fi > last+1 {
			// Compacted, but never closer than KeepEntries to the end.
			for _, id := range rest {
				f, _ := c.node(id).st.Raft().FirstIndex()
				l, _ := c.node(id).st.Raft().LastIndex()
				if f > 1 && f-1+100 > l {
					t.Fatalf("node %d compacted to %d with its log ending at %d: fewer than KeepEntries kept", id, f-1, l)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the survivors did not compact past the down node (first index %d, node %d at %d)", fi, victim, last)
		}
	}
	tn := c.start(victim, last, false)
	var top uint64
	for _, s := range c.proposeRetry(append(rest, victim), 1, 3, "c") {
		top = max(top, s)
	}
	tn.waitSeqno(t, top, 10*time.Second)
	// Its own log may still hold a few entries past what it delivered;
	// after those it can only go on from a snapshot.
	snap := false
	for _, d := range tn.deliveries() {
		snap = snap || (d.Type == DeliverySnapshot && d.Seqno > last)
	}
	if !snap {
		t.Fatalf("the returning node (at %d) was handed no snapshot: %+v", last, tn.deliveries()[:min(5, len(tn.deliveries()))])
	}
}

// A node that joins by state transfer at S starts its empty log at a
// point the donor names a window before S (Config.Seed): it is caught up
// with the entries after that point, not with the leader's snapshot taken
// when it was added, which lies past the point and would skip the window
// (a joiner into a compacted log used to be handed that snapshot).
func TestSeededJoinerReplaysFromItsLogPoint(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const window = 30
	var seedPoint *LogPoint
	c := newTestCluster(t, 3, func(cfg *Config) {
		cfg.SnapshotEntries, cfg.KeepEntries, cfg.SeededJoins = 20, window, true
		cfg.ProposeTimeout = 15 * time.Second
		if cfg.ID == 4 {
			cfg.Seed = seedPoint
		}
	})
	c.startAll()
	defer c.stopAll()
	lead := c.leader(5 * time.Second)
	for i := 0; i < 4 && c.node(lead).Compacted() == 0; i++ {
		c.proposeRetry(ids(3), 1, 50, "a"+itoa(uint64(i)))
	}
	if c.node(lead).Compacted() == 0 {
		t.Fatal("the log was never compacted")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const newID = 4
	c.addrs[newID], c.dirs[newID] = freeAddr(t), t.TempDir()
	lead = c.leader(5 * time.Second)
	must(t, c.node(lead).AddLearner(ctx, newID, c.addrs[newID]))
	c.proposeRetry([]uint64{lead}, 1, 5, "b")
	// The donor's applied prefix S, and the point a window before it.
	s := c.node(lead).Delivered()
	lp, err := c.node(lead).LogPointAt(s - window)
	must(t, err)
	if lp.Index <= c.node(lead).Compacted() {
		t.Fatalf("the point %d is compacted away (at %d)", lp.Index, c.node(lead).Compacted())
	}
	seedPoint = &lp
	tn := c.start(newID, lp.Index, true)
	var top uint64
	for _, sq := range c.proposeRetry(ids(3), 1, 5, "c") {
		top = max(top, sq)
	}
	tn.waitSeqno(t, top, 15*time.Second)
	// The leader commits top before its own delivery stream hands it
	// over: compare once it has.
	c.node(lead).waitSeqno(t, top, 15*time.Second)
	var got, want []uint64
	for _, d := range tn.deliveries() {
		if d.Type == DeliverySnapshot {
			t.Fatalf("the seeded joiner was handed a snapshot at %d (its log starts at %d)", d.Seqno, lp.Index)
		}
		if d.Type == DeliveryEntry && d.Seqno <= top {
			got = append(got, d.Seqno)
		}
	}
	for _, d := range c.node(lead).deliveries() {
		if d.Type == DeliveryEntry && d.Seqno > lp.Index && d.Seqno <= top {
			want = append(want, d.Seqno)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("the joiner (from %d) got entries %v, the leader delivered %v", lp.Index, got, want)
	}

	// A member restarted now replays a window before what it delivered
	// from its own log: no snapshot was taken for the joiner (SeededJoins),
	// which would be where its log starts after the restart.
	other := uint64(1)
	if other == lead {
		other = 2
	}
	after := c.node(other).Delivered() - window
	c.stop(other)
	rn := c.start(other, after, false)
	top = 0
	for _, sq := range c.proposeRetry([]uint64{lead}, 1, 3, "d") {
		top = max(top, sq)
	}
	rn.waitSeqno(t, top, 15*time.Second)
	for _, d := range rn.deliveries() {
		if d.Type == DeliverySnapshot {
			t.Fatalf("node %d, restarted to replay from %d, was handed a snapshot at %d", other, after, d.Seqno)
		}
	}
}
