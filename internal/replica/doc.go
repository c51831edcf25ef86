// Package replica is the delivery engine of one node: it terminates the
// node's own update transactions through the total order and carries out
// everyone's outcomes on the local PostgreSQL in delivery order. What is
// decided, and in which commit order, is not its business: a decider
// (internal/termination/dbsm for dbsm and dbsm-si, internal/termination/pgr
// for pgr, internal/termination/cons for cons) says so; the engine does every side effect (DESIGN.md "Engine
// and deciders").
//
// Layers and files:
//   - replica.go: Replica, Terminate (the origin's side: propose, wait for
//     the outcome), brute-force rollbacks, leftovers after a restart, the
//     loop's connection.
//   - loop.go: the delivery loop (every node's side): decode each entry,
//     step the decider, carry out its decisions (COMMIT/ROLLBACK PREPARED
//     the node's own transactions, apply the others'), publish the
//     applied prefix.
//   - fragments.go: the payloads of fragments held until their
//     transaction is decided.
//   - outcomes.go: pgr's outcome entries: the origin's read keys kept for
//     its decider, the proposals the decider asks for, and the aborts of
//     transactions whose origin the failure detection names.
//   - cons.go: cons: Begin (propose the classes, wait for the grant), End,
//     grants handed to sessions, releases for gone origins.
//   - classes.go: the conflict-class configuration, changed through the
//     order and kept in _ordo.cluster_config.
//   - switch.go: the protocol in force, switched through the order (the
//     old decider drains, a new one starts), its history kept in
//     _ordo.cluster_config.
//   - proofs.go: proof rows, and the outcomes a restarted node replays.
//   - schema.go: schema fingerprints and their comparison.
//   - datacheck.go: data checks, and snapshotAt, the consistent snapshot
//     at a position of the order.
//   - donate.go: a state transfer's snapshot, exported by the delivery
//     loop between two batches (ExportSnapshot).
//   - codec.go: the total-order payload (pkg/api/ordo/v1 Entry) to and from
//     capture write sets and txn keys.
//
// The origin, step by step (called by a session that has run PREPARE
// TRANSACTION and has the decoded write set):
//
//  1. Register a waiter for the gid (under pgr, keep its read keys: they
//     never leave the node).
//  2. Propose {gid, origin, snapshot_seqno, keys, rows} (under pgr, write
//     keys only).
//  3. Wait for the outcome the delivery loop hands the waiter.
//  4. If the proposal failed (no quorum, timeout), propose an AbortEntry in
//     the background until one outcome is delivered (the first outcome
//     delivered wins), and tell the client the outcome is unknown.
//
// The delivery loop, for each delivered entry at seqno s, in order (the
// termination.Decider contract):
//
//  1. Decode: the entry, with the outcome the proof rows give if the node
//     decided it before a restart; a transaction's entry is kept until it
//     is decided.
//  2. Step the decider; forget the fragments it says expired, hold the
//     fragment it says to hold, propose the outcomes it asks for (pgr).
//  3. Carry out each decision in order: the origin runs COMMIT PREPARED or
//     ROLLBACK PREPARED on its own connection; every other node applies a
//     committed write set with its proof row (apply.Applier), runs of them
//     together; the waiter, if any, gets the outcome.
//  4. Publish: the applied prefix becomes the decider's settled seqno once
//     everything up to it is carried out (sessions read it as their
//     snapshot_seqno), and the total order is told it is applied.
//
// Between batches, under pgr, the loop proposes the abort of undecided
// transactions whose origin the cluster's failure detection names
// (Config.Suspects, outcomes.go).
//
// Goroutines: Run is the delivery loop, the only goroutine that touches the
// decider and the loop's PostgreSQL connection. Terminate runs on session
// goroutines; waiters are guarded by a mutex. Background abort proposals
// are tracked and finished by Run's return.
//
// Never: commit a local transaction outside the delivery loop's order;
// decide anything from timing or local state other than the delivered
// sequence; let a session wait forever.
package replica
