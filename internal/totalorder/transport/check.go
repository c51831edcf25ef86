package transport

import (
	"fmt"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/confchange"
	"go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
)

// CheckMessage reports (wrapping ErrBadMessage) what makes m, received
// from a peer, a message no Raft peer sends, before it is stepped: raft
// trusts its peers and panics on some such messages, which would stop the
// node. It checks only m itself; the Raft node checks what depends on its
// own log (totalorder's Node.Process).
//
//   - its type is one raft knows (raft indexes a table by type), and not
//     one raft only sends to itself (MsgHup, MsgBeat, MsgStorage*, …);
//   - it has a term, unless it is a forwarded proposal or read index
//     request (raft answers a term-less vote request with a term-less
//     response, which it refuses to send: a panic);
//   - the entries of a MsgApp follow its index one by one, with terms
//     that never decrease, from its log term up to at most its term (raft
//     takes non-contiguous entries as a conflict with committed ones: a
//     panic);
//   - every entry's type is one raft knows;
//   - a MsgSnap carries a snapshot whose configuration raft can restore as
//     it is (a voter that is also a learner, a duplicate id: a panic).
func CheckMessage(m *raftpb.Message) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrBadMessage, m.Type, fmt.Sprintf(format, args...))
	}
	if m.Type < 0 || m.Type > raftpb.MsgForgetLeader {
		return fmt.Errorf("%w: unknown message type %d", ErrBadMessage, int32(m.Type))
	}
	if raft.IsLocalMsg(m.Type) || m.Type == raftpb.MsgForgetLeader {
		return bad("a node's message to itself")
	}
	if m.Term == 0 && m.Type != raftpb.MsgProp && m.Type != raftpb.MsgReadIndex {
		return bad("no term")
	}
	for i := range m.Entries {
		if t := m.Entries[i].Type; t < 0 || t > raftpb.EntryConfChangeV2 {
			return bad("entry %d of unknown type %d", i, int32(t))
		}
	}
	switch m.Type {
	case raftpb.MsgApp:
		prev := m.LogTerm
		for i := range m.Entries {
			e := &m.Entries[i]
			if e.Index != m.Index+1+uint64(i) {
				return bad("entry %d has index %d after index %d", i, e.Index, m.Index)
			}
			if e.Term < prev || e.Term > m.Term {
				return bad("entry %d has term %d (previous %d, message %d)", i, e.Term, prev, m.Term)
			}
			prev = e.Term
		}
	case raftpb.MsgSnap:
		if m.Snapshot == nil {
			return bad("no snapshot")
		}
		if err := checkConfState(m.Snapshot.Metadata); err != nil {
			return bad("%v", err)
		}
	}
	return nil
}

// checkConfState reports whether raft could restore the configuration of a
// snapshot exactly (it panics when it cannot, or when what it restored
// differs): it does what raft's restore does, on a tracker of its own.
func checkConfState(md raftpb.SnapshotMetadata) error {
	cs := md.ConfState
	cfg, prs, err := confchange.Restore(confchange.Changer{Tracker: tracker.MakeProgressTracker(1, 0), LastIndex: md.Index}, cs)
	if err != nil {
		return fmt.Errorf("snapshot configuration %v: %w", cs, err)
	}
	t := tracker.MakeProgressTracker(1, 0)
	t.Config, t.Progress = cfg, prs
	if err := cs.Equivalent(t.ConfState()); err != nil {
		return fmt.Errorf("snapshot configuration %v: %w", cs, err)
	}
	return nil
}

// checkSender reports whether id may be the sender of a batch received by
// node self: a node id, not self, not one of raft's own local targets.
func checkSender(id, self uint64) error {
	if id == 0 || id == self || id == raft.LocalAppendThread || id == raft.LocalApplyThread {
		return fmt.Errorf("%w: a batch from node %d", ErrBadMessage, id)
	}
	return nil
}
