// Package faults wraps a transport.Transport with per-link fault injection
// for tests and benchmarks: delay, drop, duplicate and partition of the
// messages a node sends to each peer (the kernel offers no netem here and all
// traffic is on loopback).
//
// Proposals forwarded to the leader (MsgProp) are dropped and delayed like
// any message but never duplicated: Raft does not deduplicate proposals, so
// a duplicate would be a client retry, not a network fault.
//
// Faults act on the sending side only. To cut a link both ways, configure
// both ends (Partition does that for a set of injectors).
//
// Goroutines: one per link that has (or had) a delay, started lazily, which
// delivers that link's delayed messages in order; Stop waits for all of them.
// The wrapper never changes message contents and never reorders messages on
// one link (a duplicate is sent right after its original).
package faults

import (
	"math/rand/v2"
	"sync"
	"time"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/ordo-db/ordo/internal/totalorder/transport"
)

// Link is the fault setting for the messages from this node to one peer.
// The zero value is a healthy link.
type Link struct {
	// Partitioned drops every message.
	Partitioned bool
	// Drop is the probability in [0,1] that a message is dropped.
	Drop float64
	// Duplicate is the probability in [0,1] that a message is sent twice.
	Duplicate float64
	// Delay holds every message back this long (order is kept).
	Delay time.Duration
}

// Injector is a transport.Transport that applies Link faults before handing
// messages to the wrapped transport.
type Injector struct {
	inner transport.Transport

	mu      sync.Mutex
	links   map[uint64]Link
	delayed map[uint64]chan delayedMsg
	rng     *rand.Rand
	stopped bool
	stopc   chan struct{}
	wg      sync.WaitGroup
}

type delayedMsg struct {
	due time.Time
	m   raftpb.Message
}

var _ transport.Transport = (*Injector)(nil)

// Wrap returns an injector around inner with all links healthy. seed makes
// the random drops and duplicates reproducible.
func Wrap(inner transport.Transport, seed uint64) *Injector {
	return &Injector{
		inner:   inner,
		links:   map[uint64]Link{},
		delayed: map[uint64]chan delayedMsg{},
		rng:     rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		stopc:   make(chan struct{}),
	}
}

// SetLink sets the faults for messages to peer.
func (f *Injector) SetLink(peer uint64, l Link) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.links[peer] = l
}

// Heal makes every link healthy again.
func (f *Injector) Heal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.links)
}

// Partition cuts every link between a node of side a and a node of side b,
// both ways. Each map names the injector of each node by its id.
func Partition(a, b map[uint64]*Injector) {
	for ia, fa := range a {
		for ib, fb := range b {
			fa.SetLink(ib, Link{Partitioned: true})
			fb.SetLink(ia, Link{Partitioned: true})
		}
	}
}

// Start implements transport.Transport.
func (f *Injector) Start(h transport.Handler) error { return f.inner.Start(h) }

// AddPeer implements transport.Transport.
func (f *Injector) AddPeer(id uint64, addr string) { f.inner.AddPeer(id, addr) }

// RemovePeer implements transport.Transport.
func (f *Injector) RemovePeer(id uint64) { f.inner.RemovePeer(id) }

// SetApplied implements transport.Transport.
func (f *Injector) SetApplied(index uint64) { f.inner.SetApplied(index) }

// Send implements transport.Transport.
func (f *Injector) Send(msgs []raftpb.Message) {
	f.mu.Lock()
	if f.stopped {
		f.mu.Unlock()
		return
	}
	out := make([]raftpb.Message, 0, len(msgs))
	for _, m := range msgs {
		l, ok := f.links[m.To]
		if !ok {
			out = append(out, m)
			continue
		}
		if l.Partitioned || (l.Drop > 0 && f.rng.Float64() < l.Drop) {
			continue
		}
		n := 1
		// Never duplicate a proposal: Raft does not deduplicate them, so a
		// duplicated MsgProp is a client retry, not a network fault.
		if l.Duplicate > 0 && m.Type != raftpb.MsgProp && f.rng.Float64() < l.Duplicate {
			n = 2
		}
		for range n {
			if l.Delay > 0 {
				f.delayLocked(m.To, delayedMsg{due: time.Now().Add(l.Delay), m: m})
			} else {
				out = append(out, m)
			}
		}
	}
	f.mu.Unlock()
	if len(out) > 0 {
		f.inner.Send(out)
	}
}

func (f *Injector) delayLocked(to uint64, d delayedMsg) {
	// Deep-copy: the message's entries belong to raft and may be reused
	// after the Ready that carried them.
	if b, err := d.m.Marshal(); err == nil {
		var c raftpb.Message
		if c.Unmarshal(b) == nil {
			d.m = c
		}
	}
	ch, ok := f.delayed[to]
	if !ok {
		ch = make(chan delayedMsg, 65536)
		f.delayed[to] = ch
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.runDelay(ch)
		}()
	}
	select {
	case ch <- d:
	default: // queue full: the message is lost, as on a congested link
	}
}

func (f *Injector) runDelay(ch chan delayedMsg) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		select {
		case <-f.stopc:
			return
		case d := <-ch:
			if wait := time.Until(d.due); wait > 0 {
				t.Reset(wait)
				select {
				case <-f.stopc:
					return
				case <-t.C:
				}
			}
			f.inner.Send([]raftpb.Message{d.m})
		}
	}
}

// Stop stops the delay goroutines, then the wrapped transport.
func (f *Injector) Stop() {
	f.mu.Lock()
	if !f.stopped {
		f.stopped = true
		close(f.stopc)
	}
	f.mu.Unlock()
	f.wg.Wait()
	f.inner.Stop()
}
