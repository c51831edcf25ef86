package transport

import (
	"context"

	"go.etcd.io/raft/v3/raftpb"
)

// Transport moves Raft messages between the nodes of one group.
//
// Contract:
//   - Send never blocks on the network. Messages to one peer leave in the
//     order Send was called; a message may be lost (raft retries), in which
//     case the transport tells the Handler with ReportUnreachable (and, for a
//     MsgSnap, ReportSnapshot(failed=true); for a MsgProp it never handed
//     to the network, ProposalReporter.ReportProposalUnsent).
//   - Messages received from peers are handed to Handler.Process one at a
//     time per peer, in the order the peer sent them.
//   - Start is called once, before any other method; Stop once, last, and
//     returns only when every goroutine the transport started has exited.
type Transport interface {
	Start(h Handler) error
	// Send queues messages for their destinations (raftpb.Message.To).
	Send(msgs []raftpb.Message)
	// AddPeer makes id reachable at addr. Adding a known peer updates its
	// address.
	AddPeer(id uint64, addr string)
	// RemovePeer forgets id and closes its stream.
	RemovePeer(id uint64)
	// SetApplied sets the durable applied index this node reports to peers.
	SetApplied(index uint64)
	Stop()
}

// Handler is what a Transport delivers to. It is implemented by the Raft
// node. Every method may be called concurrently from several peers'
// goroutines and must not block for long.
// MembershipViewer is implemented by a Handler that compares its view of
// the group with every peer's (the GRPC transport sends its view in each
// batch and checks the peer's).
type MembershipViewer interface {
	// MembershipView returns the members this node knows, the ids it
	// counts as witnesses, and the ids its log was bootstrapped with (nil
	// for a node that joined).
	MembershipView() (members, witnesses, bootstrap []uint64)
	// CheckMembershipView returns an error when peer from's view
	// contradicts this node's: a member both know counted as a witness by
	// one and as a data node by the other, or logs bootstrapped with
	// different ids.
	CheckMembershipView(from uint64, members, witnesses, bootstrap []uint64) error
}

// ProposalReporter is implemented by a Handler that wants to know of the
// proposals it forwarded to a leader (MsgProp) that the transport lost
// before handing them to the network: no peer can have received them, so
// they can be proposed again at once, where a proposal that may have been
// sent must wait out its own loss (Raft does not deduplicate proposals). A
// transport reports only what it knows was not sent: a message lost with
// a stream that broke under it may have arrived and is not reported. It
// may call ReportProposalUnsent from Send with its own lock held: the
// method must not block nor call back into the transport.
type ProposalReporter interface {
	ReportProposalUnsent(m raftpb.Message)
}

type Handler interface {
	// Process steps a message received from a peer into the Raft node.
	Process(ctx context.Context, m raftpb.Message) error
	// ReportUnreachable says the last messages to id may have been lost.
	ReportUnreachable(id uint64)
	// ReportSnapshot says whether a MsgSnap to id was sent.
	ReportSnapshot(id uint64, failed bool)
	// PeerApplied records the durable applied index peer id reports.
	PeerApplied(id, applied uint64)
	// IsRemoved reports whether id has been removed from the group; the
	// transport rejects its streams.
	IsRemoved(id uint64) bool
	// Removed is called when a peer rejected this node because it has been
	// removed from the group.
	Removed()
}
