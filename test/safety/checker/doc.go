// Package checker checks safety-run histories (test/safety/history) against
// the promise of a replication protocol. It is pure logic: histories in,
// anomalies out.
//
// Files:
//   - listappend.go: an Elle-style checker for list-append transactions:
//     infers each key's version order from the longest read, builds the
//     ww/wr/rw dependency graph of the committed transactions, finds its
//     cycles (Tarjan's strongly connected components) and names the
//     anomalies (G0, G1a, G1b, G1c, G-single, G2-item, lost update, and the
//     non-cycle ones: incompatible orders, duplicates, garbage reads).
//   - graph.go: the dependency graph, SCCs and cycle search.
//   - bank.go: every committed total read equals the constant total.
//   - sets.go: no acknowledged add missing, nothing failed present.
//   - hot.go: hot counters incremented by one: the acknowledged
//     increments wrote distinct values up to the final one, which only
//     acknowledged or indeterminate increments explain; reads within it.
//   - longfork.go: Jepsen's long fork: the registers the reads of a group
//     saw are nested sets (two reads that saw two writes in opposite
//     orders are a long fork); no failed or unknown write read or kept.
//   - ddl.go: the DDL workload's final state through every node: the same
//     columns and rows everywhere, every acknowledged row and table there,
//     no failed one, no refused column, timestamps as the client's time
//     zone makes them.
//
// The model is serializability (dbsm, pgr, cons), snapshot isolation
// (dbsm-si) or read committed without lost updates (dbsm-rc; Allowed), not
// strict serializability: a node may serve a stale snapshot, so real-time
// order is never an edge.
package checker
