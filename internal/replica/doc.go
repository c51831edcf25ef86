// Package replica is the replication engine of one node for the DBSM
// protocols (dbsm, dbsm-si): it terminates the node's own update
// transactions through the total order and applies everyone's outcomes to
// the local PostgreSQL in delivery order.
//
// Layers and files:
//   - replica.go: Replica, Terminate (the origin's side: propose, wait for
//     the outcome) and the delivery loop (every node's side: certify, then
//     COMMIT/ROLLBACK PREPARED the node's own transactions and apply the
//     others').
//   - codec.go: the total-order payload (pkg/api/ordo/v1 Entry) to and from
//     capture write sets and txn keys.
//
// The origin, step by step (called by a session that has run PREPARE
// TRANSACTION and has the decoded write set):
//
//  1. Register a waiter for the gid.
//  2. Propose {gid, origin, snapshot_seqno, keys, rows}.
//  3. Wait for the outcome the delivery loop hands the waiter.
//  4. If the proposal failed (no quorum, timeout), propose an AbortEntry in
//     the background until one outcome is delivered (the first outcome
//     delivered wins), and tell the client the outcome is unknown.
//
// The delivery loop, for each delivered entry at seqno s, in order:
//
//  1. Decide: an AbortEntry marks its gid aborted; a TxnEntry whose gid is
//     marked aborts, otherwise the certifier decides.
//  2. Carry out: the origin runs COMMIT PREPARED or ROLLBACK PREPARED on
//     its own connection; every other node applies a committed write set
//     with its proof row (apply.Applier), or records the seqno for an
//     aborted one.
//  3. Publish: the applied prefix becomes s (sessions read it as their
//     snapshot_seqno), the total order is told s is applied, and the waiter,
//     if any, gets the outcome.
//
// Goroutines: Run is the delivery loop, the only goroutine that touches the
// certifier and the loop's PostgreSQL connection. Terminate runs on session
// goroutines; waiters are guarded by a mutex. Background abort proposals
// are tracked and finished by Run's return.
//
// Never: commit a local transaction outside the delivery loop's order;
// decide anything from timing or local state other than the delivered
// sequence; let a session wait forever.
package replica
