package totalorder

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"go.etcd.io/raft/v3/raftpb"

	"go.uber.org/goleak"

	"github.com/ordo-db/ordo/internal/totalorder/faults"
	"github.com/ordo-db/ordo/internal/totalorder/transport"
)

var linkCut = faults.Link{Partitioned: true}

func ids(n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = uint64(i + 1)
	}
	return out
}

func (c *testCluster) running() []*testNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*testNode
	for _, id := range ids(len(c.addrs) + 8) {
		if tn, ok := c.nodes[id]; ok {
			out = append(out, tn)
		}
	}
	return out
}

func TestAgreement(t *testing.T) {
	for _, n := range []int{3, 5} {
		t.Run(map[int]string{3: "3nodes", 5: "5nodes"}[n], func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			c := newTestCluster(t, n, nil)
			c.startAll()
			defer c.stopAll()
			c.leader(5 * time.Second)
			acks := c.proposeAll(ids(n), 4, 40, "agree")
			if len(acks) != n*4*40 {
				t.Fatalf("got %d acks, want %d", len(acks), n*4*40)
			}
			checkAgreement(t, c.running(), acks)
		})
	}
}

func TestLeaderCrashReelection(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c := newTestCluster(t, 3, nil)
	c.startAll()
	defer c.stopAll()
	lead := c.leader(5 * time.Second)
	all := c.proposeAll(ids(3), 2, 20, "before")
	before := c.stop(lead)
	var rest []uint64
	for _, id := range ids(3) {
		if id != lead {
			rest = append(rest, id)
		}
	}
	newLead := c.leader(5 * time.Second)
	if newLead == lead {
		t.Fatalf("leader %d stopped but still leader", lead)
	}
	for _, id := range rest {
		want := map[bool]float64{true: 1}[id == newLead]
		if got := testutil.ToFloat64(c.node(id).m.isLeader); got != want {
			t.Errorf("node %d: ordo_totalorder_is_leader = %v, want %v (leader %d)", id, got, want, newLead)
		}
	}
	// The new leader's first entry (empty, of its term) is committed and
	// applied but never delivered: a consumer's backlog must be counted
	// from the last delivered seqno (the dashboard's "behind the order"),
	// not from the committed index, which stays ahead of it.
	for _, id := range rest {
		n := c.node(id)
		deadline := time.Now().Add(5 * time.Second)
		for {
			got := n.deliveries()
			applied, committed := testutil.ToFloat64(n.m.applied), testutil.ToFloat64(n.m.committed)
			delivered := testutil.ToFloat64(n.m.delivered)
			if len(got) > 0 && applied == committed && delivered == float64(got[len(got)-1].Seqno) && delivered < committed {
				// A read index is a seqno the consumer has been handed,
				// not the empty entry it would wait for forever.
				idx, err := n.ReadIndex(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if idx != got[len(got)-1].Seqno {
					t.Fatalf("node %d: read index %d, want the last delivered seqno %d (committed %v)", id, idx, got[len(got)-1].Seqno, committed)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d: applied %v committed %v delivered %v, last delivery %+v", id, applied, committed, delivered, got[max(0, len(got)-1):])
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for p, s := range c.proposeRetry(rest, 2, 20, "after") {
		all[p] = s
	}
	checkAgreement(t, c.running(), all)
	// the old leader comes back with its storage and catches up from
	// what its consumer had seen
	last := before[len(before)-1].Seqno
	old := c.start(lead, last, false)
	checkAgreement(t, c.running(), all)
	if got := old.deliveries(); len(got) == 0 || got[0].Type != DeliveryEntry || got[0].Seqno <= last {
		t.Fatalf("restarted node (after %d) delivered %+v first", last, got[:min(1, len(got))])
	}
}

func TestFollowerRestartCatchesUpExactlyOnce(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c := newTestCluster(t, 3, func(cfg *Config) { cfg.SnapshotEntries = 1 << 40 })
	c.startAll()
	defer c.stopAll()
	lead := c.leader(5 * time.Second)
	f := uint64(1)
	if f == lead {
		f = 2
	}
	acks := c.proposeAll(ids(3), 2, 25, "one")
	var top uint64
	for _, s := range acks {
		top = max(top, s)
	}
	c.node(f).waitSeqno(t, top, 5*time.Second)
	first := c.stop(f)
	// The consumer proved a prefix in the middle of what it had seen.
	after := first[len(first)/2].Seqno
	var others []uint64
	for _, id := range ids(3) {
		if id != f {
			others = append(others, id)
		}
	}
	for p, s := range c.proposeAll(others, 2, 25, "two") {
		acks[p] = s
	}
	tn := c.start(f, after, false)
	checkAgreement(t, c.running(), acks)
	got := tn.deliveries()
	if len(got) == 0 || got[0].Seqno <= after {
		t.Fatalf("restart after %d delivered from %v", after, got[:min(1, len(got))])
	}
	// everything after `after` exactly once, in the same order as before
	var want []Delivery
	for _, d := range first {
		if d.Seqno > after {
			want = append(want, d)
		}
	}
	if !sameSuffix(want, got[:len(want)]) {
		t.Fatalf("redelivered sequence differs from the first delivery")
	}
}

func TestMinorityPartition(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	// short enough to test quickly, long enough for a loaded machine's
	// fsync stalls before the partition
	const timeout = 1500 * time.Millisecond
	c := newTestCluster(t, 3, func(cfg *Config) { cfg.ProposeTimeout = timeout })
	c.startAll()
	defer c.stopAll()
	lead := c.leader(5 * time.Second)
	// isolate the leader: it is the minority side
	minority := lead
	acks := c.proposeAll(ids(3), 1, 10, "pre")
	var majority []uint64
	for _, id := range ids(3) {
		if id != minority {
			majority = append(majority, id)
		}
	}
	partition(c, []uint64{minority}, majority)
	start := time.Now()
	_, err := c.node(minority).Propose(context.Background(), []byte("lost?"))
	if !errors.Is(err, ErrNoQuorum) {
		t.Fatalf("minority propose: got %v, want ErrNoQuorum", err)
	}
	if el := time.Since(start); el < timeout || el > timeout+time.Second {
		t.Fatalf("minority propose failed after %v, want about %v", el, timeout)
	}
	if _, err := c.node(minority).ReadIndex(context.Background()); !errors.Is(err, ErrNoQuorum) {
		t.Fatalf("minority read index: got %v, want ErrNoQuorum", err)
	}
	// the majority elects a new leader and commits
	for p, s := range c.proposeRetry(majority, 2, 20, "major") {
		acks[p] = s
	}
	for _, tn := range c.running() {
		tn.faults.Heal()
	}
	for p, s := range c.proposeRetry(ids(3), 1, 5, "healed") {
		acks[p] = s
	}
	checkAgreement(t, c.running(), acks)
	var retries float64
	for _, tn := range c.running() {
		retries += testutil.ToFloat64(tn.m.proposalRetries)
	}
	t.Logf("proposals lost with the leader and proposed again: %v", retries)
}

// partition cuts every link between a and b both ways.
func partition(c *testCluster, a, b []uint64) {
	for _, x := range a {
		for _, y := range b {
			c.node(x).faults.SetLink(y, linkCut)
			c.node(y).faults.SetLink(x, linkCut)
		}
	}
}

func TestReadIndex(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c := newTestCluster(t, 3, nil)
	c.startAll()
	defer c.stopAll()
	c.leader(5 * time.Second)
	acks := c.proposeAll([]uint64{1}, 1, 5, "r")
	var top uint64
	for _, s := range acks {
		top = max(top, s)
	}
	for _, id := range ids(3) {
		idx, err := c.node(id).ReadIndex(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if idx < top {
			t.Fatalf("node %d read index %d below committed %d", id, idx, top)
		}
	}
}

func TestStopUnblocksCallers(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c := newTestCluster(t, 3, nil)
	c.startAll()
	c.leader(5 * time.Second)
	n1 := c.node(1)
	c.stopAll()
	if _, err := n1.Propose(context.Background(), []byte("x")); !errors.Is(err, ErrStopped) {
		t.Fatalf("propose after stop: %v", err)
	}
}

func TestConfigErrors(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c := newTestCluster(t, 1, nil)
	base := c.config(1)
	cases := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"no id", func(c *Config) { c.ID = 0 }, "ID must be non-zero"},
		{"no dir", func(c *Config) { c.Dir = "" }, "Dir is required"},
		{"no transport", func(c *Config) { c.Transport = nil }, "Transport is required"},
		{"heartbeat >= election", func(c *Config) { c.HeartbeatTicks, c.ElectionTicks = 5, 5 }, "HeartbeatTicks"},
		{"bootstrap without self", func(c *Config) { c.Peers = map[uint64]string{9: "127.0.0.1:1"} }, "Peers must contain"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			cfg.Dir = t.TempDir()
			cfg.Transport = &nopTransport{}
			tc.edit(&cfg)
			n, err := Start(cfg)
			if err == nil {
				n.Stop()
				t.Fatal("Start accepted the config")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not mention %q", err, tc.want)
			}
		})
	}
	// a directory used by node 1 cannot be opened as node 2
	tn := c.start(1, 0, false)
	c.leader(5 * time.Second)
	if _, err := tn.Propose(context.Background(), make([]byte, tn.cfg.MaxProposalBytes+1)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized proposal: %v, want ErrTooLarge", err)
	}
	c.stop(1)
	cfg := base
	cfg.ID = 2
	cfg.Transport = &nopTransport{}
	if _, err := Start(cfg); err == nil || !strings.Contains(err.Error(), "belongs to node 1") {
		t.Fatalf("opening node 1's directory as node 2: %v", err)
	}
}

// nopTransport is a Transport that goes nowhere, for configuration tests.
type nopTransport struct{}

func (*nopTransport) Start(transport.Handler) error { return nil }
func (*nopTransport) Send([]raftpb.Message)         {}
func (*nopTransport) AddPeer(uint64, string)        {}
func (*nopTransport) RemovePeer(uint64)             {}
func (*nopTransport) SetApplied(uint64)             {}
func (*nopTransport) Stop()                         {}

// Proposers keep going on every node while the leader is stopped: proposals
// forwarded to the dead leader are lost and proposed again once the new
// leader's term shows in the log; every Propose succeeds and every payload
// is delivered exactly once.
func TestProposalsSurviveLeaderCrash(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c := newTestCluster(t, 3, func(cfg *Config) { cfg.ProposeTimeout = 5 * time.Second })
	c.startAll()
	defer c.stopAll()
	lead := c.leader(5 * time.Second)
	var rest []uint64
	for _, id := range ids(3) {
		if id != lead {
			rest = append(rest, id)
		}
	}
	done := make(chan map[string]uint64)
	go func() { done <- c.proposeAll(rest, 4, 60, "through") }()
	time.Sleep(30 * time.Millisecond)
	c.stop(lead)
	acks := <-done
	if len(acks) != 2*4*60 {
		t.Fatalf("%d acks, want %d", len(acks), 2*4*60)
	}
	if newLead := c.leader(5 * time.Second); newLead == lead {
		t.Fatal("stopped leader still leads")
	}
	checkAgreement(t, c.running(), acks)
	var retries float64
	for _, tn := range c.running() {
		retries += testutil.ToFloat64(tn.m.proposalRetries)
	}
	t.Logf("proposals lost with the leader and proposed again: %v", retries)
}

// TestOneFsyncPerAppend: a follower fsyncs once per append that carries
// entries, not again when the leader only tells it the new commit index
// (which it must acknowledge, but need not make durable first). The
// follower proposes, as a client's node does, and waits for each commit.
func TestOneFsyncPerAppend(t *testing.T) {
	c := newTestCluster(t, 3, nil)
	c.startAll()
	defer c.stopAll()
	lead := c.leader(5 * time.Second)
	var follower uint64
	for id := range c.nodes {
		if id != lead {
			follower = id
			break
		}
	}
	h := c.node(follower).m.logSync
	count := func() uint64 {
		var m dto.Metric
		if err := h.Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetHistogram().GetSampleCount()
	}
	// one proposal at a time, so no two share an append
	before := count()
	const n = 50
	for i := 0; i < n; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if _, err := c.node(follower).Propose(ctx, []byte(fmt.Sprintf("p%d", i))); err != nil {
			t.Fatal(err)
		}
		cancel()
	}
	// the last commit index reaches the follower after the last proposal returns
	time.Sleep(200 * time.Millisecond)
	got := count() - before
	t.Logf("follower fsyncs: %d for %d entries", got, n)
	if got < n || got > n+n/5 {
		t.Fatalf("follower fsynced %d times for %d sequential entries, want about one per entry", got, n)
	}
}
