package storage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// ErrCorrupt is returned by Open when the log or the snapshots are damaged in
// a way that is not the result of an interrupted append: a bad record that is
// followed by more data, a damaged sealed segment, an undecodable record, or a
// gap between the newest usable snapshot and the log. The node must not run on
// such a directory; wipe it and re-add the node (it catches up by snapshot).
var ErrCorrupt = errors.New("storage: corrupt raft log")

// Options tune a Storage.
type Options struct {
	// SegmentBytes is the size segment files are preallocated to and after
	// which the log rolls to a new segment. Default 16 MiB.
	SegmentBytes int64
	// NoSync disables fsync. Only for tests that measure nothing durable;
	// never in production.
	NoSync bool
}

// Storage is the durable Raft log, hard state and snapshots of one node, plus
// the raft.MemoryStorage that serves them to raft. It is not safe for
// concurrent use: Save, CreateSnapshot, Compact and Close are serialised by
// a mutex, and raft reads the MemoryStorage under that storage's own lock.
type Storage struct {
	mu     sync.Mutex // serialises Save, CreateSnapshot, Compact, Close
	dir    string
	mem    *raft.MemoryStorage
	wal    *wal
	opts   Options
	hs     raftpb.HardState
	fresh  bool
	report OpenReport
}

// OpenReport says what Open found.
type OpenReport struct {
	// TornTail is set when an interrupted append at the end of the log was
	// cut away (it was never fsynced, so never acknowledged). Preallocated
	// zeros after the last record are not a torn tail.
	TornTail bool
	// TruncatedAt is the offset the last segment was cut at when TornTail.
	TruncatedAt int64
	// SkippedSnapshots lists damaged snapshot files that were ignored.
	SkippedSnapshots []string
	// Snapshot is the metadata of the snapshot the log was restored on.
	Snapshot raftpb.SnapshotMetadata
	// LastIndex is the last log index after replay.
	LastIndex uint64
}

// Open opens (creating if needed) the storage in dir and replays it.
//
// Recovery rules, in order:
//  1. The newest snapshot file with a valid checksum is the base.
//  2. Every segment is replayed in order; later entries overwrite earlier
//     ones at the same index (Raft log truncation), the last HardState wins.
//  3. Segments are preallocated: zeros after the last record end a
//     segment. In the last segment only, an invalid tail that can only come
//     from one interrupted append (a header or payload cut short, or a bad
//     checksum, with nothing but zeros after it) is cut away. Anything else
//     is ErrCorrupt.
//  4. Entries at or below the snapshot index are dropped; if the log holds a
//     different term at the snapshot index, everything after it is dropped too
//     (those entries were superseded by the snapshot). The remaining log must
//     start right after the snapshot, otherwise ErrCorrupt.
func Open(dir string, opts Options) (*Storage, error) {
	if opts.SegmentBytes <= 0 {
		opts.SegmentBytes = 16 << 20
	}
	walDir, snapDir := filepath.Join(dir, "wal"), filepath.Join(dir, "snap")
	for _, d := range []string{walDir, snapDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("storage: %w", err)
		}
	}
	s := &Storage{dir: dir, mem: raft.NewMemoryStorage(), opts: opts}
	if err := pruneSnaps(snapDir, 1<<30); err != nil { // removes *.tmp only
		return nil, fmt.Errorf("storage: %w", err)
	}
	snap, skipped, err := loadNewestSnap(snapDir)
	if err != nil {
		return nil, fmt.Errorf("storage: %w", err)
	}
	s.report.SkippedSnapshots = skipped
	segs, err := listSegments(walDir)
	if err != nil {
		return nil, fmt.Errorf("storage: %w", err)
	}
	var (
		ents     []raftpb.Entry
		hs       raftpb.HardState
		lastSize int64
	)
	for i := range segs {
		last := i == len(segs)-1
		end, torn, err := readSegment(segs[i].path, last, func(r stateRecord) error {
			if r.hasHS {
				hs = r.hs
			}
			if len(r.entries) == 0 {
				return nil
			}
			first := r.entries[0].Index
			segs[i].maxIndex = max(segs[i].maxIndex, r.entries[len(r.entries)-1].Index)
			switch {
			case len(ents) == 0:
			case first <= ents[0].Index:
				ents = ents[:0]
			case first <= ents[len(ents)-1].Index+1:
				ents = ents[:first-ents[0].Index]
			default:
				// A gap: only a snapshot installed in between explains it;
				// checked against the snapshot below.
				ents = ents[:0]
			}
			ents = append(ents, r.entries...)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("storage: %w", err)
		}
		if last {
			lastSize = end
			if torn {
				s.report.TornTail, s.report.TruncatedAt = true, end
			}
		}
	}
	si, st := snap.Metadata.Index, snap.Metadata.Term
	if len(ents) > 0 && ents[0].Index <= si && si <= ents[len(ents)-1].Index {
		if ents[si-ents[0].Index].Term != st {
			ents = ents[:0]
		} else {
			ents = ents[si-ents[0].Index+1:]
		}
	} else if len(ents) > 0 && ents[len(ents)-1].Index < si {
		ents = ents[:0]
	}
	if len(ents) > 0 && ents[0].Index != si+1 {
		return nil, fmt.Errorf("%w: log starts at index %d but the newest usable snapshot is at %d", ErrCorrupt, ents[0].Index, si)
	}
	if hs.Commit < si {
		hs.Commit = si
	}
	if hs.Term < st {
		hs.Term, hs.Vote = st, 0
	}
	lastIndex := si
	if len(ents) > 0 {
		lastIndex = ents[len(ents)-1].Index
	}
	if hs.Commit > lastIndex {
		return nil, fmt.Errorf("%w: hard state commit %d is beyond the last log index %d", ErrCorrupt, hs.Commit, lastIndex)
	}
	if !raft.IsEmptySnap(snap) {
		if err := s.mem.ApplySnapshot(snap); err != nil {
			return nil, fmt.Errorf("storage: %w", err)
		}
	}
	if err := s.mem.Append(ents); err != nil {
		return nil, fmt.Errorf("storage: %w", err)
	}
	if err := s.mem.SetHardState(hs); err != nil {
		return nil, fmt.Errorf("storage: %w", err)
	}
	s.hs = hs
	s.fresh = raft.IsEmptySnap(snap) && len(ents) == 0 && raft.IsEmptyHardState(hs)
	s.report.Snapshot = snap.Metadata
	s.report.LastIndex = lastIndex
	w, err := openWAL(walDir, segs, lastSize, opts.SegmentBytes, opts.NoSync)
	if err != nil {
		return nil, fmt.Errorf("storage: %w", err)
	}
	s.wal = w
	return s, nil
}

// Raft returns the storage raft reads from.
func (s *Storage) Raft() *raft.MemoryStorage { return s.mem }

// Fresh reports whether the directory held no state at all when opened (the
// node must be bootstrapped or join).
func (s *Storage) Fresh() bool { return s.fresh }

// Report says what Open found and repaired.
func (s *Storage) Report() OpenReport { return s.report }

// Update is one batch of state for Save: raft's HardState (zero if
// unchanged), entries to append (overwriting any at the same or higher
// indexes) and a snapshot received from the leader (nil if none).
type Update struct {
	HardState raftpb.HardState
	Entries   []raftpb.Entry
	Snapshot  *raftpb.Snapshot
}

// Save makes updates durable and then visible to raft, in the order the
// Ready contract requires: snapshot files first, then one log record
// holding every update and one fdatasync for it (group commit), then the
// in-memory storage. When Save returns nil after a sync, messages
// that depend on these updates may be sent. Without sync (raft needs no
// durability: only the commit index changed) nothing is written: that
// commit index reaches the disk only with the next synced Save that
// carries a hard state (a term or vote change, or a commit index change
// that comes with entries), so after a restart the on-disk commit index
// may lag. That is safe: raft relearns it from the leader, and nothing is
// delivered twice (delivery starts after the consumer's proven prefix).
// Entries and snapshots are always synced.
func (s *Storage) Save(sync bool, ups ...Update) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var states []pendingState
	for i := range ups {
		u := &ups[i]
		if u.Snapshot != nil && !raft.IsEmptySnap(*u.Snapshot) {
			if err := saveSnap(filepath.Join(s.dir, "snap"), *u.Snapshot, s.opts.NoSync); err != nil {
				return fmt.Errorf("storage: save snapshot: %w", err)
			}
			sync = true
		}
		if len(u.Entries) > 0 {
			sync = true
		}
		var hsp *raftpb.HardState
		if !raft.IsEmptyHardState(u.HardState) {
			hsp = &u.HardState
		}
		if hsp != nil || len(u.Entries) > 0 {
			states = append(states, pendingState{hs: hsp, ents: u.Entries})
		}
	}
	// Without sync only the commit index changed: it is kept in memory
	// (see above), so every record on disk was followed by an fsync and
	// only the last one can be torn.
	if len(states) > 0 && sync {
		if err := s.wal.write(states); err != nil {
			return fmt.Errorf("storage: %w", err)
		}
		if err := s.wal.sync(s.wal.f); err != nil {
			return fmt.Errorf("storage: wal sync: %w", err)
		}
	}
	for i := range ups {
		u := &ups[i]
		if !raft.IsEmptyHardState(u.HardState) {
			s.hs = u.HardState
			if err := s.mem.SetHardState(u.HardState); err != nil {
				return fmt.Errorf("storage: %w", err)
			}
		}
		if u.Snapshot != nil && !raft.IsEmptySnap(*u.Snapshot) {
			if err := s.mem.ApplySnapshot(*u.Snapshot); err != nil {
				return fmt.Errorf("storage: %w", err)
			}
			if err := s.rollAndDrop(u.Snapshot.Metadata.Index); err != nil {
				return err
			}
		}
		if len(u.Entries) > 0 {
			if err := s.mem.Append(u.Entries); err != nil {
				return fmt.Errorf("storage: %w", err)
			}
		}
	}
	if s.wal.size >= s.opts.SegmentBytes {
		last := s.wal.segs[len(s.wal.segs)-1].seq
		if err := s.wal.newSegment(last+1, &s.hs); err != nil {
			return fmt.Errorf("storage: %w", err)
		}
	}
	return nil
}

// CreateSnapshot durably records a snapshot at index (which must be applied
// and above the current snapshot) with the configuration cs and the
// consumer's data. It does not compact the log; raft serves it to followers
// that need entries below the first retained index.
func (s *Storage) CreateSnapshot(index uint64, cs *raftpb.ConfState, data []byte) (raftpb.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	snap, err := s.mem.CreateSnapshot(index, cs, data)
	if err != nil {
		return raftpb.Snapshot{}, fmt.Errorf("storage: %w", err)
	}
	if err := saveSnap(filepath.Join(s.dir, "snap"), snap, s.opts.NoSync); err != nil {
		return raftpb.Snapshot{}, fmt.Errorf("storage: save snapshot: %w", err)
	}
	if err := pruneSnaps(filepath.Join(s.dir, "snap"), 2); err != nil {
		return raftpb.Snapshot{}, fmt.Errorf("storage: %w", err)
	}
	return snap, nil
}

// Compact discards the log up to index, in memory and on disk (every sealed
// segment that holds nothing after index). A durable snapshot at index or
// later must exist (CreateSnapshot).
func (s *Storage) Compact(index uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	snap, err := s.mem.Snapshot()
	if err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	if snap.Metadata.Index < index {
		return fmt.Errorf("storage: compact to %d beyond the snapshot at %d", index, snap.Metadata.Index)
	}
	if err := s.mem.Compact(index); err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	return s.rollAndDrop(index)
}

// rollAndDrop starts a new segment (so the current one can be dropped once
// covered) and removes segments and snapshot files made redundant by a
// durable snapshot at index.
func (s *Storage) rollAndDrop(index uint64) error {
	cur := s.wal.segs[len(s.wal.segs)-1]
	if cur.maxIndex <= index && s.wal.size > 0 {
		if err := s.wal.newSegment(cur.seq+1, &s.hs); err != nil {
			return fmt.Errorf("storage: %w", err)
		}
	}
	if err := s.wal.dropBefore(index); err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	if err := pruneSnaps(filepath.Join(s.dir, "snap"), 2); err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	return nil
}

// Close flushes and closes the log.
func (s *Storage) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.wal.close()
}
