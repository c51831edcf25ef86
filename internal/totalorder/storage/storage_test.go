package storage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

// writeLog saves n records, record i holding entry i (term 1) and a hard
// state committing it, and returns the directory.
func writeLog(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		e := raftpb.Entry{Term: 1, Index: uint64(i), Data: []byte(fmt.Sprintf("entry-%03d", i))}
		if err := s.Save(true, Update{HardState: raftpb.HardState{Term: 1, Vote: 1, Commit: uint64(i)}, Entries: []raftpb.Entry{e}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

func lastSegment(t *testing.T, dir string) string {
	t.Helper()
	segs, err := listSegments(filepath.Join(dir, "wal"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("segments: %v %v", segs, err)
	}
	return segs[len(segs)-1].path
}

// recordOffsets returns the start offset of every record in the file.
func recordOffsets(t *testing.T, path string) []int64 {
	t.Helper()
	var offs []int64
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data = data[:validEnd(t, path)]
	off := 0
	for off+headerSize <= len(data) {
		offs = append(offs, int64(off))
		n := int(data[off]) | int(data[off+1])<<8 | int(data[off+2])<<16 | int(data[off+3])<<24
		off += headerSize + n
	}
	return offs
}

func TestCorruptionTable(t *testing.T) {
	const n = 10
	type result struct {
		last    uint64 // last index expected after Open
		torn    bool
		corrupt bool
	}
	cases := []struct {
		name    string
		corrupt func(t *testing.T, path string)
		want    result
	}{
		{"intact", func(*testing.T, string) {}, result{last: n}},
		{"cut inside last payload", func(t *testing.T, p string) {
			must(t, os.Truncate(p, validEnd(t, p)-3))
		}, result{last: n - 1, torn: true}},
		{"cut inside last header", func(t *testing.T, p string) {
			offs := recordOffsets(t, p)
			must(t, os.Truncate(p, offs[len(offs)-1]+5))
		}, result{last: n - 1, torn: true}},
		{"cut at record boundary", func(t *testing.T, p string) {
			offs := recordOffsets(t, p)
			must(t, os.Truncate(p, offs[len(offs)-1]))
		}, result{last: n - 1}},
		{"zeroed tail (allocated, never written)", func(t *testing.T, p string) {
			appendBytes(t, p, make([]byte, 4096))
		}, result{last: n}},
		{"short garbage at the end of the file", func(t *testing.T, p string) {
			must(t, os.Truncate(p, validEnd(t, p)))
			appendBytes(t, p, []byte{0xde, 0xad, 0xbe})
		}, result{last: n, torn: true}},
		{"header partly written, zeros after", func(t *testing.T, p string) {
			writeAt(t, p, validEnd(t, p), []byte{0x20, 0x01, 0, 0, 0x7f})
		}, result{last: n, torn: true}},
		{"payload partly written, zeros after", func(t *testing.T, p string) {
			offs := recordOffsets(t, p)
			last := offs[len(offs)-1]
			data, _ := os.ReadFile(p)
			rec := append([]byte(nil), data[last:validEnd(t, p)]...)
			zero := make([]byte, len(rec)-headerSize-2)
			writeAt(t, p, last+headerSize+2, zero)
		}, result{last: n - 1, torn: true}},
		{"bit flip in last payload", func(t *testing.T, p string) {
			flip(t, p, validEnd(t, p)-2)
		}, result{last: n - 1, torn: true}},
		{"bit flip in middle payload", func(t *testing.T, p string) {
			offs := recordOffsets(t, p)
			flip(t, p, offs[4]+headerSize+3)
		}, result{corrupt: true}},
		{"bit flip in middle length", func(t *testing.T, p string) {
			offs := recordOffsets(t, p)
			flip(t, p, offs[4])
		}, result{corrupt: true}},
		{"bit flip in last length", func(t *testing.T, p string) {
			offs := recordOffsets(t, p)
			flip(t, p, offs[len(offs)-1]+1)
		}, result{corrupt: true}},
		{"garbage record after valid tail", func(t *testing.T, p string) {
			writeAt(t, p, validEnd(t, p), []byte("this is not a record but it is long enough to have a header"))
		}, result{corrupt: true}},
		{"garbage beyond the preallocated zeros", func(t *testing.T, p string) {
			appendBytes(t, p, []byte("stray bytes"))
		}, result{corrupt: true}},
		{"middle record zeroed", func(t *testing.T, p string) {
			offs := recordOffsets(t, p)
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			must(t, err)
			_, err = f.WriteAt(make([]byte, offs[5]-offs[4]), offs[4])
			must(t, err)
			must(t, f.Close())
		}, result{corrupt: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeLog(t, n)
			tc.corrupt(t, lastSegment(t, dir))
			s, err := Open(dir, Options{})
			if tc.want.corrupt {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("Open: got %v, want ErrCorrupt", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer s.Close()
			rep := s.Report()
			if rep.TornTail != tc.want.torn {
				t.Fatalf("TornTail = %v, want %v", rep.TornTail, tc.want.torn)
			}
			checkLog(t, s, tc.want.last)
			// After repair the log accepts appends and reopens cleanly.
			next := tc.want.last + 1
			must(t, s.Save(true, Update{HardState: raftpb.HardState{Term: 1, Vote: 1, Commit: next},
				Entries: []raftpb.Entry{{Term: 1, Index: next, Data: []byte("after-repair")}}}))
			must(t, s.Close())
			s2, err := Open(dir, Options{})
			if err != nil {
				t.Fatalf("reopen after repair: %v", err)
			}
			defer s2.Close()
			if s2.Report().TornTail {
				t.Fatal("torn tail again after repair")
			}
			if li, _ := s2.Raft().LastIndex(); li != next {
				t.Fatalf("last index after repair+append = %d, want %d", li, next)
			}
		})
	}
}

func checkLog(t *testing.T, s *Storage, last uint64) {
	t.Helper()
	li, _ := s.Raft().LastIndex()
	if li != last {
		t.Fatalf("last index %d, want %d", li, last)
	}
	ents, err := s.Raft().Entries(1, last+1, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range ents {
		if want := fmt.Sprintf("entry-%03d", i+1); string(e.Data) != want {
			t.Fatalf("entry %d = %q, want %q", e.Index, e.Data, want)
		}
	}
	hs, _, _ := s.Raft().InitialState()
	if hs.Commit != last {
		t.Fatalf("commit %d, want %d", hs.Commit, last)
	}
}

func TestOverwriteAndSnapshotReplay(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{SegmentBytes: 300})
	must(t, err)
	ent := func(term, idx uint64) raftpb.Entry {
		return raftpb.Entry{Term: term, Index: idx, Data: []byte(fmt.Sprintf("t%d-i%d", term, idx))}
	}
	for i := uint64(1); i <= 20; i++ {
		must(t, s.Save(true, Update{HardState: raftpb.HardState{Term: 1, Commit: i - 1}, Entries: []raftpb.Entry{ent(1, i)}}))
	}
	// a new leader overwrites 15..20 with 15..16 of term 2
	must(t, s.Save(true, Update{HardState: raftpb.HardState{Term: 2, Commit: 14}, Entries: []raftpb.Entry{ent(2, 15), ent(2, 16)}}))
	cs := raftpb.ConfState{Voters: []uint64{1, 2, 3}}
	_, err = s.CreateSnapshot(10, &cs, []byte("consumer"))
	must(t, err)
	must(t, s.Compact(10))
	must(t, s.Close())
	s, err = Open(dir, Options{SegmentBytes: 300})
	must(t, err)
	defer s.Close()
	fi, _ := s.Raft().FirstIndex()
	li, _ := s.Raft().LastIndex()
	if fi != 11 || li != 16 {
		t.Fatalf("log [%d,%d], want [11,16]", fi, li)
	}
	e, _ := s.Raft().Entries(15, 17, 1<<20)
	if string(e[0].Data) != "t2-i15" || string(e[1].Data) != "t2-i16" {
		t.Fatalf("overwritten entries: %q %q", e[0].Data, e[1].Data)
	}
	snap, _ := s.Raft().Snapshot()
	if snap.Metadata.Index != 10 || string(snap.Data) != "consumer" || len(snap.Metadata.ConfState.Voters) != 3 {
		t.Fatalf("snapshot %+v", snap.Metadata)
	}
	segs, _ := listSegments(filepath.Join(dir, "wal"))
	for _, sg := range segs[:len(segs)-1] {
		if sg.maxIndex != 0 && sg.maxIndex <= 10 {
			t.Fatalf("segment %s (max %d) should have been dropped", sg.path, sg.maxIndex)
		}
	}
}

func TestSnapshotDamage(t *testing.T) {
	// the newest snapshot is damaged and the log it covered is gone: gap
	dir := t.TempDir()
	s, err := Open(dir, Options{SegmentBytes: 200})
	must(t, err)
	for i := uint64(1); i <= 30; i++ {
		must(t, s.Save(true, Update{HardState: raftpb.HardState{Term: 1, Commit: i}, Entries: []raftpb.Entry{{Term: 1, Index: i, Data: []byte("xxxxxxxxxxxxxxxxxxxx")}}}))
	}
	cs := raftpb.ConfState{Voters: []uint64{1}}
	_, err = s.CreateSnapshot(25, &cs, nil)
	must(t, err)
	must(t, s.Compact(25))
	must(t, s.Close())
	names, _ := snapFiles(filepath.Join(dir, "snap"))
	flip(t, filepath.Join(dir, "snap", names[0]), 6)
	_, err = Open(dir, Options{})
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open with damaged snapshot and no log below it: %v, want ErrCorrupt", err)
	}
}

func TestReceivedSnapshotSupersedesLog(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	must(t, err)
	for i := uint64(1); i <= 5; i++ {
		must(t, s.Save(true, Update{HardState: raftpb.HardState{Term: 1, Commit: 2}, Entries: []raftpb.Entry{{Term: 1, Index: i}}}))
	}
	snap := raftpb.Snapshot{Metadata: raftpb.SnapshotMetadata{Index: 50, Term: 3, ConfState: raftpb.ConfState{Voters: []uint64{1, 2}}}}
	must(t, s.Save(true, Update{HardState: raftpb.HardState{Term: 3, Commit: 50}, Entries: []raftpb.Entry{{Term: 3, Index: 51}}, Snapshot: &snap}))
	must(t, s.Close())
	s, err = Open(dir, Options{})
	must(t, err)
	defer s.Close()
	fi, _ := s.Raft().FirstIndex()
	li, _ := s.Raft().LastIndex()
	if fi != 51 || li != 51 {
		t.Fatalf("log [%d,%d], want [51,51]", fi, li)
	}
}

// validEnd is the offset after the last record (preallocated zeros follow).
func validEnd(t *testing.T, path string) int64 {
	t.Helper()
	end, _, err := readSegment(path, true, func(stateRecord) error { return nil })
	must(t, err)
	return end
}

func writeAt(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	must(t, err)
	_, err = f.WriteAt(b, off)
	must(t, err)
	must(t, f.Close())
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func appendBytes(t *testing.T, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	must(t, err)
	_, err = f.Write(b)
	must(t, err)
	must(t, f.Close())
}

func flip(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	must(t, err)
	b := make([]byte, 1)
	_, err = f.ReadAt(b, off)
	must(t, err)
	b[0] ^= 0x40
	_, err = f.WriteAt(b, off)
	must(t, err)
	must(t, f.Close())
}

func TestGroupCommitAndUnsyncedCommit(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	must(t, err)
	e := func(term, i uint64) raftpb.Entry {
		return raftpb.Entry{Term: term, Index: i, Data: []byte(fmt.Sprint(term, "/", i))}
	}
	// one Save, three updates, the third overwriting part of the first
	must(t, s.Save(true,
		Update{HardState: raftpb.HardState{Term: 1, Vote: 2}, Entries: []raftpb.Entry{e(1, 1), e(1, 2), e(1, 3)}},
		Update{Entries: []raftpb.Entry{e(1, 4)}},
		Update{HardState: raftpb.HardState{Term: 2, Vote: 3, Commit: 1}, Entries: []raftpb.Entry{e(2, 3)}},
	))
	if offs := recordOffsets(t, lastSegment(t, dir)); len(offs) != 1 {
		t.Fatalf("%d records for one Save, want 1", len(offs))
	}
	// a commit-only change without sync is not written, but raft sees it
	end := validEnd(t, lastSegment(t, dir))
	must(t, s.Save(false, Update{HardState: raftpb.HardState{Term: 2, Vote: 3, Commit: 3}}))
	if validEnd(t, lastSegment(t, dir)) != end {
		t.Fatal("an unsynced commit-only update was written")
	}
	if hs, _, _ := s.Raft().InitialState(); hs.Commit != 3 {
		t.Fatalf("in-memory commit %d, want 3", hs.Commit)
	}
	must(t, s.Close())
	s, err = Open(dir, Options{})
	must(t, err)
	defer s.Close()
	li, _ := s.Raft().LastIndex()
	ents, _ := s.Raft().Entries(1, li+1, 1<<20)
	if len(ents) != 3 || string(ents[2].Data) != "2/3" {
		t.Fatalf("entries after reopen: %v", ents)
	}
	hs, _, _ := s.Raft().InitialState()
	if hs.Term != 2 || hs.Vote != 3 || hs.Commit != 1 {
		t.Fatalf("hard state after reopen %+v, want term 2 vote 3 commit 1 (the last synced)", hs)
	}
}
