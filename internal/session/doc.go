// Package session is the adapter between the wire proxy and replication: it
// implements wire.Hooks, follows each client session's transaction, and
// routes every update transaction through the replication engine
// (internal/replica) instead of letting it commit locally.
//
// What a session does with the client's statements (DESIGN.md "The database
// interface"):
//
//  1. Every transaction block runs at REPEATABLE READ: BEGIN and SET
//     TRANSACTION asking for another level (or a BEGIN asking for none) are
//     rewritten, or SET TRANSACTION follows them; Ordo's own BEGIN says so.
//     The session's default stays the client's (default_transaction_isolation,
//     pg_settings); an implicit transaction of several statements runs at it.
//  2. Before the first statement that takes the transaction's snapshot, it
//     records snapshot_seqno (the replica's applied prefix); under cons it
//     first takes the transaction's conflict classes (cons.go).
//  3. Each statement is analyzed (internal/analysis); under dbsm and pgr
//     its read keys join the transaction's read set; under cons it must
//     stay inside the declared classes.
//  4. An update statement outside a transaction block (autocommit) is
//     wrapped: the session sends BEGIN first (with the extended protocol,
//     ahead of the statement's first message in the same round trip,
//     where PostgreSQL skips the statement if the BEGIN fails:
//     wrapAhead) and holds the ReadyForQuery of the statement's unit;
//     when PostgreSQL has answered, it terminates the transaction (as
//     step 5 says) and only then lets the client see ReadyForQuery.
//     The statement's rows and CommandComplete are held too where the
//     client cannot be waiting for them, so that a replication conflict
//     can run it again before the client hears of it (retry.go).
//  5. Terminating: if the transaction has an xid, PREPARE TRANSACTION gid,
//     wait for the decoded write set (internal/capture), hand everything to
//     the replica, and wait for the outcome. Commit: the client sees COMMIT.
//     Abort: ROLLBACK PREPARED (done by the replica) and SQLSTATE 40001.
//     Without an xid the transaction read only and commits locally.
//     Whether it has one (and wrote only temporary tables, or large
//     objects) is the write probe's question, asked in a round trip of
//     its own, or, for a transaction that changed rows, in the PREPARE's
//     (prepareAtOnce: checked in a savepoint, which a refusal rolls back
//     to before the probe of its own).
//  6. An explicit COMMIT is terminated the same way when it arrives, then
//     "PREPARE TRANSACTION gid; BEGIN" leaves an empty transaction for the
//     client's own COMMIT to end, so the client sees PostgreSQL's own reply
//     (COMMIT AND CHAIN ends it and starts the next).
//  7. Several statements before one Sync (pgx batches, JDBC executeBatch,
//     pipelines) run in PostgreSQL's implicit transaction: an update after
//     reads in it makes it a block there (wire.Backend.BeginHere), with the
//     snapshot_seqno and reads the batch had from its start, and it is
//     terminated as a wrapped statement at the Sync.
//  8. A query string with transaction control among other statements
//     ("BEGIN; …; COMMIT") is split at each control statement
//     (wire.Split): Ordo opens the string's implicit transaction itself, a
//     BEGIN in it makes it the client's block, and each COMMIT is
//     terminated at its own boundary.
//  9. Work that touched only temporary objects commits locally (PostgreSQL
//     cannot prepare it); with replicated changes it is refused, naming
//     why. SHOW transaction_isolation answers the level the transaction
//     asked for, unless the cluster gives less (under dbsm-si, a block
//     without a level at a session default of SERIALIZABLE Ordo has not
//     read yet answers REPEATABLE READ). Under dbsm-si and dbsm-rc a transaction at
//     SERIALIZABLE has its reads collected and certified (tracksReads,
//     termination.Txn.Serializable).
//
// Files: hooks.go (wire.Hooks, the registry of sessions by backend pid),
// session.go (per-session state machine), terminate.go (steps 5 and 6),
// cons.go (conflict classes under cons), parse.go (what precedes the
// snapshot PostgreSQL takes at a Parse), errors.go (the errors clients
// see).
//
// Goroutines: each session's hooks run on that session's wire goroutine
// (serialized by the wire contract). The registry is shared and locked.
//
// Never: let a transaction that wrote a replicated table commit locally;
// hold a lock of the replica or the capture while waiting on the client.
package session
