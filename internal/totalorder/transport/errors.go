package transport

import "errors"

// ErrPeerIdentity is returned (wrapped) by a handshake, and carried in the
// status that ends a stream, when a peer's certificate does not prove the
// node id it claims (the From of its batches and messages) or was dialed
// as. Only with GRPCConfig.PeerID.
var ErrPeerIdentity = errors.New("transport: the peer's certificate does not prove its node id")

// ErrBadMessage is returned (wrapped) by CheckMessage, and carried in the
// status that ends a stream, for a Raft message or batch no peer sends:
// an unknown or local type, no term, entries out of sequence, a sender
// that is no other node.
var ErrBadMessage = errors.New("transport: malformed raft message")
