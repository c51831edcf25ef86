package transport

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/goleak"
)

// handler records what a transport delivers.
type handler struct {
	mu      sync.Mutex
	got     []raftpb.Message
	applied map[uint64]uint64
	removed map[uint64]bool
	gone    chan struct{}
	once    sync.Once
}

func newHandler() *handler {
	return &handler{applied: map[uint64]uint64{}, removed: map[uint64]bool{}, gone: make(chan struct{})}
}

func (h *handler) Process(_ context.Context, m raftpb.Message) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.got = append(h.got, m)
	return nil
}
func (h *handler) ReportUnreachable(uint64)    {}
func (h *handler) ReportSnapshot(uint64, bool) {}
func (h *handler) PeerApplied(id, a uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.applied[id] = a
}
func (h *handler) IsRemoved(id uint64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.removed[id]
}
func (h *handler) Removed() { h.once.Do(func() { close(h.gone) }) }
func (h *handler) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.got)
}

func startT(t *testing.T, id uint64, h Handler) *GRPC {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tr, err := NewGRPC(GRPCConfig{ID: id, Listener: l, IdleApplied: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Start(h); err != nil {
		t.Fatal(err)
	}
	return tr
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestOrderedDeliveryAndApplied(t *testing.T) {
	defer goleak.VerifyNone(t)
	h1, h2 := newHandler(), newHandler()
	t1, t2 := startT(t, 1, h1), startT(t, 2, h2)
	defer t2.Stop()
	defer t1.Stop()
	t1.AddPeer(2, t2.Addr())
	t1.SetApplied(42)
	const n = 5000
	for i := 1; i <= n; i++ {
		t1.Send([]raftpb.Message{{Type: raftpb.MsgApp, Term: 1, From: 1, To: 2, Index: uint64(i)}})
		if i%500 == 0 {
			waitFor(t, "queue to drain", func() bool { return h2.count() >= i-100 })
		}
	}
	waitFor(t, "all messages", func() bool { return h2.count() == n })
	h2.mu.Lock()
	for i, m := range h2.got {
		if m.Index != uint64(i+1) {
			h2.mu.Unlock()
			t.Fatalf("message %d has index %d", i, m.Index)
		}
	}
	h2.mu.Unlock()
	waitFor(t, "applied report", func() bool { h2.mu.Lock(); defer h2.mu.Unlock(); return h2.applied[1] == 42 })
}

// TestBatchesStayUnderTheMessageLimit: many large messages queued at once
// (a follower catching up on big entries) travel in batches under
// MaxMsgBytes, all of them, in order; a batch of every queued message
// would exceed the limit and be refused again and again.
func TestBatchesStayUnderTheMessageLimit(t *testing.T) {
	defer goleak.VerifyNone(t)
	h2 := newHandler()
	start := func(id uint64, h Handler) *GRPC {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		tr, err := NewGRPC(GRPCConfig{ID: id, Listener: l, IdleApplied: 10 * time.Millisecond, MaxMsgBytes: 256 << 10})
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Start(h); err != nil {
			t.Fatal(err)
		}
		return tr
	}
	t1, t2 := start(1, newHandler()), start(2, h2)
	defer t2.Stop()
	defer t1.Stop()
	const n = 40
	var ms []raftpb.Message
	for i := 1; i <= n; i++ {
		ms = append(ms, raftpb.Message{Type: raftpb.MsgApp, Term: 1, From: 1, To: 2, Index: uint64(i),
			Entries: []raftpb.Entry{{Index: uint64(i) + 1, Term: 1, Data: make([]byte, 50<<10)}}})
	}
	t1.AddPeer(2, t2.Addr())
	t1.Send(ms) // queued at once: one drain sees them all
	waitFor(t, "every message", func() bool { return h2.count() == n })
	h2.mu.Lock()
	defer h2.mu.Unlock()
	for i, m := range h2.got {
		if m.Index != uint64(i+1) {
			t.Fatalf("message %d has index %d", i, m.Index)
		}
	}
}

func TestRemovedSenderIsTold(t *testing.T) {
	defer goleak.VerifyNone(t)
	h1, h2 := newHandler(), newHandler()
	h2.removed[1] = true
	t1, t2 := startT(t, 1, h1), startT(t, 2, h2)
	defer t2.Stop()
	defer t1.Stop()
	t1.AddPeer(2, t2.Addr())
	for i := 0; i < 100; i++ {
		t1.Send([]raftpb.Message{{Type: raftpb.MsgHeartbeat, Term: 1, From: 1, To: 2}})
		select {
		case <-h1.gone:
			if h2.count() != 0 {
				t.Fatalf("removed node's messages were delivered")
			}
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatal("the removed sender was never told")
}

func TestConfigErrors(t *testing.T) {
	if _, err := NewGRPC(GRPCConfig{}); err == nil {
		t.Fatal("zero ID accepted")
	}
	if _, err := NewGRPC(GRPCConfig{ID: 1}); err == nil {
		t.Fatal("missing listener accepted")
	}
}

// unsentHandler is a handler that records the proposals reported unsent.
type unsentHandler struct {
	*handler
	unsentMu sync.Mutex
	unsent   []raftpb.Message
}

func (h *unsentHandler) ReportProposalUnsent(m raftpb.Message) {
	h.unsentMu.Lock()
	defer h.unsentMu.Unlock()
	h.unsent = append(h.unsent, m)
}

func (h *unsentHandler) reported() []raftpb.Message {
	h.unsentMu.Lock()
	defer h.unsentMu.Unlock()
	return append([]raftpb.Message(nil), h.unsent...)
}

// TestUnsentProposalsAreReported: a proposal forwarded to a peer that no
// stream reaches (nothing listens at its address, or it is not a peer) is
// reported unsent, whole, so the node can propose it again at once; other
// messages lost the same way are not.
func TestUnsentProposalsAreReported(t *testing.T) {
	defer goleak.VerifyNone(t)
	h := &unsentHandler{handler: newHandler()}
	tr := startT(t, 1, h)
	defer tr.Stop()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close() // nothing listens there now
	tr.AddPeer(2, dead)

	prop := raftpb.Message{Type: raftpb.MsgProp, From: 1, To: 2,
		Entries: []raftpb.Entry{{Data: []byte("a")}, {Data: []byte("b")}}}
	tr.Send([]raftpb.Message{{Type: raftpb.MsgApp, Term: 1, From: 1, To: 2, Index: 1}, prop})
	waitFor(t, "the proposal reported unsent", func() bool { return len(h.reported()) > 0 })
	got := h.reported()
	if len(got) != 1 || got[0].Type != raftpb.MsgProp || len(got[0].Entries) != 2 ||
		string(got[0].Entries[0].Data) != "a" || string(got[0].Entries[1].Data) != "b" {
		t.Fatalf("reported %+v, want the one MsgProp with its two entries", got)
	}

	// To a node that is not a peer: reported at once.
	tr.Send([]raftpb.Message{{Type: raftpb.MsgProp, From: 1, To: 9, Entries: []raftpb.Entry{{Data: []byte("c")}}}})
	if got := h.reported(); len(got) != 2 || got[1].To != 9 {
		t.Fatalf("a proposal to an unknown peer: reported %+v", got)
	}
}
