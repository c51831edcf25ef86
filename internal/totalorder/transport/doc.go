// Package transport carries Raft messages between the nodes of Ordo's
// total-order group.
//
// transport.go defines the Transport and Handler interfaces (the contract
// the Raft node relies on); grpc.go implements Transport on gRPC with the
// ordo.v1.Raft service: each node keeps one long-lived client stream to each
// peer and sends batches of marshalled raftpb.Messages (up to MaxBatch per
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
// Goroutines: the gRPC server (one goroutine per inbound stream, which
// steps messages into the Handler in order), and per peer one sender that
// owns the connection and stream to it. Stop waits for all of them.
//
// Never: blocks Send on the network (a full peer queue drops and reports
// the peer unreachable, which Raft tolerates); reorders messages to a peer;
// accepts batches from a removed node or addressed to another node; under
// PeerID, steps a message whose sender is not the node the connection's
// certificate proves.
package transport
