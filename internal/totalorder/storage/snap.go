package storage

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"go.etcd.io/raft/v3/raftpb"
)

const snapSuffix = ".snap"

// snapshot files are named <term>-<index>.snap (16 hex digits each) and hold
// a CRC-32C (4 bytes, little endian) followed by the marshalled raftpb.Snapshot.

func snapName(term, index uint64) string {
	return fmt.Sprintf("%016x-%016x%s", term, index, snapSuffix)
}

// saveSnap writes s durably: temporary file, fsync, rename, fsync directory.
func saveSnap(dir string, s raftpb.Snapshot, noSync bool) error {
	b, err := s.Marshal()
	if err != nil {
		return err
	}
	buf := make([]byte, 4, 4+len(b))
	binary.LittleEndian.PutUint32(buf, crc32.Checksum(b, castagnoli))
	buf = append(buf, b...)
	final := filepath.Join(dir, snapName(s.Metadata.Term, s.Metadata.Index))
	tmp := final + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(buf); err != nil {
		f.Close()
		return err
	}
	if !noSync {
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, final); err != nil {
		return err
	}
	return syncDir(dir, noSync)
}

// snapFiles lists snapshot files, newest (highest index) first.
func snapFiles(dir string) ([]string, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, de := range des {
		if strings.HasSuffix(de.Name(), snapSuffix) && len(de.Name()) == 16+1+16+len(snapSuffix) {
			names = append(names, de.Name())
		}
	}
	// name = term-index; sort by index then term, newest first
	sort.Slice(names, func(i, j int) bool {
		ii, ij := names[i][17:33], names[j][17:33]
		if ii != ij {
			return ii > ij
		}
		return names[i] > names[j]
	})
	return names, nil
}

// loadNewestSnap returns the newest snapshot that passes its checksum.
// Damaged snapshot files are skipped (and reported in skipped); an older
// valid snapshot is used instead, and Open's gap check decides whether the
// log still covers what the damaged one summarised.
func loadNewestSnap(dir string) (snap raftpb.Snapshot, skipped []string, err error) {
	names, err := snapFiles(dir)
	if err != nil {
		return raftpb.Snapshot{}, nil, err
	}
	for _, name := range names {
		if len(name) != 16+1+16+len(snapSuffix) {
			skipped = append(skipped, name)
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return raftpb.Snapshot{}, skipped, err
		}
		if len(b) < 4 || crc32.Checksum(b[4:], castagnoli) != binary.LittleEndian.Uint32(b) {
			skipped = append(skipped, name)
			continue
		}
		var s raftpb.Snapshot
		if err := s.Unmarshal(b[4:]); err != nil {
			skipped = append(skipped, name)
			continue
		}
		return s, skipped, nil
	}
	return raftpb.Snapshot{}, skipped, nil
}

// pruneSnaps keeps the newest keep snapshot files and removes leftover
// temporary files.
func pruneSnaps(dir string, keep int) error {
	names, err := snapFiles(dir)
	if err != nil {
		return err
	}
	for i, name := range names {
		if i >= keep {
			if err := os.Remove(filepath.Join(dir, name)); err != nil {
				return err
			}
		}
	}
	des, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, de := range des {
		if strings.HasSuffix(de.Name(), ".tmp") {
			_ = os.Remove(filepath.Join(dir, de.Name()))
		}
	}
	return nil
}
