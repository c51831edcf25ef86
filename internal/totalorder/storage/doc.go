// Package storage is the durable state of one total-order Raft node: its
// log, hard state and snapshots, on disk, served to raft through a
// raft.MemoryStorage that holds the retained (uncompacted) log.
//
// Files (under the node's directory):
//
//	wal/<seq>.wal          log segments: records of (optional HardState, entries)
//	snap/<term>-<index>.snap  snapshots: CRC-32C + marshalled raftpb.Snapshot
//
// wal.go frames and replays records; snap.go writes and loads snapshots;
// storage.go is the Storage type (Open replays and repairs, Save is the
// Ready contract's step 1, CreateSnapshot compacts).
//
// Durability: Save writes one record (all the updates it is given) with one
// write and one fdatasync, and writes nothing it does not sync; so after a
// crash only the last record can be incomplete. Open truncates such a torn tail and refuses
// (ErrCorrupt) anything that an interrupted append cannot explain.
//
// Goroutines: none. Save, CreateSnapshot, Compact and Close are serialised
// by a mutex (the node calls Save from its append goroutine and the others
// from its apply goroutine);
// CreateSnapshot and Close; raft reads the MemoryStorage concurrently under
// its lock.
//
// Never: acknowledges a Save before fsync; deletes a segment that holds an
// entry after the newest durable snapshot; silently skips a damaged record
// in the middle of the log.
package storage
