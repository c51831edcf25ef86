package capture

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The pgoutput messages of protocol version 3 without streaming, named as
// in PostgreSQL's "Logical Replication Message Formats" (protocol docs
// §55.9) and written by src/backend/replication/logical/proto.c. All LSNs
// are byte positions in the WAL; all times are microseconds since
// 2000-01-01 as sent.

// ErrMalformed is returned by Decode for a message that is truncated,
// carries an unknown type byte, or has a field out of range.
var ErrMalformed = errors.New("capture: malformed pgoutput message")

// Message is one decoded pgoutput message: one of the *Msg types below.
type Message interface{ msgType() byte }

// BeginMsg is Begin ('B'): the start of a transaction decoded at commit.
type BeginMsg struct {
	FinalLSN   uint64
	CommitTime int64
	XID        uint32
}

// CommitMsg is Commit ('C').
type CommitMsg struct {
	Flags      uint8
	CommitLSN  uint64
	EndLSN     uint64
	CommitTime int64
}

// BeginPrepareMsg is Begin Prepare ('b'), protocol v3.
type BeginPrepareMsg struct {
	PrepareLSN  uint64
	EndLSN      uint64
	PrepareTime int64
	XID         uint32
	GID         string
}

// PrepareMsg is Prepare ('P'), protocol v3.
type PrepareMsg struct {
	Flags       uint8
	PrepareLSN  uint64
	EndLSN      uint64
	PrepareTime int64
	XID         uint32
	GID         string
}

// CommitPreparedMsg is Commit Prepared ('K'), protocol v3.
type CommitPreparedMsg struct {
	Flags      uint8
	CommitLSN  uint64
	EndLSN     uint64
	CommitTime int64
	XID        uint32
	GID        string
}

// RollbackPreparedMsg is Rollback Prepared ('r'), protocol v3.
type RollbackPreparedMsg struct {
	Flags          uint8
	PrepareEndLSN  uint64
	RollbackEndLSN uint64
	PrepareTime    int64
	RollbackTime   int64
	XID            uint32
	GID            string
}

// OriginMsg is Origin ('O').
type OriginMsg struct {
	CommitLSN uint64
	Name      string
}

// RelationColumn is one column of a Relation message.
type RelationColumn struct {
	Flags   uint8 // 1: part of the replica identity (the primary key by default)
	Name    string
	TypeOID uint32
	TypMod  int32
}

// RelationMsg is Relation ('R').
type RelationMsg struct {
	RelID           uint32
	Namespace       string // "" means pg_catalog
	Name            string
	ReplicaIdentity uint8 // pg_class.relreplident: 'd', 'n', 'f' or 'i'
	Columns         []RelationColumn
}

// TypeMsg is Type ('Y').
type TypeMsg struct {
	OID       uint32
	Namespace string
	Name      string
}

// Tuple column kinds of TupleData.
const (
	KindNull      = 'n'
	KindUnchanged = 'u' // unchanged TOASTed value, not sent
	KindText      = 't'
	KindBinary    = 'b'
)

// TupleColumn is one column of a TupleData. Data aliases the decoded
// buffer; callers that keep it must copy it.
type TupleColumn struct {
	Kind byte
	Data []byte
}

// InsertMsg is Insert ('I').
type InsertMsg struct {
	RelID uint32
	New   []TupleColumn
}

// UpdateMsg is Update ('U'). OldKind is 0 when no old tuple was sent, 'K'
// when Old holds the old key (the key changed), 'O' for a full old row
// (REPLICA IDENTITY FULL).
type UpdateMsg struct {
	RelID   uint32
	OldKind byte
	Old     []TupleColumn
	New     []TupleColumn
}

// DeleteMsg is Delete ('D'); OldKind is 'K' or 'O' as for UpdateMsg.
type DeleteMsg struct {
	RelID   uint32
	OldKind byte
	Old     []TupleColumn
}

// Truncate option flags.
const (
	TruncateCascade         = 1
	TruncateRestartIdentity = 2
)

// TruncateMsg is Truncate ('T').
type TruncateMsg struct {
	Options uint8
	RelIDs  []uint32
}

// LogicalMsg is Message ('M'), a pg_logical_emit_message payload.
type LogicalMsg struct {
	Flags   uint8
	LSN     uint64
	Prefix  string
	Content []byte
}

func (*BeginMsg) msgType() byte            { return 'B' }
func (*CommitMsg) msgType() byte           { return 'C' }
func (*BeginPrepareMsg) msgType() byte     { return 'b' }
func (*PrepareMsg) msgType() byte          { return 'P' }
func (*CommitPreparedMsg) msgType() byte   { return 'K' }
func (*RollbackPreparedMsg) msgType() byte { return 'r' }
func (*OriginMsg) msgType() byte           { return 'O' }
func (*RelationMsg) msgType() byte         { return 'R' }
func (*TypeMsg) msgType() byte             { return 'Y' }
func (*InsertMsg) msgType() byte           { return 'I' }
func (*UpdateMsg) msgType() byte           { return 'U' }
func (*DeleteMsg) msgType() byte           { return 'D' }
func (*TruncateMsg) msgType() byte         { return 'T' }
func (*LogicalMsg) msgType() byte          { return 'M' }

// maxColumns is PostgreSQL's MaxTupleAttributeNumber; a larger column count
// is malformed (and would let a fuzzed length allocate without bound).
const maxColumns = 1664

// Decode decodes one pgoutput message (the payload of an XLogData). The
// stream is not in streaming mode, so no message carries a streamed xid.
// Byte slices in the result alias data. Decode never panics: any truncated
// or inconsistent input yields an error wrapping ErrMalformed.
func Decode(data []byte) (Message, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: empty", ErrMalformed)
	}
	r := reader{buf: data[1:]}
	var m Message
	switch t := data[0]; t {
	case 'B':
		m = &BeginMsg{FinalLSN: r.u64(), CommitTime: r.i64(), XID: r.u32()}
	case 'C':
		m = &CommitMsg{Flags: r.u8(), CommitLSN: r.u64(), EndLSN: r.u64(), CommitTime: r.i64()}
	case 'b':
		m = &BeginPrepareMsg{PrepareLSN: r.u64(), EndLSN: r.u64(), PrepareTime: r.i64(), XID: r.u32(), GID: r.str()}
	case 'P':
		m = &PrepareMsg{Flags: r.u8(), PrepareLSN: r.u64(), EndLSN: r.u64(), PrepareTime: r.i64(), XID: r.u32(), GID: r.str()}
	case 'K':
		m = &CommitPreparedMsg{Flags: r.u8(), CommitLSN: r.u64(), EndLSN: r.u64(), CommitTime: r.i64(), XID: r.u32(), GID: r.str()}
	case 'r':
		m = &RollbackPreparedMsg{Flags: r.u8(), PrepareEndLSN: r.u64(), RollbackEndLSN: r.u64(),
			PrepareTime: r.i64(), RollbackTime: r.i64(), XID: r.u32(), GID: r.str()}
	case 'O':
		m = &OriginMsg{CommitLSN: r.u64(), Name: r.str()}
	case 'Y':
		m = &TypeMsg{OID: r.u32(), Namespace: r.str(), Name: r.str()}
	case 'R':
		rel := &RelationMsg{RelID: r.u32(), Namespace: r.str(), Name: r.str(), ReplicaIdentity: r.u8()}
		n := int(r.u16())
		if n > maxColumns {
			return nil, fmt.Errorf("%w: relation with %d columns", ErrMalformed, n)
		}
		for i := 0; i < n && r.err == nil; i++ {
			rel.Columns = append(rel.Columns, RelationColumn{Flags: r.u8(), Name: r.str(), TypeOID: r.u32(), TypMod: r.i32()})
		}
		m = rel
	case 'I':
		ins := &InsertMsg{RelID: r.u32()}
		if r.u8() != 'N' && r.err == nil {
			return nil, fmt.Errorf("%w: insert without new tuple", ErrMalformed)
		}
		ins.New = r.tuple()
		m = ins
	case 'U':
		up := &UpdateMsg{RelID: r.u32()}
		k := r.u8()
		if k == 'K' || k == 'O' {
			up.OldKind = k
			up.Old = r.tuple()
			k = r.u8()
		}
		if k != 'N' && r.err == nil {
			return nil, fmt.Errorf("%w: update without new tuple (got %q)", ErrMalformed, k)
		}
		up.New = r.tuple()
		m = up
	case 'D':
		del := &DeleteMsg{RelID: r.u32(), OldKind: r.u8()}
		if del.OldKind != 'K' && del.OldKind != 'O' && r.err == nil {
			return nil, fmt.Errorf("%w: delete without old tuple (got %q)", ErrMalformed, del.OldKind)
		}
		del.Old = r.tuple()
		m = del
	case 'T':
		n := r.u32()
		tr := &TruncateMsg{Options: r.u8()}
		if uint64(n)*4 > uint64(len(r.buf)) {
			return nil, fmt.Errorf("%w: truncate of %d relations in %d bytes", ErrMalformed, n, len(r.buf))
		}
		for i := uint32(0); i < n; i++ {
			tr.RelIDs = append(tr.RelIDs, r.u32())
		}
		m = tr
	case 'M':
		lm := &LogicalMsg{Flags: r.u8(), LSN: r.u64(), Prefix: r.str()}
		lm.Content = r.bytes(int(r.u32()))
		m = lm
	default:
		return nil, fmt.Errorf("%w: unknown message type %q", ErrMalformed, t)
	}
	if r.err != nil {
		return nil, fmt.Errorf("%w: %c: %v", ErrMalformed, data[0], r.err)
	}
	if len(r.buf) != 0 {
		return nil, fmt.Errorf("%w: %c: %d trailing bytes", ErrMalformed, data[0], len(r.buf))
	}
	return m, nil
}

// reader consumes big-endian fields; after the first short read every
// further read returns zero and err stays set.
type reader struct {
	buf []byte
	err error
}

var errShort = errors.New("truncated")

func (r *reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.buf) {
		r.err = errShort
		r.buf = nil
		return nil
	}
	b := r.buf[:n:n]
	r.buf = r.buf[n:]
	return b
}

func (r *reader) u8() uint8 {
	if b := r.take(1); b != nil {
		return b[0]
	}
	return 0
}

func (r *reader) u16() uint16 {
	if b := r.take(2); b != nil {
		return binary.BigEndian.Uint16(b)
	}
	return 0
}

func (r *reader) u32() uint32 {
	if b := r.take(4); b != nil {
		return binary.BigEndian.Uint32(b)
	}
	return 0
}

func (r *reader) i32() int32 { return int32(r.u32()) }

func (r *reader) u64() uint64 {
	if b := r.take(8); b != nil {
		return binary.BigEndian.Uint64(b)
	}
	return 0
}

func (r *reader) i64() int64 { return int64(r.u64()) }

func (r *reader) bytes(n int) []byte { return r.take(n) }

// str reads a NUL-terminated string.
func (r *reader) str() string {
	if r.err != nil {
		return ""
	}
	for i, c := range r.buf {
		if c == 0 {
			s := string(r.buf[:i])
			r.buf = r.buf[i+1:]
			return s
		}
	}
	r.err = errors.New("unterminated string")
	r.buf = nil
	return ""
}

// tuple reads a TupleData.
func (r *reader) tuple() []TupleColumn {
	n := int(r.u16())
	if r.err != nil {
		return nil
	}
	if n > maxColumns || n > len(r.buf) {
		r.err = fmt.Errorf("tuple of %d columns in %d bytes", n, len(r.buf))
		return nil
	}
	cols := make([]TupleColumn, n)
	for i := range cols {
		k := r.u8()
		cols[i].Kind = k
		switch k {
		case KindNull, KindUnchanged:
		case KindText, KindBinary:
			cols[i].Data = r.bytes(int(r.u32()))
		default:
			if r.err == nil {
				r.err = fmt.Errorf("column %d: unknown kind %q", i, k)
			}
		}
		if r.err != nil {
			return nil
		}
	}
	return cols
}
