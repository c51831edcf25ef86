// Package apply applies decided remote write sets to the local PostgreSQL
// with high priority and proves each one exactly once.
//
// Files:
//   - bootstrap.go: Bootstrap, the ordo schema and _ordo.applied(seqno, gid).
//   - sql.go: statements of a write set: INSERT of every sent column;
//     UPDATE of the columns the change carries (unchanged TOAST values
//     skipped, never set NULL) keyed by the old primary key; DELETE by
//     key; TRUNCATE ONLY of each TRUNCATE's tables together. Parameters are
//     text with unspecified types, so PostgreSQL infers each from its
//     column and no OID crosses nodes.
//   - apply.go: Applier, Open, Apply, AppliedPrefix; one transaction per
//     write set on a connection with session_replication_role = replica
//     (triggers and foreign-key actions do not fire twice: their effects
//     are in the write set) and lock_timeout; the proof row is inserted in
//     the same transaction, and a write set whose seqno or gid is already
//     proven is skipped, so replay after a crash is idempotent. Each
//     connection prepares every statement shape once (at most 500 kept;
//     all forgotten after each DDL, since prepared parameter types are
//     fixed), so PostgreSQL parses and plans a shape once, not per row.
//   - parallel.go: ApplyBatch, non-conflicting write sets on several
//     connections with commits in seqno order.
//   - blocked.go: the brute-force abort primitive: while a statement runs
//     longer than BlockCheck, pg_blocking_pids of the apply backend is
//     polled and foreign blockers are passed to Config.OnBlocked.
//
// Goroutines: the caller's goroutine drives Apply/ApplyBatch (one at a
// time); ApplyBatch starts one goroutine per in-flight write set and
// waits for all of them; each running statement has a watcher goroutine
// stopped before the statement's call returns. Nothing outlives a call.
//
// The applier never waits forever: every lock wait is bounded by
// lock_timeout, then the attempt is rolled back and retried, up to
// MaxAttempts. It must never apply a write set twice, never commit out of
// seqno order, and never call OnBlocked with its own backends.
package apply
