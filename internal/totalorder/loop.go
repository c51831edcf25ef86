package totalorder

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"

	"github.com/ordo-db/ordo/internal/totalorder/storage"
)

var errStopping = errors.New("stopping")

// The node drives a raft.RawNode with AsyncStorageWrites from one goroutine
// (run), and two more goroutines do the I/O, so log appends, commits and
// application pipeline instead of taking turns. The contract (raft.go,
// Config.AsyncStorageWrites), as this package implements it:
//
//  1. run owns the RawNode. It ticks it, steps every message received (from
//     peers and from the storage goroutines), proposes (draining all waiting
//     proposals at once, so one Ready carries many), runs control requests
//     (read index, conf changes, status) and, whenever raft has a Ready,
//     routes its messages: MsgStorageAppend to the append goroutine,
//     MsgStorageApply to the apply goroutine (each through a FIFO channel,
//     never dropped), everything else to the transport at once. It never
//     calls Advance and does no I/O itself.
//  2. runAppend takes every MsgStorageAppend queued, writes them to the log
//     (a received snapshot first), fsyncs once if any of them carries
//     entries, a snapshot, or a new term or vote (group commit; a new
//     commit index alone is kept in memory, as in etcd's MustSync),
//     updates the in-memory log, hands a received snapshot to the apply
//     goroutine, and only then delivers the
//     responses: to this node's raft (recvc) or to peers (transport). So no
//     vote or append acknowledgement leaves before the state behind it is
//     durable.
//  3. runApply applies MsgStorageApply entries in order (payloads to the
//     delivery stream and their waiting Propose calls, configuration
//     changes to raft and the transport), steps the responses back into
//     raft, and compacts the log when every member has applied far enough.

// proposal is a Propose call waiting for run to hand it to raft.
type proposal struct {
	id   uint64
	data []byte // the envelope; run stamps the term into it
	w    *waiter
}

// waiter is a Propose call waiting for its entry. term (guarded by Node.mu)
// is the envelope term of the current attempt, 0 before raft took it.
type waiter struct {
	res  chan proposalResult // capacity 1: one result per attempt
	term uint64
}

// proposalResult ends an attempt: raft refused the proposal (err, sent by
// the raft goroutine), it was delivered at seq, or it was lost in a leader
// change (errProposalLost; both sent by the apply goroutine).
type proposalResult struct {
	seq uint64
	err error
}

// errProposalLost tells a Propose call that its entry can no longer be
// delivered (see envelope.go); Propose then proposes again.
var errProposalLost = errors.New("proposal lost in a leader change")

// errProposalUnsent tells a Propose call that the transport dropped its
// forwarded proposal before it reached the network (ReportProposalUnsent);
// Propose proposes again after a tick.
var errProposalUnsent = errors.New("proposal not sent to the leader")

// proposeBatch hands waiting proposals to raft as one MsgProp, so a
// follower forwards them to the leader in one message and the leader appends
// them in one step. Raft accepts or refuses the batch as a whole.
func (n *Node) proposeBatch(rn *raft.RawNode, ps []proposal) {
	term := rn.BasicStatus().Term
	ents := make([]raftpb.Entry, len(ps))
	n.mu.Lock()
	for i := range ps {
		setEnvelopeTerm(ps[i].data, term)
		ps[i].w.term = term
		ents[i].Data = ps[i].data
	}
	n.mu.Unlock()
	err := rn.Step(raftpb.Message{Type: raftpb.MsgProp, From: n.id, Entries: ents})
	if err != nil {
		n.mu.Lock()
		for _, p := range ps {
			p.w.term = 0
		}
		n.mu.Unlock()
		for _, p := range ps {
			p.w.res <- proposalResult{err: err}
		}
	}
}

// peerReport is a transport's report about a peer, for raft's flow control.
type peerReport struct {
	id     uint64
	snap   bool // a snapshot report (else: unreachable)
	status raft.SnapshotStatus
}

func (r peerReport) report(rn *raft.RawNode) {
	if r.snap {
		rn.ReportSnapshot(r.id, r.status)
	} else {
		rn.ReportUnreachable(r.id)
	}
}

// run is the raft goroutine.
func (n *Node) run() {
	t := time.NewTicker(n.cfg.TickInterval)
	defer t.Stop()
	rn := n.raw
	var (
		remote []raftpb.Message
		props  []proposal
		// lastIndex is the index of the last entry of raft's log, as of
		// the last Ready (check.go): a heartbeat may not commit past it.
		lastIndex = n.lastIndex0
	)
	stepRemote := func(m raftpb.Message) {
		if err := checkCommit(&m, lastIndex); err != nil {
			n.refused(err)
			return
		}
		_ = rn.Step(m) // errors are stale or unknown-peer messages: dropped
	}
	for {
		select {
		case <-n.stopc:
			return
		case <-n.removedc:
			return
		case <-t.C:
			rn.Tick()
			if n.cfg.Witness {
				n.handOver(rn)
			} else if n.cfg.FollowWrites > 0 {
				n.followWrites(rn)
			}
		case p := <-n.propc:
			props = append(props[:0], p)
		drainProps:
			for len(props) < 4096 {
				select {
				case p := <-n.propc:
					props = append(props, p)
				default:
					break drainProps
				}
			}
			n.proposeBatch(rn, props)
			clear(props) // drop references to the payloads
		case m := <-n.recvc:
			stepRemote(m)
		drainRecv:
			for range 4096 {
				select {
				case m := <-n.recvc:
					stepRemote(m)
				default:
					break drainRecv
				}
			}
		case f := <-n.ctrlc:
			f(rn)
		case r := <-n.reportc:
			r.report(rn)
		}
		for rn.HasReady() {
			rd := rn.Ready()
			if rd.SoftState != nil {
				if old := n.leader.Swap(rd.SoftState.Lead); old != rd.SoftState.Lead && rd.SoftState.Lead != 0 {
					n.m.leaderChanges.Inc()
				}
				n.m.isLeader.Set(map[bool]float64{true: 1}[rd.SoftState.Lead == n.id])
			}
			if !raft.IsEmptyHardState(rd.HardState) {
				n.m.term.Set(float64(rd.HardState.Term))
				n.m.committed.Set(float64(rd.HardState.Commit))
			}
			if len(rd.ReadStates) > 0 {
				n.mu.Lock()
				for _, rs := range rd.ReadStates {
					if ch, ok := n.readWaiters[string(rs.RequestCtx)]; ok {
						select {
						case ch <- rs.Index:
						default:
						}
					}
				}
				n.mu.Unlock()
			}
			remote = remote[:0]
			for _, m := range rd.Messages {
				var ch chan raftpb.Message
				switch m.To {
				case raft.LocalAppendThread:
					ch = n.appendc
					if m.Snapshot != nil && !raft.IsEmptySnap(*m.Snapshot) {
						lastIndex = m.Snapshot.Metadata.Index
					}
					if len(m.Entries) > 0 {
						lastIndex = m.Entries[len(m.Entries)-1].Index
					}
				case raft.LocalApplyThread:
					ch = n.applyc
				default:
					remote = append(remote, m)
					continue
				}
				// While the storage goroutine is busy, keep serving the
				// channels it may itself be waiting on (recvc for its
				// responses, ctrlc for ApplyConfChange): no cycle of full
				// channels can block both sides.
				for sent := false; !sent; {
					select {
					case ch <- m:
						sent = true
					case r := <-n.recvc:
						stepRemote(r)
					case f := <-n.ctrlc:
						f(rn)
					case <-n.stopc:
						return
					case <-n.removedc:
						return
					}
				}
			}
			n.tr.Send(remote)
		}
	}
}

// step hands a message to the raft goroutine.
func (n *Node) step(ctx context.Context, m raftpb.Message) error {
	select {
	case n.recvc <- m:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-n.stopc:
		return ErrStopped
	case <-n.removedc:
		return n.unavailable()
	}
}

// ctrl runs f on the raft goroutine and waits for it.
func (n *Node) ctrl(ctx context.Context, f func(*raft.RawNode)) error {
	done := make(chan struct{})
	select {
	case n.ctrlc <- func(rn *raft.RawNode) { f(rn); close(done) }:
	case <-ctx.Done():
		return ctx.Err()
	case <-n.stopc:
		return ErrStopped
	case <-n.removedc:
		return n.unavailable()
	}
	select {
	case <-done:
		return nil
	case <-n.stopc:
		return ErrStopped
	case <-n.removedc:
		return n.unavailable()
	}
}

// runAppend is the append goroutine (step 2 above).
func (n *Node) runAppend() {
	var (
		batch []raftpb.Message
		ups   []storage.Update
		// durable is the hard state last fsynced, last the newest one
		// handed to Save. A change of the commit index alone needs no
		// fsync before the responses go out (etcd's MustSync): a
		// follower acknowledging an empty append (the leader telling it
		// the new commit index) would otherwise fsync once more per entry.
		durable, last raftpb.HardState
	)
	durable, _, _ = n.st.Raft().InitialState()
	last = durable
	for {
		batch = batch[:0]
		select {
		case <-n.stopc:
			return
		case <-n.removedc:
			return
		case m := <-n.appendc:
			batch = append(batch, m)
		}
		// Let the raft goroutine queue what it is about to route, so that
		// more of it shares this fsync.
		runtime.Gosched()
	more:
		for len(batch) < 1024 {
			select {
			case m := <-n.appendc:
				batch = append(batch, m)
			default:
				break more
			}
		}
		ups = ups[:0]
		sync := false
		for i := range batch {
			m := &batch[i]
			hs := raftpb.HardState{Term: m.Term, Vote: m.Vote, Commit: m.Commit}
			ups = append(ups, storage.Update{HardState: hs, Entries: m.Entries, Snapshot: m.Snapshot})
			if len(m.Entries) > 0 || (m.Snapshot != nil && !raft.IsEmptySnap(*m.Snapshot)) ||
				(!raft.IsEmptyHardState(hs) && (hs.Term != durable.Term || hs.Vote != durable.Vote)) {
				sync = true
			}
			if !raft.IsEmptyHardState(hs) {
				last = hs
			}
		}
		start := time.Now()
		if err := n.st.Save(sync, ups...); err != nil {
			n.fail(err)
			return
		}
		if sync {
			durable = last
			n.m.logSync.Observe(time.Since(start).Seconds())
		}
		var remote []raftpb.Message
		for i := range batch {
			m := &batch[i]
			if m.Snapshot != nil && !raft.IsEmptySnap(*m.Snapshot) {
				// the apply goroutine delivers it before any later entry
				select {
				case n.applyc <- raftpb.Message{Type: raftpb.MsgSnap, Snapshot: m.Snapshot}:
				case <-n.stopc:
					return
				case <-n.removedc:
					return
				}
			}
			for _, r := range m.Responses {
				if r.To == n.id {
					if err := n.step(context.Background(), r); err != nil {
						return // stopping
					}
				} else {
					remote = append(remote, r)
				}
			}
		}
		n.tr.Send(remote)
	}
}

// runApply is the apply goroutine (step 3 above).
func (n *Node) runApply() {
	for {
		var m raftpb.Message
		select {
		case <-n.stopc:
			return
		case <-n.removedc:
			return
		case m = <-n.applyc:
		}
		if err := n.applyMsg(m); err != nil {
			if !errors.Is(err, errStopping) {
				n.fail(err)
			}
			return
		}
	}
}

func (n *Node) applyMsg(m raftpb.Message) error {
	if m.Type == raftpb.MsgSnap {
		return n.applySnapshot(*m.Snapshot)
	}
	for i := range m.Entries {
		if err := n.apply(&m.Entries[i]); err != nil {
			return err
		}
		select {
		case <-n.removedc:
			return errStopping
		default:
		}
	}
	for _, r := range m.Responses {
		if err := n.step(context.Background(), r); err != nil {
			return errStopping
		}
	}
	return n.maybeSnapshot()
}

func (n *Node) deliver(d Delivery) error {
	select {
	case n.deliverc <- d:
		n.lastDelivered.Store(d.Seqno)
		n.m.delivered.Set(float64(d.Seqno))
		return nil
	case <-n.stopc:
		return errStopping
	}
}

// deliverMembers hands the consumer the voters from index on
// (Config.DeliverMembership); it does not move Delivered.
func (n *Node) deliverMembers(index uint64, cs raftpb.ConfState) error {
	if !n.cfg.DeliverMembership {
		return nil
	}
	select {
	case n.deliverc <- Delivery{Seqno: index, Type: DeliveryMembers, Data: n.encodeVoters(cs)}:
		return nil
	case <-n.stopc:
		return errStopping
	}
}

func (n *Node) applySnapshot(s raftpb.Snapshot) error {
	n.m.snapshotsRecv.Inc()
	idx := s.Metadata.Index
	if idx <= n.applied {
		return nil
	}
	n.snapIndex, n.compacted = idx, idx
	// Waiting proposals are not released here: one of them may be inside
	// the snapshot. They end by timeout (unknown outcome).
	n.appliedTerm = max(n.appliedTerm, s.Metadata.Term)
	n.histMu.Lock()
	n.confHist = []confAt{{index: idx, cs: s.Metadata.ConfState}}
	n.histMu.Unlock()
	n.setMembers(s.Metadata.ConfState)
	if err := n.deliverMembers(idx, s.Metadata.ConfState); err != nil {
		return err
	}
	if idx > n.cfg.StartAfter {
		if err := n.deliver(Delivery{Seqno: idx, Type: DeliverySnapshot, Data: s.Data}); err != nil {
			return err
		}
	}
	n.setApplied(idx)
	n.m.applied.Set(float64(idx))
	return nil
}

func (n *Node) apply(e *raftpb.Entry) error {
	if e.Index <= n.applied {
		return nil
	}
	if e.Term > n.appliedTerm {
		n.appliedTerm = e.Term
		n.releaseLost(e.Term)
	}
	if n.cfg.RetainBytes > 0 {
		n.recordSize(e.Index, len(e.Data))
	}
	switch e.Type {
	case raftpb.EntryNormal:
		if len(e.Data) == 0 {
			break // a new leader's empty entry
		}
		term, origin, prop, payload, err := decodeEnvelope(e.Data)
		if err != nil {
			return fmt.Errorf("entry %d: %w", e.Index, err)
		}
		if term != e.Term {
			break // made for another term: never delivered (envelope.go)
		}
		if n.cfg.FollowWrites > 0 {
			n.writes.note(origin)
		}
		if e.Index > n.cfg.StartAfter {
			if err := n.deliver(Delivery{Seqno: e.Index, Type: DeliveryEntry, Data: payload}); err != nil {
				return err
			}
		}
		if origin == n.id {
			n.mu.Lock()
			if w, ok := n.waiters[prop]; ok && w.term == term {
				w.res <- proposalResult{seq: e.Index}
				delete(n.waiters, prop)
			}
			n.mu.Unlock()
		}
	case raftpb.EntryConfChange, raftpb.EntryConfChangeV2:
		var cc raftpb.ConfChangeI
		if e.Type == raftpb.EntryConfChange {
			var c raftpb.ConfChange
			if err := c.Unmarshal(e.Data); err != nil {
				return fmt.Errorf("entry %d: conf change: %w", e.Index, err)
			}
			cc = c
		} else {
			var c raftpb.ConfChangeV2
			if err := c.Unmarshal(e.Data); err != nil {
				return fmt.Errorf("entry %d: conf change: %w", e.Index, err)
			}
			cc = c
		}
		var cs *raftpb.ConfState
		if err := n.ctrl(context.Background(), func(rn *raft.RawNode) { cs = rn.ApplyConfChange(cc) }); err != nil {
			return errStopping
		}
		n.histMu.Lock()
		n.confHist = append(n.confHist, confAt{index: e.Index, cs: *cs})
		n.histMu.Unlock()
		v2 := cc.AsV2()
		// A witness is known as one before the voters are counted, and
		// before it is a member (setMembers): no transport batch shows it
		// as a member that is not one (witness.go).
		addr, witness := parsePeerContext(string(v2.Context))
		if witness {
			n.mu.Lock()
			for _, ch := range v2.Changes {
				n.witnesses[ch.NodeID] = true
			}
			n.mu.Unlock()
		}
		n.setMembers(*cs)
		if err := n.deliverMembers(e.Index, *cs); err != nil {
			return err
		}
		selfRemoved := false
		for _, ch := range v2.Changes {
			switch ch.Type {
			case raftpb.ConfChangeAddNode, raftpb.ConfChangeAddLearnerNode:
				if addr != "" {
					n.mu.Lock()
					n.addrs[ch.NodeID] = addr
					n.mu.Unlock()
					if ch.NodeID != n.id {
						n.tr.AddPeer(ch.NodeID, addr)
					}
				}
				if ch.NodeID != n.id {
					n.joinSnap = true
				}
			case raftpb.ConfChangeRemoveNode:
				n.mu.Lock()
				n.removed[ch.NodeID] = true
				delete(n.peerApplied, ch.NodeID)
				n.mu.Unlock()
				if ch.NodeID == n.id {
					selfRemoved = true
				} else {
					n.tr.RemovePeer(ch.NodeID)
				}
			}
		}
		if err := n.saveMembers(); err != nil {
			return fmt.Errorf("entry %d: %w", e.Index, err)
		}
		if c, ok := cc.(raftpb.ConfChange); ok {
			n.mu.Lock()
			if ch, ok := n.ccWaiters[c.ID]; ok {
				ch <- struct{}{}
				delete(n.ccWaiters, c.ID)
			}
			n.mu.Unlock()
		}
		if selfRemoved {
			n.setApplied(e.Index)
			n.fail(ErrRemoved)
			return nil
		}
	}
	n.setApplied(e.Index)
	n.m.applied.Set(float64(e.Index))
	return nil
}

// releaseLost tells every Propose call whose attempt was made for a term
// below term, and not delivered yet, that it is lost: an entry of that
// attempt could only be delivered at an index below this one (envelope.go).
func (n *Node) releaseLost(term uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, w := range n.waiters {
		if w.term != 0 && w.term < term {
			w.term = 0
			select {
			case w.res <- proposalResult{err: errProposalLost}:
			default:
			}
		}
	}
}

// maybeSnapshot compacts the log at the highest index that this node has
// applied and every member has marked applied (less KeepEntries), once that is SnapshotEntries
// past the last compaction, taking a snapshot there first. After a member
// was added to a group whose log is already compacted it also takes a
// snapshot at the applied index (without compacting further), unless
// Config.SeededJoins: a new member that starts with an empty log can only
// be caught up by a snapshot whose configuration includes it.
func (n *Node) maybeSnapshot() error {
	if n.joinSnap {
		n.joinSnap = false
		if n.compacted > 0 && n.applied > n.snapIndex && !n.cfg.SeededJoins {
			if err := n.snapshot(n.applied, n.confHist[len(n.confHist)-1].cs); err != nil {
				return err
			}
		}
	}
	target := min(n.durable.Load(), n.applied)
	if target < n.compacted+n.cfg.SnapshotEntries && !n.bytesDue(target) {
		return nil
	}
	// A member that lags more than RetainEntries, or entries of more
	// than RetainBytes, behind what this node has durably applied no
	// longer holds compaction back.
	floor := uint64(0)
	if r := n.cfg.RetainEntries; r > 0 && target > r {
		floor = target - r
	}
	floor = max(floor, n.bytesFloor(target))
	n.mu.Lock()
	for id := range n.members {
		if id != n.id {
			target = min(target, max(n.peerApplied[id], floor))
		}
	}
	n.mu.Unlock()
	if target <= n.cfg.KeepEntries {
		return nil
	}
	target -= n.cfg.KeepEntries
	if target <= n.compacted || (target < n.compacted+n.cfg.SnapshotEntries && !n.bytesDue(target)) {
		return nil
	}
	if target > n.snapIndex {
		var cs raftpb.ConfState
		for _, c := range n.confHist {
			if c.index <= target {
				cs = c.cs
			}
		}
		if err := n.snapshot(target, cs); err != nil {
			return err
		}
	}
	if err := n.st.Compact(target); err != nil {
		return err
	}
	n.compacted = target
	keep := 0
	for i, c := range n.confHist {
		if c.index <= target {
			keep = i
		}
	}
	n.histMu.Lock()
	n.confHist = n.confHist[keep:]
	n.histMu.Unlock()
	n.trimSizes(target)
	return nil
}

func (n *Node) snapshot(index uint64, cs raftpb.ConfState) error {
	var data []byte
	if n.cfg.SnapshotData != nil {
		d, err := n.cfg.SnapshotData(index)
		if err != nil {
			return fmt.Errorf("snapshot data at %d: %w", index, err)
		}
		data = d
	}
	if _, err := n.st.CreateSnapshot(index, &cs, data); err != nil {
		return err
	}
	n.snapIndex = index
	n.m.snapshotsMade.Inc()
	return nil
}
