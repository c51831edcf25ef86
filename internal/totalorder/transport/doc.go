// Package transport carries Raft messages between the nodes of Ordo's
// total-order group.
//
// transport.go defines the Transport and Handler interfaces (the contract
// the Raft node relies on); check.go checks received messages; grpc.go
// implements Transport on gRPC with the ordo.v1.Raft service: each node
// keeps one long-lived client stream to each peer and sends batches of marshalled raftpb.Messages (up to MaxBatch per
// RaftBatch, whatever has queued while the previous batch was being sent).
// Each batch also carries the sender's durable applied index, which peers
// use to decide how far the group may compact. errors.go holds the
// sentinel errors.
//
// Identity: mutual TLS is configured with GRPCConfig.ServerTLS/ClientTLS;
// with GRPCConfig.PeerID as well, each connection is bound to the node id
// its certificate proves (internal/certs.NodeID). A server handshake whose
// client certificate proves no id is refused; an inbound stream carries
// only batches whose From is that id and messages whose From is the
// batch's and whose To is this node, or it is ended with PermissionDenied
// (logged, at most once per 10 s per kind) before any of the batch is
// stepped; a connection to peer N is kept only if the certificate the peer
// presents proves N. A sender refused this way retries once a second.
//
// Hostile input: check.go's CheckMessage refuses, before anything of the
// batch is stepped, a batch from an impossible sender (0, this node,
// raft's own local targets) and any Raft message no peer sends (an
// unknown or local type, no term, MsgApp entries out of sequence, a
// MsgSnap without a snapshot), on which raft would panic or which it
// would take for its own; the stream ends with InvalidArgument and the
// refusal is logged. Raft trusts its peers beyond that: a member with a
// valid certificate can still disrupt the group (Raft is not Byzantine
// fault tolerant); it cannot crash a node with a malformed message.
// FuzzStream (fuzz_test.go) sends arbitrary bytes as a batch over a real
// socket.
//
// Goroutines: the gRPC server (one goroutine per inbound stream, which
// steps messages into the Handler in order), and per peer one sender that
// owns the connection and stream to it. Stop waits for all of them.
//
// Never: blocks Send on the network (a full peer queue drops and reports
// the peer unreachable, which Raft tolerates); reorders messages to a peer;
// accepts batches from a removed node or addressed to another node; under
// PeerID, steps a message whose sender is not the node the connection's
// certificate proves; steps a batch from a peer that counts a member both
// know as a witness and the other as a data node, or whose log was
// bootstrapped with other ids (MembershipViewer: each batch carries the
// sender's view).
package transport
