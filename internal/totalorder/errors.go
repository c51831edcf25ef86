package totalorder

import "errors"

// ErrNoQuorum is returned by Propose, ReadIndex, AddNode and RemoveNode when
// the request was not committed (or confirmed) within Config.ProposeTimeout:
// no leader with a reachable quorum. The outcome is unknown: a proposal that
// failed this way may still commit later (if it had reached a leader); it is
// then delivered like any other entry, but its Propose call has returned.
var ErrNoQuorum = errors.New("totalorder: no quorum: not committed within the propose timeout")

// ErrStopped is returned by every call on a Node that has been stopped, or
// whose Raft loop ended because of a storage error (wrapped with it).
var ErrStopped = errors.New("totalorder: stopped")

// ErrRemoved is returned by calls on a Node that has been removed from the
// group; such a node no longer takes part in Raft and should be stopped.
var ErrRemoved = errors.New("totalorder: node removed from the group")

// ErrTooLarge is returned by Propose for a payload above
// Config.MaxProposalBytes.
var ErrTooLarge = errors.New("totalorder: proposal too large")

// ErrRemovedID is returned (wrapped) by AddLearner and Promote for an id
// that was removed from the group: ids are never reused.
var ErrRemovedID = errors.New("totalorder: node id was removed from the group and is never reused")

// ErrWitnessMismatch is the reason a node refuses a peer's stream when the
// two count a member they both know differently: a witness for one, a data
// node for the other (their bootstrap witnesses lists differ).
var ErrWitnessMismatch = errors.New("totalorder: the nodes count witnesses differently")

// ErrBootstrapMismatch is the reason a node refuses a peer's stream when
// the two bootstrapped their logs with different ids (their peers: lists
// differed when they first started).
var ErrBootstrapMismatch = errors.New("totalorder: the nodes bootstrapped with different peers")
