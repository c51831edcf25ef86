// Package join is the joining side of a state transfer: it fills a new
// node's empty PostgreSQL database with a copy of a running member's
// replicated database at an applied prefix S, so that the node can replay
// the total order from S on (docs/membership.md).
//
// # Steps (Run)
//
//  1. Check the local database: already joined (_ordo.joined has a row):
//     nothing to do; empty, or left half-copied by an earlier attempt
//     (the join-in-progress file in the data directory says so):
//     recreate it empty; anything else: refuse.
//  2. Ask the donor (admin API) to add this node as a Raft learner, which
//     also holds back log compaction on every member until the node
//     reports what it applied.
//  3. Ask the donor for a snapshot (POST /v1/transfer): its delivery loop
//     exports a PostgreSQL snapshot between two batches, at the prefix S
//     its proof rows prove. The donor keeps it importable until this
//     package closes the connection.
//  4. Copy the roles (pg_dumpall --roles-only; global objects are not in
//     a database's snapshot), the schema before the data (pg_dump
//     --snapshot --section=pre-data, restored with pg_restore), every
//     table's rows as COPY streams from a REPEATABLE READ transaction that
//     imported the snapshot (counted: tables, rows, bytes), the sequences'
//     positions, then indexes, constraints, triggers and event triggers
//     (--section=post-data). Everything is restored with
//     session_replication_role = replica, so no trigger (Ordo's DDL
//     event triggers included) fires on copied rows and DDL.
//  5. Record _ordo.joined (S, donor) and remove the in-progress file.
//
// The node then starts as usual (internal/node): its proven prefix is S
// (the copied _ordo.applied), it creates its own capture slot after the
// copy (nothing copied is captured), normalizes its sequences into its
// own residue class, and replays the order from a certification window
// before S, as a restarted node does.
//
// # Never
//
// The package never writes to the donor's database, never touches a local
// database that is neither empty nor its own unfinished copy, never copies
// _ordo.rolled_back (this node's own early rollbacks) or _ordo.joined, and
// never declares a join done before every step above succeeded.
package join
