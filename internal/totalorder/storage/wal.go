package storage

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"go.etcd.io/raft/v3/raftpb"
)

// Record framing (all integers little endian):
//
//	offset 0  uint32  payload length n
//	offset 4  uint32  CRC-32C of bytes 0..3 (protects the length)
//	offset 8  uint32  CRC-32C of the payload
//	offset 12 n bytes payload
//
// The payload of every record is a uvarint count and that many states (see
// encodeState): each an optional HardState and a run of entries. A record
// is everything one Save makes durable with one fsync.
const headerSize = 12

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// maxRecord bounds a record's declared length so a damaged length cannot make
// the reader allocate gigabytes.
const maxRecord = 1 << 30

const segSuffix = ".wal"

// segment is one file of the log.
type segment struct {
	seq      uint64 // file sequence number
	path     string
	maxIndex uint64 // largest entry index written to the segment (0 if none)
}

// wal is an append-only, segmented, fsynced log of state records.
// It is owned by one goroutine (the caller of Storage.Save).
type wal struct {
	dir      string
	segs     []segment // in order; the last one is open for append
	f        *os.File
	size     int64
	segLimit int64
	noSync   bool
	buf      []byte
}

// stateRecord is the decoded payload of one record.
type stateRecord struct {
	hs      raftpb.HardState
	hasHS   bool
	entries []raftpb.Entry
}

func encodeState(dst []byte, hs *raftpb.HardState, ents []raftpb.Entry) ([]byte, error) {
	if hs != nil {
		b, err := hs.Marshal()
		if err != nil {
			return nil, err
		}
		dst = append(dst, 1)
		dst = binary.AppendUvarint(dst, uint64(len(b)))
		dst = append(dst, b...)
	} else {
		dst = append(dst, 0)
	}
	dst = binary.AppendUvarint(dst, uint64(len(ents)))
	for i := range ents {
		sz := ents[i].Size()
		dst = binary.AppendUvarint(dst, uint64(sz))
		start := len(dst)
		dst = append(dst, make([]byte, sz)...)
		if _, err := ents[i].MarshalTo(dst[start:]); err != nil {
			return nil, err
		}
	}
	return dst, nil
}

// decodeRecord decodes a record payload: a uvarint count of states, then
// that many states as encodeState writes them.
func decodeRecord(p []byte) ([]stateRecord, error) {
	cnt, k := binary.Uvarint(p)
	if k <= 0 || cnt == 0 || cnt > uint64(len(p)) {
		return nil, fmt.Errorf("%w: bad record (state count)", ErrCorrupt)
	}
	p = p[k:]
	out := make([]stateRecord, 0, cnt)
	for i := uint64(0); i < cnt; i++ {
		r, rest, err := decodeState(p)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
		p = rest
	}
	if len(p) != 0 {
		return nil, fmt.Errorf("%w: bad record (trailing bytes)", ErrCorrupt)
	}
	return out, nil
}

func decodeState(p []byte) (stateRecord, []byte, error) {
	var r stateRecord
	bad := func(what string) (stateRecord, []byte, error) {
		return stateRecord{}, nil, fmt.Errorf("%w: bad state record (%s)", ErrCorrupt, what)
	}
	if len(p) < 1 {
		return bad("empty")
	}
	flag := p[0]
	p = p[1:]
	if flag == 1 {
		n, k := binary.Uvarint(p)
		if k <= 0 || uint64(len(p)-k) < n {
			return bad("hard state length")
		}
		if err := r.hs.Unmarshal(p[k : k+int(n)]); err != nil {
			return bad("hard state")
		}
		r.hasHS = true
		p = p[k+int(n):]
	} else if flag != 0 {
		return bad("flag")
	}
	cnt, k := binary.Uvarint(p)
	if k <= 0 || cnt > uint64(len(p)) {
		return bad("entry count")
	}
	p = p[k:]
	r.entries = make([]raftpb.Entry, 0, cnt)
	for i := uint64(0); i < cnt; i++ {
		n, k := binary.Uvarint(p)
		if k <= 0 || uint64(len(p)-k) < n {
			return bad("entry length")
		}
		var e raftpb.Entry
		if err := e.Unmarshal(p[k : k+int(n)]); err != nil {
			return bad("entry")
		}
		r.entries = append(r.entries, e)
		p = p[k+int(n):]
	}
	return r, p, nil
}

func segName(seq uint64) string { return fmt.Sprintf("%016d%s", seq, segSuffix) }

// listSegments returns the segment files of dir in order.
func listSegments(dir string) ([]segment, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var segs []segment
	for _, de := range des {
		name := de.Name()
		if !strings.HasSuffix(name, segSuffix) {
			continue
		}
		seq, err := strconv.ParseUint(strings.TrimSuffix(name, segSuffix), 10, 64)
		if err != nil {
			continue
		}
		segs = append(segs, segment{seq: seq, path: filepath.Join(dir, name)})
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].seq < segs[j].seq })
	return segs, nil
}

// readSegment decodes every record of a segment file and calls fn for each.
// Segments are preallocated, so a clean segment ends with zeros: reading
// stops at the first all-zero header followed only by zeros. For the last
// segment (repair=true) an invalid tail that can only be the result of one
// interrupted append is reported as torn (see Open); any other invalid
// record is ErrCorrupt. validEnd is the offset after the last good record.
func readSegment(path string, repair bool, fn func(stateRecord) error) (validEnd int64, torn bool, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false, err
	}
	name := filepath.Base(path)
	off := 0
	for off < len(data) {
		rest := data[off:]
		if allZero(rest) {
			return int64(off), false, nil // preallocated, never written
		}
		var bad error
		switch {
		case len(rest) < headerSize:
			// header incompletely written at the very end of the file
		case crc32.Checksum(rest[0:4], castagnoli) != binary.LittleEndian.Uint32(rest[4:8]):
			if !allZero(rest[headerSize:]) {
				bad = fmt.Errorf("%w: %s: record header checksum mismatch at offset %d", ErrCorrupt, name, off)
			} // else: header partly written, nothing after it
		default:
			n := binary.LittleEndian.Uint32(rest[0:4])
			if n > maxRecord {
				return 0, false, fmt.Errorf("%w: %s: record length %d at offset %d", ErrCorrupt, name, n, off)
			}
			if int(n) > len(rest)-headerSize {
				break // payload incompletely written
			}
			payload := rest[headerSize : headerSize+int(n)]
			if crc32.Checksum(payload, castagnoli) != binary.LittleEndian.Uint32(rest[8:12]) {
				if !allZero(rest[headerSize+int(n):]) {
					bad = fmt.Errorf("%w: %s: record checksum mismatch at offset %d", ErrCorrupt, name, off)
				}
				break // else: the last record, payload torn
			}
			recs, err := decodeRecord(payload)
			if err != nil {
				return 0, false, fmt.Errorf("%s at offset %d: %w", name, off, err)
			}
			for _, rec := range recs {
				if err := fn(rec); err != nil {
					return 0, false, err
				}
			}
			off += headerSize + int(n)
			continue
		}
		if bad != nil {
			return 0, false, bad
		}
		if !repair {
			return 0, false, fmt.Errorf("%w: %s: truncated record at offset %d in a sealed segment", ErrCorrupt, name, off)
		}
		return int64(off), true, nil
	}
	return int64(off), false, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// openWAL opens the segment for appending after replay. segs must be the
// (already read) segments; if there is none a first one is created. The last
// segment's bytes after lastSize (a torn tail) are zeroed, then the segment
// is preallocated again.
func openWAL(dir string, segs []segment, lastSize int64, segLimit int64, noSync bool) (*wal, error) {
	w := &wal{dir: dir, segs: segs, segLimit: segLimit, noSync: noSync}
	if len(segs) == 0 {
		if err := w.newSegment(1, nil); err != nil {
			return nil, err
		}
		return w, nil
	}
	last := segs[len(segs)-1]
	f, err := os.OpenFile(last.path, os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	if err := f.Truncate(lastSize); err != nil {
		f.Close()
		return nil, err
	}
	if err := preallocate(f, segLimit); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := f.Seek(lastSize, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	if err := w.sync(f); err != nil {
		f.Close()
		return nil, err
	}
	w.f, w.size = f, lastSize
	return w, nil
}

func (w *wal) sync(f *os.File) error {
	if w.noSync {
		return nil
	}
	injectedSyncDelay()
	return fdatasync(f)
}

// newSegment seals the current segment and starts segment seq, whose first
// record carries hs (so dropping older segments never loses the hard state).
func (w *wal) newSegment(seq uint64, hs *raftpb.HardState) error {
	if w.f != nil {
		if err := w.sync(w.f); err != nil {
			return err
		}
		if err := w.f.Close(); err != nil {
			return err
		}
		w.f = nil
	}
	path := filepath.Join(w.dir, segName(seq))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	w.f, w.size = f, 0
	w.segs = append(w.segs, segment{seq: seq, path: path})
	// Preallocating the segment keeps fdatasync from having to commit a
	// new file size with every record.
	if err := preallocate(f, w.segLimit); err != nil {
		return err
	}
	if err := w.sync(f); err != nil {
		return err
	}
	if err := syncDir(w.dir, w.noSync); err != nil {
		return err
	}
	if hs != nil {
		if err := w.write([]pendingState{{hs: hs}}); err != nil {
			return err
		}
		return w.sync(w.f)
	}
	return nil
}

// pendingState is one state (hard state and/or entries) to write.
type pendingState struct {
	hs   *raftpb.HardState
	ents []raftpb.Entry
}

// write appends one record holding all of states, without syncing it. One
// record per fsync keeps "only the last record can be torn" true.
func (w *wal) write(states []pendingState) error {
	buf := append(w.buf[:0], make([]byte, headerSize)...)
	buf = binary.AppendUvarint(buf, uint64(len(states)))
	var err error
	for _, st := range states {
		if buf, err = encodeState(buf, st.hs, st.ents); err != nil {
			return err
		}
		if len(st.ents) > 0 {
			w.segs[len(w.segs)-1].maxIndex = max(w.segs[len(w.segs)-1].maxIndex, st.ents[len(st.ents)-1].Index)
		}
	}
	n := len(buf) - headerSize
	binary.LittleEndian.PutUint32(buf[0:4], uint32(n))
	binary.LittleEndian.PutUint32(buf[4:8], crc32.Checksum(buf[0:4], castagnoli))
	binary.LittleEndian.PutUint32(buf[8:12], crc32.Checksum(buf[headerSize:], castagnoli))
	if _, err := w.f.Write(buf); err != nil {
		return fmt.Errorf("wal write: %w", err)
	}
	if cap(buf) <= 1<<20 {
		w.buf = buf
	}
	w.size += int64(len(buf))
	return nil
}

// dropBefore removes sealed segments all of whose entries are at or below
// index (they are covered by a durable snapshot).
func (w *wal) dropBefore(index uint64) error {
	keep := w.segs[:0]
	for i, s := range w.segs {
		if i < len(w.segs)-1 && s.maxIndex <= index {
			if err := os.Remove(s.path); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			continue
		}
		keep = append(keep, s)
	}
	w.segs = keep
	return syncDir(w.dir, w.noSync)
}

func (w *wal) close() error {
	if w.f == nil {
		return nil
	}
	err := w.sync(w.f)
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	w.f = nil
	return err
}

func syncDir(dir string, noSync bool) error {
	if noSync {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
