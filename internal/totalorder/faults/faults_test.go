package faults

import (
	"sync"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/goleak"

	"github.com/ordo-db/ordo/internal/totalorder/transport"
)

// recorder is a transport.Transport that records what reaches it.
type recorder struct {
	mu   sync.Mutex
	sent []raftpb.Message
	at   []time.Time
	stop bool
}

func (r *recorder) Start(transport.Handler) error { return nil }
func (r *recorder) AddPeer(uint64, string)        {}
func (r *recorder) RemovePeer(uint64)             {}
func (r *recorder) SetApplied(uint64)             {}
func (r *recorder) Stop()                         { r.mu.Lock(); r.stop = true; r.mu.Unlock() }
func (r *recorder) Send(ms []raftpb.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = append(r.sent, ms...)
	for range ms {
		r.at = append(r.at, time.Now())
	}
}
func (r *recorder) got() []raftpb.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]raftpb.Message(nil), r.sent...)
}

func msgs(to uint64, typ raftpb.MessageType, n int) []raftpb.Message {
	out := make([]raftpb.Message, n)
	for i := range out {
		out[i] = raftpb.Message{To: to, Type: typ, Index: uint64(i + 1)}
	}
	return out
}

func TestLinks(t *testing.T) {
	defer goleak.VerifyNone(t)
	cases := []struct {
		name   string
		link   Link
		typ    raftpb.MessageType
		lo, hi int // expected number of messages reaching peer 2 out of 1000
	}{
		{"healthy", Link{}, raftpb.MsgApp, 1000, 1000},
		{"partitioned", Link{Partitioned: true}, raftpb.MsgApp, 0, 0},
		{"drop 30%", Link{Drop: 0.3}, raftpb.MsgApp, 600, 800},
		{"duplicate 50%", Link{Duplicate: 0.5}, raftpb.MsgApp, 1400, 1600},
		{"proposals never duplicated", Link{Duplicate: 1}, raftpb.MsgProp, 1000, 1000},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{}
			f := Wrap(r, 1)
			f.SetLink(2, tc.link)
			f.Send(append(msgs(2, tc.typ, 1000), msgs(3, tc.typ, 10)...))
			var to2, to3 int
			for _, m := range r.got() {
				if m.To == 2 {
					to2++
				} else {
					to3++
				}
			}
			if to2 < tc.lo || to2 > tc.hi {
				t.Fatalf("%d messages reached peer 2, want [%d,%d]", to2, tc.lo, tc.hi)
			}
			if to3 != 10 {
				t.Fatalf("peer 3 (healthy link) got %d of 10", to3)
			}
			f.Stop()
		})
	}
}

func TestDelayKeepsOrder(t *testing.T) {
	defer goleak.VerifyNone(t)
	r := &recorder{}
	f := Wrap(r, 1)
	f.SetLink(2, Link{Delay: 30 * time.Millisecond})
	start := time.Now()
	f.Send(msgs(2, raftpb.MsgApp, 50))
	for len(r.got()) < 50 {
		if time.Since(start) > 2*time.Second {
			t.Fatalf("only %d of 50 delayed messages arrived", len(r.got()))
		}
		time.Sleep(time.Millisecond)
	}
	r.mu.Lock()
	for i, at := range r.at {
		if el := at.Sub(start); el < 30*time.Millisecond {
			r.mu.Unlock()
			t.Fatalf("message %d delivered after %v, want >= 30ms", i, el)
		}
	}
	r.mu.Unlock()
	for i, m := range r.got() {
		if m.Index != uint64(i+1) {
			t.Fatalf("message %d has index %d: reordered", i, m.Index)
		}
	}
	f.Heal()
	f.Send(msgs(2, raftpb.MsgApp, 1))
	if n := len(r.got()); n != 51 {
		t.Fatalf("after Heal: %d messages, want 51", n)
	}
	f.Stop()
	if !r.stop {
		t.Fatal("Stop did not stop the wrapped transport")
	}
}

func TestPartitionHelper(t *testing.T) {
	r1, r2, r3 := &recorder{}, &recorder{}, &recorder{}
	f1, f2, f3 := Wrap(r1, 1), Wrap(r2, 2), Wrap(r3, 3)
	Partition(map[uint64]*Injector{1: f1}, map[uint64]*Injector{2: f2, 3: f3})
	f1.Send([]raftpb.Message{{To: 2}, {To: 3}})
	f2.Send([]raftpb.Message{{To: 1}, {To: 3}})
	f3.Send([]raftpb.Message{{To: 1}, {To: 2}})
	if len(r1.got()) != 0 || len(r2.got()) != 1 || len(r3.got()) != 1 {
		t.Fatalf("partition leaked: %d %d %d", len(r1.got()), len(r2.got()), len(r3.got()))
	}
	for _, f := range []*Injector{f1, f2, f3} {
		f.Stop()
	}
}
