package totalorder

import (
	"errors"
	"fmt"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

var errStopping = errors.New("stopping")

// run is the Raft loop: the only goroutine that touches the storage and the
// fields marked "owned by the Raft loop". It ticks the clock and processes
// Ready batches (see handleReady).
func (n *Node) run() {
	t := time.NewTicker(n.cfg.TickInterval)
	defer t.Stop()
	for {
		select {
		case <-n.stopc:
			return
		case <-n.removedc:
			return
		case <-t.C:
			n.rn.Tick()
		case rd := <-n.rn.Ready():
			if err := n.handleReady(rd); err != nil {
				if !errors.Is(err, errStopping) {
					n.fail(err)
				}
				return
			}
		}
	}
}

// handleReady follows the Ready contract of go.etcd.io/raft/v3 (doc.go):
//
//  1. Note leader changes (SoftState) for metrics and error messages.
//  2. A node that is leader sends its messages first: it may write its own
//     log in parallel with its followers (Raft thesis 10.2.1); its commit
//     still counts its own entries only after they are durable (raft
//     learns that through Advance).
//  3. Save the snapshot, hard state and entries and fsync them.
//  4. A follower or candidate sends its messages only now, after the state
//     they depend on (votes, appended entries) is durable.
//  5. Deliver a received snapshot, then the committed entries: payloads to
//     the delivery stream (resolving this node's waiting Propose calls),
//     configuration changes to raft (ApplyConfChange) and the transport.
//  6. Answer read index requests, call Advance, and compact the log if
//     every member has applied far enough.
func (n *Node) handleReady(rd raft.Ready) error {
	if rd.SoftState != nil {
		if old := n.leader.Swap(rd.SoftState.Lead); old != rd.SoftState.Lead && rd.SoftState.Lead != 0 {
			n.m.leaderChanges.Inc()
		}
		n.isLeader = rd.SoftState.RaftState == raft.StateLeader
	}
	if !raft.IsEmptyHardState(rd.HardState) {
		n.m.term.Set(float64(rd.HardState.Term))
		n.m.committed.Set(float64(rd.HardState.Commit))
	}
	if n.isLeader {
		n.tr.Send(rd.Messages)
	}
	if err := n.st.Save(rd.HardState, rd.Entries, rd.Snapshot); err != nil {
		return err
	}
	if !n.isLeader {
		n.tr.Send(rd.Messages)
	}
	if !raft.IsEmptySnap(rd.Snapshot) {
		if err := n.applySnapshot(rd.Snapshot); err != nil {
			return err
		}
	}
	for i := range rd.CommittedEntries {
		if err := n.apply(&rd.CommittedEntries[i]); err != nil {
			return err
		}
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
	n.rn.Advance()
	select {
	case <-n.removedc:
		return errStopping
	default:
	}
	return n.maybeSnapshot()
}

func (n *Node) deliver(d Delivery) error {
	select {
	case n.deliverc <- d:
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
	n.applied, n.snapIndex, n.compacted = idx, idx, idx
	n.confHist = []confAt{{index: idx, cs: s.Metadata.ConfState}}
	n.setMembers(s.Metadata.ConfState)
	if idx > n.cfg.StartAfter {
		if err := n.deliver(Delivery{Seqno: idx, Type: DeliverySnapshot, Data: s.Data}); err != nil {
			return err
		}
	}
	n.m.applied.Set(float64(idx))
	return nil
}

func (n *Node) apply(e *raftpb.Entry) error {
	if e.Index <= n.applied {
		return nil
	}
	switch e.Type {
	case raftpb.EntryNormal:
		if len(e.Data) == 0 {
			break // a new leader's empty entry
		}
		origin, prop, payload, err := decodeEnvelope(e.Data)
		if err != nil {
			return fmt.Errorf("entry %d: %w", e.Index, err)
		}
		if e.Index > n.cfg.StartAfter {
			if err := n.deliver(Delivery{Seqno: e.Index, Type: DeliveryEntry, Data: payload}); err != nil {
				return err
			}
		}
		if origin == n.id {
			n.mu.Lock()
			if ch, ok := n.waiters[prop]; ok {
				ch <- e.Index
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
		cs := n.rn.ApplyConfChange(cc)
		n.confHist = append(n.confHist, confAt{index: e.Index, cs: *cs})
		n.setMembers(*cs)
		v2 := cc.AsV2()
		selfRemoved := false
		for _, ch := range v2.Changes {
			switch ch.Type {
			case raftpb.ConfChangeAddNode, raftpb.ConfChangeAddLearnerNode:
				if len(v2.Context) > 0 && ch.NodeID != n.id {
					n.tr.AddPeer(ch.NodeID, string(v2.Context))
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
		if c, ok := cc.(raftpb.ConfChange); ok {
			n.mu.Lock()
			if ch, ok := n.ccWaiters[c.ID]; ok {
				ch <- struct{}{}
				delete(n.ccWaiters, c.ID)
			}
			n.mu.Unlock()
		}
		if selfRemoved {
			n.applied = e.Index
			n.fail(ErrRemoved)
			return nil
		}
	}
	n.applied = e.Index
	n.m.applied.Set(float64(e.Index))
	return nil
}

// maybeSnapshot compacts the log at the highest index that this node has
// applied and every member has marked applied, once that is SnapshotEntries
// past the last compaction, taking a snapshot there first. After a member
// was added to a group whose log is already compacted it also takes a
// snapshot at the applied index (without compacting further): the new
// member can only be caught up by a snapshot whose configuration includes
// it.
func (n *Node) maybeSnapshot() error {
	if n.joinSnap {
		n.joinSnap = false
		if n.compacted > 0 && n.applied > n.snapIndex {
			if err := n.snapshot(n.applied, n.confHist[len(n.confHist)-1].cs); err != nil {
				return err
			}
		}
	}
	target := min(n.durable.Load(), n.applied)
	if target < n.compacted+n.cfg.SnapshotEntries {
		return nil
	}
	n.mu.Lock()
	for id := range n.members {
		if id != n.id {
			target = min(target, n.peerApplied[id])
		}
	}
	n.mu.Unlock()
	if target < n.compacted+n.cfg.SnapshotEntries {
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
	n.confHist = n.confHist[keep:]
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
