// Package txn holds the leaf types every replication component shares: the
// cluster-wide transaction id (GID), keys of the certification index (Key),
// their lock modes (Mode), key sets (KeySet), read sets (ReadSet) and
// conflict-class references (ClassRef).
//
// Files:
//   - gid.go: GID, its construction and parsing.
//   - key.go: Key (table, granule, row and unique-constraint keys) and the
//     canonical text encoding of key values.
//   - mode.go: Mode (S, IX, X, R) and the conflict rule of DESIGN.md.
//   - keyset.go: KeySet (keys with modes) and ReadSet (S keys with escalation).
//   - class.go: ClassRef, a reference to a conflict class or one of its
//     granule partitions.
//
// All types are plain values: comparable, usable as map keys, safe to copy.
// Nothing here starts goroutines or does I/O; KeySet and ReadSet are not safe
// for concurrent mutation (one session or one certifier owns each).
//
// This package must never import anything outside the standard library and
// must never contain an OID: keys are built from schema-qualified names and
// canonical text values only, so they are equal on every node.
package txn
