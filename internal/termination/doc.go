// Package termination holds what every termination protocol shares: the
// contract a session terminates its update transactions through
// (Protocol), the types it hands over and gets back (Txn, Outcome), the
// errors it must tell apart, and the contract of a decider (Decider), the
// deterministic heart of each protocol.
//
// Layers (DESIGN.md "Engine and deciders"):
//
//   - termination (this package): leaf types and interfaces. A session
//     imports it, never the engine (internal/replica) or a decider.
//   - termination/dbsm (dbsm, dbsm-si), termination/pgr and
//     termination/cons: one decider per protocol, a pure function of the
//     delivered sequence and its own state (pgr's proposals also of what
//     the origin alone knows, Entry.Local).
//   - internal/replica: the delivery engine, which owns every side effect
//     (PostgreSQL, the network, clocks, fragments' payloads, proofs,
//     applies, waiters, brute-force aborts) and feeds the decider.
//
// Files:
//   - protocol.go: Protocol, Txn, Outcome, the optional Preparer and
//     ClassScheduler capabilities, protocol names.
//   - errors.go: the errors Terminate returns.
//   - decider.go: Decider, Entry, Local, Step, Decision, Proposal.
//   - fragments.go: Fragments, the rule every decider applies to
//     transactions too large for one entry.
//
// This package must never do I/O, start goroutines or import the engine,
// the total order or PostgreSQL drivers.
package termination
