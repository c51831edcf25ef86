package termination

import "errors"

// ErrUnknownOutcome is returned by Protocol.Terminate when the proposal
// could not be confirmed (no quorum, timeout, shutdown): the transaction
// may still commit or abort; the node resolves it when the order delivers
// an outcome.
var ErrUnknownOutcome = errors.New("replica: commit outcome unknown")

// ErrTooLarge is returned by Protocol.Terminate when the transaction's
// entry exceeds what the total order accepts; it was not proposed.
var ErrTooLarge = errors.New("replica: transaction too large to replicate")

// ErrNotUTF8 is returned by Protocol.Terminate when the transaction holds
// text that is not valid UTF-8 (a database whose encoding is SQL_ASCII
// stores any bytes): the order carries text as UTF-8, so it was not
// proposed, and it cannot be, however often it is retried.
var ErrNotUTF8 = errors.New("the transaction holds text that is not valid UTF-8")

// ErrNotReplicated is returned by Protocol.Terminate when a fragment of a
// transaction too large for one entry could not be proposed: the
// transaction cannot commit, and its abort is being ordered.
var ErrNotReplicated = errors.New("replica: the transaction could not be replicated")

// ErrPreempted comes with ErrNotReplicated when the node rolled the
// transaction back to let an earlier transaction's writes through before
// its write set was captured (a conflict, not a failure of the cluster);
// its abort is being ordered.
var ErrPreempted = errors.New("this node rolled it back to let an earlier transaction's writes through before its own writes were captured")

// ErrInconsistent is returned by Protocol.Terminate once the node has
// found that its database differs from the others' (an apply that did not
// match): it stops accepting update transactions rather than diverge
// silently.
var ErrInconsistent = errors.New("replica: node is inconsistent and refuses updates")

// ErrStopped is returned by Protocol.Terminate once the node stopped
// carrying out the total order for a cause that does not make its database
// differ from the others' (its PostgreSQL out of disk space or memory, or
// restarted and missing commits it had acknowledged): it refuses update
// transactions, and once the cause is gone a restart replays from the
// log.
var ErrStopped = errors.New("replica: node stopped carrying out the total order and refuses updates")

// ErrReplaying is returned by ToldAwaiter.AwaitTold when the node, back
// from a restart with prepared transactions of its own, has not replayed
// its log far enough to show every commit it may have told in time: a
// snapshot taken now could miss one.
var ErrReplaying = errors.New("this node is still replaying its log")

// ErrClientCanceled ends a wait of a session inside Ordo (for the commits
// its node told, for conflict classes, for a sync read) that its client
// canceled: the CancelRequest it sent is forwarded to PostgreSQL, which is
// running nothing of the session's, so Ordo ends the wait itself.
var ErrClientCanceled = errors.New("canceling statement due to user request")

// ErrBruteForced ends a wait of a session inside Ordo whose transaction
// the node chose for a brute-force abort (it holds locks the apply of a
// transaction placed first by the order needs): the session fails its
// statement with 40001 and its transaction is rolled back.
var ErrBruteForced = errors.New("a replication conflict aborted this transaction")

// ErrPostgresRestarted is returned by the engine when the local
// PostgreSQL restarted under a running node: the applies and commits it
// acknowledged without flushing them may be lost, so the node must
// restart and replay from what the database proves rather than carry on.
var ErrPostgresRestarted = errors.New("replica: PostgreSQL restarted under this node; restart the node so it replays from what the database proves")

// ErrProtocolSwitched is returned by ClassScheduler.Begin when the cluster
// switched protocols while the transaction waited for its classes: it
// aborted and holds nothing.
var ErrProtocolSwitched = errors.New("replica: the cluster switched protocols; the transaction aborted")

// ErrClassesReleased is returned by ClassScheduler.Begin when the cluster
// ordered the transaction's abort before granting its classes (another
// node took this one for gone): it aborted and holds nothing.
var ErrClassesReleased = errors.New("replica: the cluster aborted the transaction before granting its conflict classes (a node took this one for gone)")
