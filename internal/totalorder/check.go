package totalorder

import (
	"fmt"

	"go.etcd.io/raft/v3/raftpb"

	"github.com/ordo-db/ordo/internal/totalorder/transport"
)

// What a peer's message is checked for before raft sees it. The transport
// checks the message alone (transport.CheckMessage: types, terms, entries
// in sequence); the node checks what only it knows:
//
//   - the entries a peer proposes (a follower forwarding its proposals)
//     or appends (the leader) are entries of this package: an empty
//     entry, an envelope that decodes (envelope.go), or a configuration
//     change that decodes; a forwarded proposal is the sender's own.
//     Otherwise every node would fail to apply the committed entry and
//     stop.
//   - a heartbeat does not tell this node to commit past the end of its
//     log (raft takes that for a lost log: a panic). It is checked on the
//     raft goroutine against lastIndex.
//
// Such a message is dropped and counted (ordo_totalorder_refused_messages_total);
// the transport ends the stream it came on.

// checkEntries implements the first rule (any goroutine).
func checkEntries(m *raftpb.Message) error {
	if m.Type != raftpb.MsgProp && m.Type != raftpb.MsgApp {
		return nil
	}
	for i := range m.Entries {
		e := &m.Entries[i]
		var err error
		switch e.Type {
		case raftpb.EntryNormal:
			if len(e.Data) == 0 {
				continue
			}
			var origin uint64
			_, origin, _, _, err = decodeEnvelope(e.Data)
			if err == nil && m.Type == raftpb.MsgProp && origin != m.From {
				err = fmt.Errorf("a proposal of node %d forwarded by node %d", origin, m.From)
			}
		case raftpb.EntryConfChange:
			var cc raftpb.ConfChange
			err = cc.Unmarshal(e.Data)
		case raftpb.EntryConfChangeV2:
			var cc raftpb.ConfChangeV2
			err = cc.Unmarshal(e.Data)
		}
		if err != nil {
			return fmt.Errorf("%w: %s from node %d: entry %d: %w", transport.ErrBadMessage, m.Type, m.From, i, err)
		}
	}
	return nil
}

// checkCommit implements the second rule (raft goroutine): lastIndex is
// the index of the last entry in this node's log, durable or not.
func checkCommit(m *raftpb.Message, lastIndex uint64) error {
	if m.Type == raftpb.MsgHeartbeat && m.Commit > lastIndex {
		return fmt.Errorf("%w: a heartbeat of node %d commits index %d, this node's log ends at %d", transport.ErrBadMessage, m.From, m.Commit, lastIndex)
	}
	return nil
}
