// Package transport carries Raft messages between the nodes of Ordo's
// total-order group.
//
// transport.go defines the Transport and Handler interfaces (the contract
// the Raft node relies on); grpc.go implements Transport on gRPC with the
// ordo.v1.Raft service: each node keeps one long-lived client stream to each
// peer and sends batches of marshalled raftpb.Messages (up to MaxBatch per
// RaftBatch, whatever has queued while the previous batch was being sent).
// Each batch also carries the sender's durable applied index, which peers
// use to decide how far the group may compact. Mutual TLS is configured
// with GRPCConfig.ServerTLS/ClientTLS.
//
// Goroutines: the gRPC server (one goroutine per inbound stream, which
// steps messages into the Handler in order), and per peer one sender that
// owns the connection and stream to it. Stop waits for all of them.
//
// Never: blocks Send on the network (a full peer queue drops and reports
// the peer unreachable, which Raft tolerates); reorders messages to a peer;
// accepts batches from a removed node or addressed to another node.
package transport
