// Package capture learns exactly what a transaction wrote: it streams the
// node's logical replication slot (pgoutput, protocol version 3, two-phase
// decoding) and turns each prepared transaction into a WriteSet that the
// session obtains with Capture.Await after PREPARE TRANSACTION.
//
// Layers, bottom up:
//   - message.go: Decode, a bounds-checked decoder of every pgoutput message
//     Ordo receives, including the v3 two-phase messages pglogrepl lacks
//     (Begin Prepare 'b', Prepare 'P', Commit Prepared 'K', Rollback
//     Prepared 'r'). Streaming ('streaming' option) is left off, so
//     Stream * messages never arrive: PostgreSQL spills large transactions
//     to disk itself and sends them whole at PREPARE.
//   - writeset.go: WriteSet, Row, Table, Value — the decoded result.
//   - decoder.go: Decoder, the state machine: relation cache (schema,
//     table, columns, type OIDs, primary key columns in key order), row
//     changes of a prepared transaction into a WriteSet under Limits, and
//     events at transaction ends.
//   - capture.go: Setup (publication FOR ALL TABLES and the two-phase slot,
//     both idempotent), Start/Stop, Await, the stream loop with standby
//     status updates, and the leak detector.
//   - metrics.go: ordo_capture_* metrics.
//
// Recognising applies. The applier (package apply) inserts its proof row
// into _ordo.applied in the same transaction as the applied rows. A plain
// (not prepared) commit that wrote _ordo.applied is therefore an apply; any
// other plain commit that wrote a published table is a write that bypassed
// Ordo: it is counted in ordo_capture_unreplicated_commits_total and
// logged with its xid. So is a COMMIT PREPARED of a gid Ordo did not make.
// Rows of _ordo.applied never enter a write set. On PostgreSQL 16 and
// later the applier's sessions run under a replication origin and the
// stream asks pgoutput for origin 'none', so the walsender skips applies
// altogether (they cost it no decoding and this stream no bytes); an apply
// that ran without its origin (package apply falls back when it cannot
// set one up) is still recognised by its proof row.
//
// Values are captured in PostgreSQL's text output format, produced by the
// walsender under fixed settings (ISO dates, UTC, extra_float_digits=3, hex
// bytea) so that they read back identically. Generated columns are not
// sent (PostgreSQL 15 cannot; 18 sends stored ones only to a publication
// made with publish_generated_columns, which Setup's is not, and virtual
// ones never); the applying node computes them. Sequence state is not
// replicated (the values they produced are, in the rows).
//
// Goroutines: Start runs one goroutine that owns the replication
// connection, a catalog connection (primary key order lookups) and the
// Decoder; it reconnects after errors with backoff and is stopped and
// waited for by Stop. Await may be called from any goroutine.
//
// Memory: a write set is held once, as Go strings, bounded by Limits
// (default 1,000,000 rows and 512 MiB); a write set over a limit is
// dropped as soon as the limit is crossed and Await returns ErrTooLarge.
//
// This package must never write to the database, never decide a
// transaction's outcome, and never confirm a stream position inside a
// transaction it has not fully decoded.
package capture
