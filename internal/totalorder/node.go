package totalorder

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/ordo-db/ordo/internal/totalorder/storage"
	"github.com/ordo-db/ordo/internal/totalorder/transport"
)

// DeliveryType says what a Delivery carries.
type DeliveryType uint8

const (
	// DeliveryEntry is a committed proposal: Data is the payload.
	DeliveryEntry DeliveryType = iota + 1
	// DeliverySnapshot says every entry up to Seqno is summarised by Data
	// (what Config.SnapshotData returned on the node that made it, nil if
	// none). It comes first, before any DeliveryEntry, when this node's log
	// cannot supply the entries after StartAfter (it was wiped or joined
	// late); the consumer must install that state or give up.
	DeliverySnapshot
	// DeliveryMembers (only with Config.DeliverMembership) says which
	// members vote from Seqno on: Data is their ids (Voters decodes it),
	// witnesses left out (they vote in Raft but carry out no entry).
	// One comes first with the configuration the log starts from, then
	// one after each configuration change, at the change's index, in log
	// order among the entries, so every node sees the same voters at
	// every seqno. Its Seqno may be at or below StartAfter (the consumer
	// learns the voters as of its starting point); it does not move
	// Delivered.
	DeliveryMembers
)

// Voters decodes a DeliveryMembers' Data.
func Voters(data []byte) []uint64 {
	out := make([]uint64, 0, len(data)/8)
	for len(data) >= 8 {
		out = append(out, binary.BigEndian.Uint64(data))
		data = data[8:]
	}
	return out
}

func (n *Node) encodeVoters(cs raftpb.ConfState) []byte {
	n.mu.Lock()
	defer n.mu.Unlock()
	b := make([]byte, 0, 8*len(cs.Voters))
	for _, id := range cs.Voters {
		if !n.witnesses[id] {
			b = binary.BigEndian.AppendUint64(b, id)
		}
	}
	return b
}

// Delivery is one item of the delivery stream.
type Delivery struct {
	Seqno uint64
	Type  DeliveryType
	Data  []byte
}

// Node is one member of the total-order group. All methods are safe for
// concurrent use.
type Node struct {
	cfg Config
	id  uint64
	raw *raft.RawNode // owned by the raft goroutine (run)
	st  *storage.Storage
	tr  transport.Transport
	m   *metrics

	deliverc chan Delivery
	propc    chan proposal
	recvc    chan raftpb.Message         // peers' and storage goroutines' messages -> raft
	ctrlc    chan func(rn *raft.RawNode) // work to run on the raft goroutine
	reportc  chan peerReport             // transport reports -> raft
	appendc  chan raftpb.Message         // MsgStorageAppend, raft goroutine -> append goroutine
	applyc   chan raftpb.Message         // MsgStorageApply (and received snapshots) -> apply goroutine
	sem      chan struct{}
	nextID   atomic.Uint64 // local proposal / request ids
	leader   atomic.Uint64
	durable  atomic.Uint64 // MarkApplied
	failed   atomic.Pointer[error]

	lastRefusal atomic.Int64 // unix nanoseconds of the last refusal logged
	lastIndex0  uint64       // the log's last index when run starts

	mu          sync.Mutex
	waiters     map[uint64]*waiter // proposal id -> its Propose call
	ccWaiters   map[uint64]chan struct{}
	readWaiters map[string]chan uint64
	peerApplied map[uint64]uint64
	removed     map[uint64]bool
	members     map[uint64]bool
	learners    map[uint64]bool
	addrs       map[uint64]string // peer addresses, persisted (members.go)
	witnesses   map[uint64]bool   // members that are witnesses, persisted (witness.go)
	// bootPeers are the bootstrap peers of a node bootstrapping its log:
	// members from its first entries on, known before it applies them.
	bootPeers map[uint64]bool
	// writes counts who proposed what was applied (follow.go); the rest
	// of following the writes is the raft goroutine's.
	writes                       writeShare
	followNext, followQuietUntil time.Time
	followLead, followTarget     uint64
	// bootstrap are the ids this node's log was bootstrapped with, sorted
	// and kept in members.json (nil: it joined, or bootstrapped before
	// they were kept). Set in Start, never changed after.
	bootstrap []uint64
	saveMu    sync.Mutex // one members.json write at a time

	// What ReadIndex waits for: the applied index (entries handed to the
	// consumer or skipped) and the last seqno handed to the consumer,
	// published by the apply goroutine; seenCh is closed and replaced
	// when appliedIdx moves while a ReadIndex waits (readWaiting > 0).
	appliedIdx    atomic.Uint64
	lastDelivered atomic.Uint64
	readWaiting   atomic.Int32
	seenMu        sync.Mutex
	seenCh        chan struct{}

	// owned by the apply goroutine
	applied     uint64
	appliedTerm uint64   // term of the last applied entry
	snapIndex   uint64   // newest snapshot
	compacted   uint64   // log compacted up to here
	joinSnap    bool     // a member was added: snapshot for it
	confHist    []confAt // written by the apply goroutine under histMu
	// sizes: the payload bytes of the applied entries since the last
	// compaction, cumulated (sizes[i].cum counts every entry up to
	// sizes[i].index); only with RetainBytes. Apply goroutine only.
	sizes    []indexBytes
	cumBytes uint64
	histMu   sync.Mutex

	stopc    chan struct{}
	removedc chan struct{}
	stopOnce sync.Once
	rmOnce   sync.Once
	wg       sync.WaitGroup
}

type confAt struct {
	index uint64
	cs    raftpb.ConfState
}

// Start opens the node's storage, starts its transport and Raft loop and
// returns. Deliveries begin with the first entry after cfg.StartAfter.
func Start(cfg Config) (_ *Node, err error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("totalorder: metrics: %w", err)
	}
	if err := checkNodeID(cfg.Dir, cfg.ID); err != nil {
		return nil, err
	}
	st, err := storage.Open(cfg.Dir, cfg.Storage)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			st.Close()
		}
	}()
	fresh := st.Fresh()
	if fresh && cfg.Join && cfg.Seed != nil && cfg.Seed.Index > 0 {
		if err := seed(st, cfg.Seed); err != nil {
			return nil, err
		}
		fresh = false
	}
	n := &Node{
		cfg: cfg, id: cfg.ID, st: st, tr: cfg.Transport, m: m,
		deliverc:    make(chan Delivery, cfg.DeliveryBuffer),
		propc:       make(chan proposal, 1024),
		recvc:       make(chan raftpb.Message, 4096),
		ctrlc:       make(chan func(*raft.RawNode)),
		reportc:     make(chan peerReport, 4096),
		appendc:     make(chan raftpb.Message, 1024),
		applyc:      make(chan raftpb.Message, 1024),
		sem:         make(chan struct{}, cfg.MaxInflight),
		waiters:     map[uint64]*waiter{},
		ccWaiters:   map[uint64]chan struct{}{},
		readWaiters: map[string]chan uint64{},
		peerApplied: map[uint64]uint64{},
		removed:     map[uint64]bool{},
		members:     map[uint64]bool{},
		learners:    map[uint64]bool{},
		addrs:       map[uint64]string{},
		witnesses:   map[uint64]bool{},
		bootPeers:   map[uint64]bool{},
		stopc:       make(chan struct{}),
		removedc:    make(chan struct{}),
	}
	n.nextID.Store(uint64(time.Now().UnixNano())) // unique across restarts
	_, cs, err := st.Raft().InitialState()
	if err != nil {
		return nil, err
	}
	snap, err := st.Raft().Snapshot()
	if err != nil {
		return nil, err
	}
	n.snapIndex = snap.Metadata.Index
	n.compacted = snap.Metadata.Index
	n.applied = snap.Metadata.Index
	n.appliedIdx.Store(snap.Metadata.Index)
	n.lastDelivered.Store(max(cfg.StartAfter, snap.Metadata.Index))
	n.seenCh = make(chan struct{})
	n.confHist = []confAt{{index: snap.Metadata.Index, cs: cs}} // no goroutine yet: no histMu
	n.setMembers(cs)
	n.durable.Store(cfg.StartAfter)

	logger := cfg.Logger
	if logger == nil {
		logger = &raft.DefaultLogger{Logger: log.New(io.Discard, "", 0)}
	}
	rc := &raft.Config{
		ID:              cfg.ID,
		ElectionTick:    cfg.ElectionTicks,
		HeartbeatTick:   cfg.HeartbeatTicks,
		Storage:         st.Raft(),
		MaxSizePerMsg:   1 << 20,
		MaxInflightMsgs: 256,
		// Bounds what waits in the transport for one peer when entries are
		// large (fragments of big transactions): 256 of them could be GBs.
		MaxInflightBytes:          128 << 20,
		MaxUncommittedEntriesSize: 1 << 30,
		AsyncStorageWrites:        true,
		CheckQuorum:               true,
		PreVote:                   true,
		StepDownOnRemoval:         true,
		Logger:                    logger,
	}
	if fresh && !cfg.Join {
		if _, ok := cfg.Peers[cfg.ID]; !ok {
			return nil, fmt.Errorf("totalorder: config: Peers must contain this node's ID %d to bootstrap", cfg.ID)
		}
		for id := range cfg.Peers {
			n.bootPeers[id] = true
			n.bootstrap = append(n.bootstrap, id)
		}
		slices.Sort(n.bootstrap)
	}
	for id, addr := range cfg.Peers {
		n.addrs[id] = addr
	}
	for id, w := range cfg.Witnesses {
		if w {
			n.witnesses[id] = true
		}
	}
	// The agreed membership's addresses and removals, as this node last
	// applied them, win over the bootstrap set (members.go).
	if err := n.loadMembers(); err != nil {
		return nil, err
	}
	if len(cfg.Witnesses) > 0 || len(n.bootPeers) > 0 {
		// Witnesses this node was told of (a joiner learns them from its
		// donor: the entries that added them may lie before its log),
		// and the ids it bootstraps with, are kept for its restarts.
		if err := n.saveMembers(); err != nil {
			return nil, err
		}
	}
	if err := n.tr.Start(n); err != nil {
		return nil, fmt.Errorf("totalorder: transport: %w", err)
	}
	for id, addr := range n.addrs {
		if id != n.id && !n.removed[id] {
			n.tr.AddPeer(id, addr)
		}
	}
	// raft panics (through its logger) on storage contents it cannot accept.
	func() {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("%w: raft rejected the stored state: %v", storage.ErrCorrupt, r)
			}
		}()
		n.lastIndex0, err = st.Raft().LastIndex()
		if err != nil {
			return
		}
		n.raw, err = raft.NewRawNode(rc)
		if err != nil {
			err = fmt.Errorf("totalorder: raft: %w", err)
			return
		}
		if fresh && !cfg.Join {
			ids := make([]uint64, 0, len(cfg.Peers))
			for id := range cfg.Peers {
				ids = append(ids, id)
			}
			sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
			peers := make([]raft.Peer, 0, len(ids))
			for _, id := range ids {
				peers = append(peers, raft.Peer{ID: id, Context: []byte(peerContext(cfg.Peers[id], cfg.Witnesses[id]))})
			}
			if err = n.raw.Bootstrap(peers); err != nil {
				err = fmt.Errorf("totalorder: bootstrap: %w", err)
			}
			n.lastIndex0 = uint64(len(peers)) // one conf change each
		}
	}()
	if err != nil {
		n.tr.Stop()
		return nil, err
	}
	if snap.Metadata.Index > cfg.StartAfter {
		// The consumer is behind this node's own snapshot: hand it over.
		n.deliverc <- Delivery{Seqno: snap.Metadata.Index, Type: DeliverySnapshot, Data: snap.Data}
	}
	if cfg.DeliverMembership {
		n.deliverc <- Delivery{Seqno: snap.Metadata.Index, Type: DeliveryMembers, Data: n.encodeVoters(cs)}
	}
	n.tr.SetApplied(cfg.StartAfter)
	n.m.delivered.Set(float64(cfg.StartAfter))
	n.wg.Add(3)
	go func() {
		defer n.wg.Done()
		n.run()
	}()
	go func() {
		defer n.wg.Done()
		n.runAppend()
	}()
	go func() {
		defer n.wg.Done()
		n.runApply()
	}()
	return n, nil
}

// checkNodeID records the node id in dir on first use and refuses a
// directory that belongs to another node.
func checkNodeID(dir string, id uint64) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("totalorder: %w", err)
	}
	path := filepath.Join(dir, "node-id")
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		got, perr := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if perr != nil {
			return fmt.Errorf("totalorder: %s: bad node id file: %v", path, perr)
		}
		if got != id {
			return fmt.Errorf("totalorder: %s belongs to node %d, not %d", dir, got, id)
		}
		return nil
	case errors.Is(err, os.ErrNotExist):
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(strconv.FormatUint(id, 10)+"\n"), 0o600); err != nil {
			return fmt.Errorf("totalorder: %w", err)
		}
		if err := os.Rename(tmp, path); err != nil {
			return fmt.Errorf("totalorder: %w", err)
		}
		return nil
	default:
		return fmt.Errorf("totalorder: %w", err)
	}
}

// ID is this node's Raft id.
func (n *Node) ID() uint64 { return n.id }

// Deliveries is the stream of committed entries in log order, identical on
// every node. Seqnos increase strictly but have gaps where the log has
// entries that are not delivered (leader no-ops, configuration changes,
// proposals lost in a leader change and proposed again); the gaps are the
// same on every node. The channel is closed when the Node stops. The consumer must
// keep draining it: a full channel stalls this node's apply goroutine, and
// with it the proposals of this node (raft itself keeps running).
func (n *Node) Deliveries() <-chan Delivery { return n.deliverc }

// MarkApplied tells the node that every entry up to seqno is durably applied
// by the consumer. Logs are compacted only below the smallest index every
// member has marked.
func (n *Node) MarkApplied(seqno uint64) {
	for {
		cur := n.durable.Load()
		if seqno <= cur || n.durable.CompareAndSwap(cur, seqno) {
			break
		}
	}
	n.tr.SetApplied(n.durable.Load())
}

// Leader returns the id of the leader this node knows of, 0 if none.
func (n *Node) Leader() uint64 { return n.leader.Load() }

// Done is closed when the node's Raft loop has ended: after Stop, after a
// storage failure (see Err), or after the node was removed from the group.
func (n *Node) Done() <-chan struct{} { return n.removedc }

// Err says why the node stopped working: nil while it runs, ErrRemoved, or
// the wrapped storage error.
func (n *Node) Err() error {
	if p := n.failed.Load(); p != nil {
		return *p
	}
	return nil
}

func (n *Node) fail(err error) {
	n.failed.CompareAndSwap(nil, &err)
	n.rmOnce.Do(func() { close(n.removedc) })
}

// unavailable returns the error calls get when the node no longer runs.
func (n *Node) unavailable() error {
	select {
	case <-n.stopc:
		return ErrStopped
	default:
	}
	if err := n.Err(); err != nil {
		if errors.Is(err, ErrRemoved) {
			return err
		}
		return fmt.Errorf("%w: %v", ErrStopped, err)
	}
	return ErrStopped
}

// Propose submits payload to the total order and returns its seqno once the
// entry is committed and has been handed to this node's delivery stream.
//
// Errors: ctx.Err() if ctx ends first; ErrNoQuorum after
// Config.ProposeTimeout; ErrStopped / ErrRemoved if the node does not run;
// ErrTooLarge. At most Config.MaxInflight proposals per node are in flight;
// further calls wait for a slot (bounded by ctx).
func (n *Node) Propose(ctx context.Context, payload []byte) (uint64, error) {
	if len(payload) > n.cfg.MaxProposalBytes {
		return 0, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(payload), n.cfg.MaxProposalBytes)
	}
	start := time.Now()
	seq, err := n.propose(ctx, payload)
	if err != nil {
		n.m.proposalFailures.Inc()
		return 0, err
	}
	n.m.proposals.Inc()
	n.m.commitLatency.Observe(time.Since(start).Seconds())
	return seq, nil
}

func (n *Node) propose(ctx context.Context, payload []byte) (uint64, error) {
	select {
	case <-n.removedc:
		return 0, n.unavailable()
	case <-n.stopc:
		return 0, ErrStopped
	default:
	}
	// A timer, not a derived context: this is the hot path.
	timer := time.NewTimer(n.cfg.ProposeTimeout)
	defer timer.Stop()
	select {
	case n.sem <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-timer.C:
		return 0, n.timeoutErr(ctx)
	case <-n.stopc:
		return 0, ErrStopped
	}
	n.m.inflight.Inc()
	defer func() { <-n.sem; n.m.inflight.Dec() }()

	id := n.nextID.Add(1)
	w := &waiter{res: make(chan proposalResult, 1)}
	n.mu.Lock()
	n.waiters[id] = w
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		delete(n.waiters, id)
		n.mu.Unlock()
	}()
	p := proposal{id: id, data: encodeEnvelope(n.id, id, payload), w: w}
	for {
		select {
		case n.propc <- p:
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-timer.C:
			return 0, n.timeoutErr(ctx)
		case <-n.stopc:
			return 0, ErrStopped
		case <-n.removedc:
			return 0, n.unavailable()
		}
		// One result per attempt: raft's refusal (from the raft
		// goroutine), the seqno (from the apply goroutine once
		// delivered), or errProposalLost (from the apply goroutine once
		// the proposal can no longer be delivered, see envelope.go).
		select {
		case r := <-w.res:
			switch {
			case r.err == nil:
				return r.seq, nil
			case errors.Is(r.err, errProposalLost):
				n.m.proposalRetries.Inc()
				continue // lost in a leader change: propose again
			case errors.Is(r.err, errProposalUnsent):
				n.m.proposalRetries.Inc()
			case !errors.Is(r.err, raft.ErrProposalDropped):
				return 0, r.err
			}
			// No leader known (election in progress), a leader
			// transfer, or no stream to the leader yet: nothing was
			// appended, try again shortly.
			select {
			case <-time.After(n.cfg.TickInterval):
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-timer.C:
				return 0, n.timeoutErr(ctx)
			case <-n.stopc:
				return 0, ErrStopped
			case <-n.removedc:
				return 0, n.unavailable()
			}
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-timer.C:
			return 0, n.timeoutErr(ctx)
		case <-n.removedc:
			return 0, n.unavailable()
		case <-n.stopc:
			return 0, ErrStopped
		}
	}
}

func (n *Node) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-n.stopc:
		return ErrStopped
	case <-n.removedc:
		return n.unavailable()
	}
}

func (n *Node) timeoutOrStop(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, raft.ErrStopped), errors.Is(err, ErrStopped):
		return ErrStopped
	case errors.Is(err, ErrRemoved):
		return err
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return n.timeoutErr(ctx)
	}
	return err
}

func (n *Node) timeoutErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case <-n.stopc:
		return ErrStopped
	default:
	}
	return fmt.Errorf("%w (%v, leader %x)", ErrNoQuorum, n.cfg.ProposeTimeout, n.leader.Load())
}

// ReadIndex returns a linearizable read index: every entry committed before
// the call has a seqno <= the result, and the result is a seqno this node
// has delivered (or StartAfter), so the consumer's applied prefix reaches
// it without waiting for another entry. The caller waits until its applied
// prefix reaches it before reading. Errors as for Propose.
func (n *Node) ReadIndex(ctx context.Context) (uint64, error) {
	select {
	case <-n.removedc:
		return 0, n.unavailable()
	default:
	}
	tctx, cancel := context.WithTimeout(ctx, n.cfg.ProposeTimeout)
	defer cancel()
	var rctx [8]byte
	binary.BigEndian.PutUint64(rctx[:], n.nextID.Add(1))
	key := string(rctx[:])
	ch := make(chan uint64, 1)
	n.mu.Lock()
	n.readWaiters[key] = ch
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		delete(n.readWaiters, key)
		n.mu.Unlock()
	}()
	// A read request is dropped silently while there is no leader: retry
	// every election timeout.
	retry := time.Duration(n.cfg.ElectionTicks) * n.cfg.TickInterval
	for {
		if err := n.ctrl(tctx, func(rn *raft.RawNode) { rn.ReadIndex(rctx[:]) }); err != nil {
			return 0, n.timeoutOrStop(ctx, err)
		}
		t := time.NewTimer(retry)
		select {
		case idx := <-ch:
			t.Stop()
			return n.deliveredThrough(ctx, idx)
		case <-t.C:
		case <-tctx.Done():
			t.Stop()
			return 0, n.timeoutErr(ctx)
		case <-n.stopc:
			t.Stop()
			return 0, ErrStopped
		case <-n.removedc:
			t.Stop()
			return 0, n.unavailable()
		}
	}
}

// deliveredThrough waits until this node has applied the Raft log up to
// idx and returns the last seqno it has handed to the consumer by then.
// Entries that are never delivered (a new leader's empty entry, membership
// changes) may follow the last delivered one: a consumer waiting for idx
// itself would wait for the next delivery, however long that takes.
func (n *Node) deliveredThrough(ctx context.Context, idx uint64) (uint64, error) {
	n.readWaiting.Add(1)
	defer n.readWaiting.Add(-1)
	for {
		n.seenMu.Lock()
		ch := n.seenCh
		n.seenMu.Unlock()
		if n.appliedIdx.Load() >= idx {
			return n.lastDelivered.Load(), nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, n.timeoutErr(ctx)
		case <-n.stopc:
			return 0, ErrStopped
		case <-n.removedc:
			return 0, n.unavailable()
		}
	}
}

// setApplied records that the Raft log is applied up to idx (apply
// goroutine only).
func (n *Node) setApplied(idx uint64) {
	n.applied = idx
	n.appliedIdx.Store(idx)
	if n.readWaiting.Load() > 0 {
		n.seenMu.Lock()
		close(n.seenCh)
		n.seenCh = make(chan struct{})
		n.seenMu.Unlock()
	}
}

// AddWitness adds node id, reachable at addr, as a learner that is a
// witness (witness.go): every node knows it as one from this change on.
// It promotes itself like any learner. A member already (a data node)
// cannot become a witness.
func (n *Node) AddWitness(ctx context.Context, id uint64, addr string) error {
	if n.IsRemoved(id) {
		return fmt.Errorf("%w: %d", ErrRemovedID, id)
	}
	n.mu.Lock()
	member, witness := n.members[id] || n.learners[id], n.witnesses[id]
	n.mu.Unlock()
	if member && !witness {
		return fmt.Errorf("totalorder: node %d is a member already, not a witness", id)
	}
	return n.confChange(ctx, raftpb.ConfChange{Type: raftpb.ConfChangeAddLearnerNode, NodeID: id, Context: []byte(peerContext(addr, true))})
}

// AddNode adds node id, reachable at addr, to the group as a voter and
// returns once the change is applied locally. The new node must be started
// with Join set (and an empty Dir). Ids are never reused.
func (n *Node) AddNode(ctx context.Context, id uint64, addr string) error {
	return n.confChange(ctx, raftpb.ConfChange{Type: raftpb.ConfChangeAddNode, NodeID: id, Context: []byte(addr)})
}

// AddLearner adds node id, reachable at addr, to the group as a learner (it
// receives the log but does not vote or count for a quorum) and returns
// once the change is applied locally. The new node must be started with
// Join set (and an empty Dir); Promote makes it a voter. Ids are never
// reused: adding a removed id returns ErrRemovedID.
func (n *Node) AddLearner(ctx context.Context, id uint64, addr string) error {
	if n.IsRemoved(id) {
		return fmt.Errorf("%w: %d", ErrRemovedID, id)
	}
	return n.confChange(ctx, raftpb.ConfChange{Type: raftpb.ConfChangeAddLearnerNode, NodeID: id, Context: []byte(addr)})
}

// Promote makes learner id a voter and returns once the change is applied
// locally. A learner may promote itself.
func (n *Node) Promote(ctx context.Context, id uint64) error {
	if n.IsRemoved(id) {
		return fmt.Errorf("%w: %d", ErrRemovedID, id)
	}
	return n.confChange(ctx, raftpb.ConfChange{Type: raftpb.ConfChangeAddNode, NodeID: id})
}

// RemoveNode removes node id from the group and returns once the change is
// applied locally. The removed node's Raft loop ends (its Done closes, calls
// return ErrRemoved); stop it with Stop.
func (n *Node) RemoveNode(ctx context.Context, id uint64) error {
	return n.confChange(ctx, raftpb.ConfChange{Type: raftpb.ConfChangeRemoveNode, NodeID: id})
}

func (n *Node) confChange(ctx context.Context, cc raftpb.ConfChange) error {
	if cc.NodeID == 0 {
		return errors.New("totalorder: node id must be non-zero")
	}
	select {
	case <-n.removedc:
		return n.unavailable()
	default:
	}
	tctx, cancel := context.WithTimeout(ctx, n.cfg.ProposeTimeout)
	defer cancel()
	cc.ID = n.nextID.Add(1)
	ch := make(chan struct{}, 1)
	n.mu.Lock()
	n.ccWaiters[cc.ID] = ch
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		delete(n.ccWaiters, cc.ID)
		n.mu.Unlock()
	}()
	for {
		var err error
		if cerr := n.ctrl(tctx, func(rn *raft.RawNode) { err = rn.ProposeConfChange(cc) }); cerr != nil {
			err = cerr
		}
		if err == nil {
			break
		}
		if errors.Is(err, raft.ErrProposalDropped) {
			if werr := n.sleep(tctx, n.cfg.TickInterval); werr != nil {
				return n.timeoutOrStop(ctx, werr)
			}
			continue
		}
		return n.timeoutOrStop(ctx, err)
	}
	// Raft turns a conf change proposed while another is pending (proposed
	// elsewhere, not yet applied by the leader) into an empty entry
	// without telling, and a leader change may lose it: while the change
	// has not taken effect, propose it again now and then (a change that
	// took effect twice is the same change).
	retry := time.NewTicker(2 * time.Duration(n.cfg.ElectionTicks) * n.cfg.TickInterval)
	defer retry.Stop()
	for {
		select {
		case <-ch:
			return nil
		case <-retry.C:
			if n.confApplied(cc) {
				return nil
			}
			_ = n.ctrl(tctx, func(rn *raft.RawNode) { _ = rn.ProposeConfChange(cc) })
		case <-tctx.Done():
			if n.confApplied(cc) {
				return nil
			}
			return n.timeoutErr(ctx)
		case <-n.stopc:
			return ErrStopped
		case <-n.removedc:
			if cc.Type == raftpb.ConfChangeRemoveNode && cc.NodeID == n.id {
				return nil
			}
			return n.unavailable()
		}
	}
}

// confApplied reports whether the configuration this node applied already
// has what cc asks for.
func (n *Node) confApplied(cc raftpb.ConfChange) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch cc.Type {
	case raftpb.ConfChangeAddLearnerNode:
		return n.members[cc.NodeID]
	case raftpb.ConfChangeAddNode:
		return n.members[cc.NodeID] && !n.learners[cc.NodeID]
	case raftpb.ConfChangeRemoveNode:
		return n.removed[cc.NodeID]
	}
	return false
}

// Members returns the ids of the current voters and learners.
func (n *Node) Members() []uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	ids := make([]uint64, 0, len(n.members))
	for id := range n.members {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}

// Status is raft's view of this node (for diagnostics and tests).
// It returns the zero Status once the node no longer runs.
func (n *Node) Status() raft.Status {
	var st raft.Status
	_ = n.ctrl(context.Background(), func(rn *raft.RawNode) { st = rn.Status() })
	return st
}

// Stop stops the Raft loop, the transport and the storage, waits for every
// goroutine of the node, and closes the delivery channel. Pending calls
// return ErrStopped. Safe to call more than once.
func (n *Node) Stop() {
	n.stopOnce.Do(func() {
		close(n.stopc)
		n.wg.Wait() // raft, append and apply goroutines
		n.tr.Stop()
		if err := n.st.Close(); err != nil {
			n.fail(fmt.Errorf("close storage: %w", err))
		}
		n.rmOnce.Do(func() { close(n.removedc) })
		close(n.deliverc)
	})
}

func (n *Node) setMembers(cs raftpb.ConfState) {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.members)
	clear(n.learners)
	for _, ids := range [][]uint64{cs.Learners, cs.LearnersNext} {
		for _, id := range ids {
			n.learners[id] = true
		}
	}
	for _, ids := range [][]uint64{cs.Voters, cs.Learners, cs.VotersOutgoing, cs.LearnersNext} {
		for _, id := range ids {
			n.members[id] = true
		}
	}
}

// ---- transport.Handler ----

var _ transport.Handler = (*Node)(nil)

// Process implements transport.Handler. A message whose entries are not
// this package's is refused (check.go).
func (n *Node) Process(ctx context.Context, m raftpb.Message) error {
	if err := checkEntries(&m); err != nil {
		n.refused(err)
		return err
	}
	return n.step(ctx, m)
}

// refused counts and logs (at most every 10 s) a refused peer message.
func (n *Node) refused(err error) {
	n.m.refused.Inc()
	now := time.Now().UnixNano()
	last := n.lastRefusal.Load()
	if now-last < int64(10*time.Second) || !n.lastRefusal.CompareAndSwap(last, now) {
		return
	}
	if n.cfg.Logger != nil {
		n.cfg.Logger.Warningf("refused a raft message from a peer: %v", err)
	}
}

// ReportUnreachable implements transport.Handler.
// It never blocks (the transport calls it from the raft goroutine too); the
// report is dropped if raft is that far behind.
func (n *Node) ReportUnreachable(id uint64) {
	select {
	case n.reportc <- peerReport{id: id}:
	default:
	}
}

// ReportProposalUnsent implements transport.ProposalReporter: the
// transport dropped m, a MsgProp forwarding this node's proposals to the
// leader, before sending it (no stream to the leader yet, its queue full).
// No node can hold those entries, so each Propose call whose current
// attempt they are is told to propose again, where it would otherwise
// wait out its ProposeTimeout for an entry that never comes (and its
// client learn nothing of its transaction's outcome). An entry of another
// node's, or of an earlier attempt, is left alone. Never blocks.
func (n *Node) ReportProposalUnsent(m raftpb.Message) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, e := range m.Entries {
		term, node, prop, _, err := decodeEnvelope(e.Data)
		if err != nil || node != n.id {
			continue
		}
		w, ok := n.waiters[prop]
		if !ok || w.term == 0 || w.term != term {
			continue
		}
		w.term = 0
		select {
		case w.res <- proposalResult{err: errProposalUnsent}:
		default:
		}
	}
}

// ReportSnapshot implements transport.Handler.
func (n *Node) ReportSnapshot(id uint64, failed bool) {
	st := raft.SnapshotFinish
	if failed {
		st = raft.SnapshotFailure
	}
	select {
	case n.reportc <- peerReport{id: id, snap: true, status: st}:
	default:
	}
}

// PeerApplied implements transport.Handler.
func (n *Node) PeerApplied(id, applied uint64) {
	n.mu.Lock()
	if applied > n.peerApplied[id] {
		n.peerApplied[id] = applied
	}
	n.mu.Unlock()
}

// Compacted is the index the log is compacted up to: entries after it are
// all the log still holds.
func (n *Node) Compacted() uint64 {
	f, err := n.st.Raft().FirstIndex()
	if err != nil || f == 0 {
		return 0
	}
	return f - 1
}

// Delivered returns the seqno of the last entry handed to the delivery
// stream (StartAfter before the first).
func (n *Node) Delivered() uint64 { return n.lastDelivered.Load() }

// PeersApplied returns the applied index each other member last reported
// (what its consumer marked applied, carried in its transport batches); a
// member not heard from yet is absent.
func (n *Node) PeersApplied() map[uint64]uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[uint64]uint64, len(n.peerApplied))
	for id, a := range n.peerApplied {
		out[id] = a
	}
	return out
}

// IsRemoved implements transport.Handler.
func (n *Node) IsRemoved(id uint64) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.removed[id]
}

// Removed implements transport.Handler: a peer refused this node as
// removed. That is remembered (members.go), so the node never starts again.
func (n *Node) Removed() {
	n.mu.Lock()
	n.removed[n.id] = true
	n.mu.Unlock()
	if err := n.saveMembers(); err != nil && n.cfg.Logger != nil {
		n.cfg.Logger.Warningf("remember this node's removal: %v", err)
	}
	n.fail(ErrRemoved)
}
