package totalorder

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.etcd.io/raft/v3"

	"github.com/ordo-db/ordo/internal/testport"
	"github.com/ordo-db/ordo/internal/totalorder/faults"
	"github.com/ordo-db/ordo/internal/totalorder/transport"
)

// testCluster runs real nodes in this process, each with its own gRPC
// server on a loopback socket and its own storage directory.
type testCluster struct {
	t      *testing.T
	addrs  map[uint64]string
	nodes  map[uint64]*testNode
	dirs   map[uint64]string
	tune   func(*Config)
	srvTLS *tls.Config
	cliTLS *tls.Config
	mu     sync.Mutex
}

// testNode is a node plus a consumer that records what it delivers.
type testNode struct {
	*Node
	faults *faults.Injector
	reg    *prometheus.Registry

	mu   sync.Mutex
	got  []Delivery
	cond *sync.Cond
	done chan struct{}
}

func newTestCluster(t *testing.T, n int, tune func(*Config)) *testCluster {
	c := &testCluster{t: t, addrs: map[uint64]string{}, nodes: map[uint64]*testNode{}, dirs: map[uint64]string{}, tune: tune}
	for i := 1; i <= n; i++ {
		c.addrs[uint64(i)] = freeAddr(t)
		c.dirs[uint64(i)] = t.TempDir()
	}
	// Nodes a failed test leaves running would go on dialling their peers
	// and make every later test's goroutine check fail too.
	t.Cleanup(c.stopAll)
	return c
}

// freeAddr is a loopback address whose port stays this test binary's
// while its node is stopped and restarted (testport: below the kernel's
// ephemeral range, where an outgoing connection could take it, and locked
// against other test processes).
func freeAddr(t *testing.T) string {
	addr, err := testport.Addr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

func (c *testCluster) startAll() {
	for id := range c.addrs {
		c.start(id, 0, false)
	}
}

func (c *testCluster) config(id uint64) Config {
	peers := map[uint64]string{}
	for k, v := range c.addrs {
		peers[k] = v
	}
	cfg := Config{
		ID:              id,
		Dir:             c.dirs[id],
		Peers:           peers,
		TickInterval:    10 * time.Millisecond,
		ElectionTicks:   20,
		HeartbeatTicks:  1,
		ProposeTimeout:  3 * time.Second,
		SnapshotEntries: 100,
	}
	if c.tune != nil {
		c.tune(&cfg)
	}
	if dir := os.Getenv("ORDO_TOTALORDER_RAFTLOG"); dir != "" { // debugging aid
		if f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("%s-n%d.log", strings.ReplaceAll(c.t.Name(), "/", "_"), id)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
			cfg.Logger = &raft.DefaultLogger{Logger: log.New(f, "", log.Lmicroseconds)}
			c.t.Cleanup(func() { f.Close() })
		}
	}
	return cfg
}

// start starts node id on its address and directory.
func (c *testCluster) start(id uint64, after uint64, join bool) *testNode {
	c.t.Helper()
	var (
		l   net.Listener
		err error
	)
	for i := 0; i < 250; i++ { // the port may take a moment to be free again (or be some other socket's ephemeral port for a while)
		if l, err = net.Listen("tcp", c.addrs[id]); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		c.t.Fatalf("listen %s: %v", c.addrs[id], err)
	}
	tr, err := transport.NewGRPC(transport.GRPCConfig{ID: id, Listener: l, ServerTLS: c.srvTLS, ClientTLS: c.cliTLS})
	if err != nil {
		c.t.Fatal(err)
	}
	inj := faults.Wrap(tr, id)
	cfg := c.config(id)
	cfg.Transport = inj
	cfg.StartAfter = after
	cfg.Join = join
	reg := prometheus.NewRegistry()
	cfg.Registerer = reg
	nd, err := Start(cfg)
	if err != nil {
		l.Close()
		c.t.Fatalf("start node %d: %v", id, err)
	}
	tn := &testNode{Node: nd, faults: inj, reg: reg, done: make(chan struct{})}
	tn.cond = sync.NewCond(&tn.mu)
	go func() {
		defer close(tn.done)
		for d := range nd.Deliveries() {
			tn.mu.Lock()
			tn.got = append(tn.got, d)
			tn.cond.Broadcast()
			tn.mu.Unlock()
			nd.MarkApplied(d.Seqno)
		}
	}()
	c.mu.Lock()
	c.nodes[id] = tn
	c.mu.Unlock()
	return tn
}

// stop stops node id (its storage stays).
func (c *testCluster) stop(id uint64) []Delivery {
	c.mu.Lock()
	tn := c.nodes[id]
	delete(c.nodes, id)
	c.mu.Unlock()
	if tn == nil {
		return nil
	}
	tn.Stop()
	<-tn.done
	return tn.deliveries()
}

// describe summarises each running node's view, for failure messages.
func (c *testCluster) describe() string {
	var b strings.Builder
	for _, tn := range c.running() {
		fmt.Fprintf(&b, "node %d: leader %d, term %v, leader changes %v, committed %v, applied %v, err %v; ", tn.ID(), tn.Leader(),
			testutil.ToFloat64(tn.m.term), testutil.ToFloat64(tn.m.leaderChanges),
			testutil.ToFloat64(tn.m.committed), testutil.ToFloat64(tn.m.applied), tn.Err())
	}
	for _, tn := range c.running() {
		if tn.Leader() == tn.ID() {
			st := tn.Status()
			fmt.Fprintf(&b, "leader raft: commit %d applied %d progress %+v; ", st.Commit, st.Applied, st.Progress)
		}
	}
	if dir := os.Getenv("ORDO_TOTALORDER_STACKS"); dir != "" { // debugging aid
		f, err := os.CreateTemp(dir, "stacks-*.txt")
		if err == nil {
			_ = pprof.Lookup("goroutine").WriteTo(f, 2)
			f.Close()
			fmt.Fprintf(&b, "stacks in %s", f.Name())
		}
	}
	return b.String()
}

// stopAll stops every node still running, whatever its address.
func (c *testCluster) stopAll() {
	for _, tn := range c.running() {
		c.stop(tn.ID())
	}
}

func (c *testCluster) node(id uint64) *testNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[id]
}

func (tn *testNode) deliveries() []Delivery {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	return append([]Delivery(nil), tn.got...)
}

// waitSeqno waits until the node has delivered seqno or more.
func (tn *testNode) waitSeqno(t *testing.T, seqno uint64, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		tn.mu.Lock()
		var last uint64
		if len(tn.got) > 0 {
			last = tn.got[len(tn.got)-1].Seqno
		}
		tn.mu.Unlock()
		if last >= seqno {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %d delivered up to %d, want %d within %v", tn.ID(), last, seqno, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// leader waits for a leader that every running node agrees on.
func (c *testCluster) leader(timeout time.Duration) uint64 {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		c.mu.Lock()
		var lead uint64
		agree := len(c.nodes) > 0
		for _, tn := range c.nodes {
			l := tn.Leader()
			if l == 0 || (lead != 0 && l != lead) {
				agree = false
			}
			lead = l
		}
		_, running := c.nodes[lead]
		c.mu.Unlock()
		if agree && running {
			return lead
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.t.Fatalf("no agreed leader within %v", timeout)
	return 0
}

// proposeAll runs `workers` proposers on each listed node, each making
// `each` proposals, and returns payload -> seqno of every acknowledged one.
func (c *testCluster) proposeAll(ids []uint64, workers, each int, tag string) map[string]uint64 {
	c.t.Helper()
	var (
		mu   sync.Mutex
		acks = map[string]uint64{}
		wg   sync.WaitGroup
		errs = make(chan error, len(ids)*workers)
	)
	for _, id := range ids {
		tn := c.node(id)
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < each; i++ {
					p := fmt.Sprintf("%s/n%d/w%d/%d", tag, id, w, i)
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					seq, err := tn.Propose(ctx, []byte(p))
					cancel()
					if err != nil {
						errs <- fmt.Errorf("node %d propose %s: %w (%s)", id, p, err, c.describe())
						return
					}
					mu.Lock()
					acks[p] = seq
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		c.t.Fatal(err)
	}
	return acks
}

// proposeRetry is proposeAll for phases right after a fault (lossy links, a
// leader change, a restart): a proposal forwarded to a leader that is gone
// is lost and its Propose ends with ErrNoQuorum, as documented; it is retried
// under a new payload (the lost one may still be delivered, unacknowledged).
func (c *testCluster) proposeRetry(ids []uint64, workers, each int, tag string) map[string]uint64 {
	c.t.Helper()
	var (
		mu   sync.Mutex
		acks = map[string]uint64{}
		wg   sync.WaitGroup
	)
	for _, id := range ids {
		tn := c.node(id)
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i, retries := 0, 0; i < each; {
					p := fmt.Sprintf("%s/n%d/w%d/%d/retry%d", tag, id, w, i, retries)
					seq, err := tn.Propose(context.Background(), []byte(p))
					if errors.Is(err, ErrNoQuorum) && retries < 20 {
						retries++
						continue
					}
					if err != nil {
						c.t.Errorf("node %d (after %d retries): %v", id, retries, err)
						return
					}
					mu.Lock()
					acks[p] = seq
					mu.Unlock()
					i++
				}
			}()
		}
	}
	wg.Wait()
	return acks
}

// checkAgreement checks that the nodes delivered identical sequences up to
// at least the highest acknowledged seqno, with no duplicates, and that every
// ack's seqno carries its payload.
func checkAgreement(t *testing.T, nodes []*testNode, acks map[string]uint64) {
	t.Helper()
	var top uint64
	for _, s := range acks {
		top = max(top, s)
	}
	for _, tn := range nodes {
		tn.waitSeqno(t, top, 10*time.Second)
	}
	// the reference is the node that covers the most of the log
	refNode := nodes[0]
	for _, tn := range nodes[1:] {
		if a, b := tn.deliveries(), refNode.deliveries(); len(a) > 0 && len(b) > 0 && a[0].Seqno < b[0].Seqno {
			refNode = tn
		}
	}
	ref := trimTo(refNode.deliveries(), top)
	bySeq := map[uint64]string{}
	seen := map[string]bool{}
	var prev uint64
	for _, d := range ref {
		if d.Seqno <= prev {
			t.Fatalf("node %d: seqno %d after %d", refNode.ID(), d.Seqno, prev)
		}
		prev = d.Seqno
		if d.Type == DeliveryEntry {
			if seen[string(d.Data)] {
				t.Fatalf("payload %q delivered twice", d.Data)
			}
			seen[string(d.Data)] = true
			bySeq[d.Seqno] = string(d.Data)
		}
	}
	var covered uint64 // acks at or below a snapshot the reference started from
	if len(ref) > 0 && ref[0].Type == DeliverySnapshot {
		covered = ref[0].Seqno
	}
	for p, s := range acks {
		if s <= covered {
			continue
		}
		if bySeq[s] != p {
			t.Fatalf("ack %q at seqno %d, but seqno %d carries %q", p, s, s, bySeq[s])
		}
	}
	for _, tn := range nodes {
		got := trimTo(tn.deliveries(), top)
		if !sameSuffix(ref, got) {
			t.Fatalf("node %d delivered a different sequence than node %d (%d vs %d items)", tn.ID(), refNode.ID(), len(got), len(ref))
		}
	}
}

func trimTo(ds []Delivery, top uint64) []Delivery {
	for i, d := range ds {
		if d.Seqno > top {
			return ds[:i]
		}
	}
	return ds
}

// sameSuffix compares two delivery sequences over the seqnos both cover (a
// node that restarted after a proven prefix, or began with a snapshot,
// starts later). A snapshot delivery only marks where a node's coverage
// starts.
func sameSuffix(a, b []Delivery) bool {
	from := func(ds []Delivery) uint64 {
		if len(ds) == 0 {
			return 0
		}
		if ds[0].Type == DeliverySnapshot {
			return ds[0].Seqno + 1
		}
		return ds[0].Seqno
	}
	start := max(from(a), from(b))
	cut := func(ds []Delivery) []Delivery {
		for len(ds) > 0 && (ds[0].Seqno < start || ds[0].Type == DeliverySnapshot) {
			ds = ds[1:]
		}
		return ds
	}
	a, b = cut(a), cut(b)
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Seqno != b[i].Seqno || a[i].Type != b[i].Type || string(a[i].Data) != string(b[i].Data) {
			return false
		}
	}
	return true
}

func TestMain(m *testing.M) {
	if spec := os.Getenv(crashEnv); spec != "" {
		os.Exit(crashChild(spec)) // the child process of TestKill9WholeCluster
	}
	os.Exit(m.Run())
}
