// Package certifier decides, for the DBSM protocols, whether a delivered
// update transaction commits or aborts (DESIGN.md "Termination", "Key modes
// and the conflict rule").
//
// A Certifier is a pure function of the sequence of entries delivered to it:
// given the same sequence, every instance on every node reaches the same
// decisions, whatever the timing. To keep that true it must never read a
// clock, a random source, the local catalog, or anything but its arguments;
// it does no I/O and starts no goroutine. One goroutine (the node's delivery
// loop) owns a Certifier; it is not safe for concurrent use.
//
// Files:
//   - certifier.go: the index (last committed seqno per key and recorded
//     mode), Certify, and deterministic trimming.
//
// The rule: T, delivered at seqno s, fails iff some U delivered before it
// with U.seqno > T.SnapshotSeqno committed a key conflicting with one of T's
// (txn.Conflicts). Keys are hierarchical: a row or granule key of T is also
// checked against an X recorded on its table key (and a row key against an X
// on its granule key when T names the granule), so a TRUNCATE or a DDL
// statement conflicts with every finer key under its table. Reads of
// everything (ReadAll) conflict with any write after the snapshot.
//
// Trimming: the index remembers only the last Window seqnos. A transaction
// whose snapshot is older than that cannot be certified and aborts with
// ReasonTooOld; the window is part of the cluster configuration, identical on
// every node, so trimming is deterministic too.
package certifier
