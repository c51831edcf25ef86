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
//
// The model is serializability (dbsm, pgr, cons), snapshot isolation
// (dbsm-si) or read committed without lost updates (dbsm-rc; Allowed), not
// strict serializability: a node may serve a stale snapshot, so real-time
// order is never an edge.
package checker
