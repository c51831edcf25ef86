package capture

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/internal/txn"
)

// enc builds pgoutput messages byte by byte, as proto.c writes them.
type enc []byte

func msg(t byte) enc             { return enc{t} }
func (e enc) u8(v byte) enc      { return append(e, v) }
func (e enc) u16(v uint16) enc   { return binary.BigEndian.AppendUint16(e, v) }
func (e enc) u32(v uint32) enc   { return binary.BigEndian.AppendUint32(e, v) }
func (e enc) u64(v uint64) enc   { return binary.BigEndian.AppendUint64(e, v) }
func (e enc) str(s string) enc   { return append(append(e, s...), 0) }
func (e enc) text(s string) enc  { return e.u8('t').u32(uint32(len(s))).raw(s) }
func (e enc) raw(s string) enc   { return append(e, s...) }
func (e enc) null() enc          { return e.u8('n') }
func (e enc) unchanged() enc     { return e.u8('u') }
func (e enc) tuple(n uint16) enc { return e.u16(n) }
func (e enc) col(flags byte, name string, oid uint32) enc {
	return e.u8(flags).str(name).u32(oid).u32(0xffffffff)
}

func beginPrepare(xid uint32, gid string) enc {
	return msg('b').u64(0x1000).u64(0x1100).u64(777).u32(xid).str(gid)
}

func prepare(xid uint32, gid string) enc {
	return msg('P').u8(0).u64(0x1000).u64(0x1100).u64(777).u32(xid).str(gid)
}

// relation: public.acct(id int4 key, name text, blob text) and
// public.pair(b int4 key, a int4 key, v text).
func relAcct() enc {
	return msg('R').u32(16400).str("public").str("acct").u8('d').u16(3).
		col(1, "id", 23).col(0, "name", 25).col(0, "blob", 25)
}

func TestDecodeTwoPhaseMessages(t *testing.T) {
	m, err := Decode(beginPrepare(731, "ordo_1_5"))
	require.NoError(t, err)
	require.Equal(t, &BeginPrepareMsg{PrepareLSN: 0x1000, EndLSN: 0x1100, PrepareTime: 777, XID: 731, GID: "ordo_1_5"}, m)

	m, err = Decode(prepare(731, "ordo_1_5"))
	require.NoError(t, err)
	require.Equal(t, &PrepareMsg{PrepareLSN: 0x1000, EndLSN: 0x1100, PrepareTime: 777, XID: 731, GID: "ordo_1_5"}, m)

	m, err = Decode(msg('K').u8(0).u64(0x2000).u64(0x2040).u64(888).u32(731).str("ordo_1_5"))
	require.NoError(t, err)
	require.Equal(t, &CommitPreparedMsg{CommitLSN: 0x2000, EndLSN: 0x2040, CommitTime: 888, XID: 731, GID: "ordo_1_5"}, m)

	m, err = Decode(msg('r').u8(0).u64(0x1100).u64(0x2080).u64(777).u64(999).u32(731).str("ordo_1_5"))
	require.NoError(t, err)
	require.Equal(t, &RollbackPreparedMsg{PrepareEndLSN: 0x1100, RollbackEndLSN: 0x2080, PrepareTime: 777, RollbackTime: 999, XID: 731, GID: "ordo_1_5"}, m)

	m, err = Decode(msg('B').u64(0x3000).u64(5).u32(9))
	require.NoError(t, err)
	require.Equal(t, &BeginMsg{FinalLSN: 0x3000, CommitTime: 5, XID: 9}, m)

	m, err = Decode(msg('C').u8(0).u64(0x3000).u64(0x3010).u64(5))
	require.NoError(t, err)
	require.Equal(t, &CommitMsg{CommitLSN: 0x3000, EndLSN: 0x3010, CommitTime: 5}, m)
}

func TestDecodeRowMessages(t *testing.T) {
	m, err := Decode(relAcct())
	require.NoError(t, err)
	rel := m.(*RelationMsg)
	require.Equal(t, "acct", rel.Name)
	require.Equal(t, []RelationColumn{{1, "id", 23, -1}, {0, "name", 25, -1}, {0, "blob", 25, -1}}, rel.Columns)

	m, err = Decode(msg('U').u32(16400).u8('K').tuple(3).text("1").null().null().u8('N').tuple(3).text("2").text("x").unchanged())
	require.NoError(t, err)
	up := m.(*UpdateMsg)
	require.Equal(t, byte('K'), up.OldKind)
	require.Equal(t, []TupleColumn{{'t', []byte("2")}, {'t', []byte("x")}, {'u', nil}}, up.New)

	m, err = Decode(msg('T').u32(2).u8(TruncateCascade).u32(1).u32(2))
	require.NoError(t, err)
	require.Equal(t, &TruncateMsg{Options: TruncateCascade, RelIDs: []uint32{1, 2}}, m)
}

func TestDecodeMalformed(t *testing.T) {
	valid := []enc{
		beginPrepare(1, "g"), prepare(1, "g"), relAcct(),
		msg('I').u32(16400).u8('N').tuple(3).text("1").text("a").null(),
		msg('D').u32(16400).u8('K').tuple(3).text("1").null().null(),
		msg('T').u32(1).u8(0).u32(16400),
	}
	for _, v := range valid {
		_, err := Decode(v)
		require.NoError(t, err)
		for n := 0; n < len(v); n++ { // every truncation fails cleanly
			_, err := Decode(v[:n])
			require.ErrorIs(t, err, ErrMalformed, "%q cut at %d", v[0], n)
		}
		_, err = Decode(append(v, 0))
		require.ErrorIs(t, err, ErrMalformed, "trailing byte after %q", v[0])
	}
	for _, bad := range []enc{
		msg('Z'),
		msg('I').u32(1).u8('X'),
		msg('I').u32(1).u8('N').tuple(1).u8('q'),
		msg('T').u32(0xffffffff).u8(0),
		msg('R').u32(1).str("s").str("t").u8('d').u16(60000),
	} {
		_, err := Decode(bad)
		require.ErrorIs(t, err, ErrMalformed, "%x", []byte(bad))
	}
}

func feed(t *testing.T, d *Decoder, msgs ...enc) []Event {
	t.Helper()
	var evs []Event
	for _, b := range msgs {
		m, err := Decode(b)
		require.NoError(t, err)
		ev, err := d.Handle(m)
		require.NoError(t, err)
		if ev != nil {
			evs = append(evs, ev)
		}
	}
	return evs
}

func TestDecoderWriteSet(t *testing.T) {
	d := NewDecoder(Limits{}, nil)
	pair := msg('R').u32(16401).str("app").str("pair").u8('d').u16(3).col(1, "a", 23).col(1, "b", 23).col(0, "v", 25)
	evs := feed(t, d, relAcct(), pair, beginPrepare(10, "ordo_1_1"),
		msg('I').u32(16400).u8('N').tuple(3).text("1").text("ann").null(),
		msg('U').u32(16400).u8('N').tuple(3).text("1").text("bob").unchanged(),
		msg('U').u32(16400).u8('K').tuple(3).text("1").null().null().u8('N').tuple(3).text("2").text("bob").unchanged(),
		msg('D').u32(16401).u8('K').tuple(3).text("7").text("x y").null(),
		msg('T').u32(2).u8(TruncateRestartIdentity).u32(16400).u32(16401),
		prepare(10, "ordo_1_1"))
	require.Len(t, evs, 1)
	p := evs[0].(Prepared)
	require.NoError(t, p.Err)
	ws := p.WriteSet
	require.Equal(t, txn.GID("ordo_1_1"), ws.GID)
	require.Equal(t, uint64(0x1100), ws.EndLSN)
	require.Len(t, ws.Rows, 6)

	r := ws.Rows[0]
	require.Equal(t, OpInsert, r.Op)
	require.Equal(t, txn.RowKey("public", "acct", "1"), r.Key)
	require.Equal(t, []Value{{Text, "1"}, {Text, "ann"}, {Null, ""}}, r.Values)

	r = ws.Rows[1]
	require.Equal(t, OpUpdate, r.Op)
	require.Equal(t, Value{Kind: Unchanged}, r.Values[2], "unchanged TOAST must stay marked, never NULL")
	require.Zero(t, r.OldKey.Level)
	require.Equal(t, []string{"1"}, r.KeyValues())

	r = ws.Rows[2]
	require.Equal(t, txn.RowKey("public", "acct", "2"), r.Key)
	require.Equal(t, txn.RowKey("public", "acct", "1"), r.OldKey)
	require.Equal(t, []string{"1"}, r.KeyValues(), "the row to update is found by its old key")

	r = ws.Rows[3]
	require.Equal(t, OpDelete, r.Op)
	require.Equal(t, txn.RowKey("app", "pair", "7", "x y"), r.Key)
	require.Equal(t, "app.pair(7,\"x y\")", r.Key.String())

	require.Equal(t, OpTruncate, ws.Rows[4].Op)
	require.Equal(t, txn.TableKey("public", "acct"), ws.Rows[4].Key)
	require.Equal(t, 1, ws.Rows[5].TruncateGroup)
	require.True(t, ws.Rows[5].RestartIdentity)

	keys := ws.Keys()
	require.Equal(t, txn.X|txn.IX, keys.Mode(txn.TableKey("public", "acct")))
	require.Equal(t, txn.X, keys.Mode(txn.RowKey("public", "acct", "1")))
}

func TestDecoderKeyOrderFromCatalog(t *testing.T) {
	// Primary key (b, a) declared in the other order than the columns.
	d := NewDecoder(Limits{}, func(*RelationMsg) ([]string, error) { return []string{"b", "a"}, nil })
	pair := msg('R').u32(1).str("public").str("pair").u8('d').u16(3).col(1, "a", 23).col(1, "b", 23).col(0, "v", 25)
	evs := feed(t, d, pair, beginPrepare(1, "g"), msg('I').u32(1).u8('N').tuple(3).text("1").text("2").null(), prepare(1, "g"))
	require.Equal(t, txn.RowKey("public", "pair", "2", "1"), evs[0].(Prepared).WriteSet.Rows[0].Key)
}

func TestDecoderPlainCommits(t *testing.T) {
	d := NewDecoder(Limits{}, nil)
	applied := msg('R').u32(2).str("_ordo").str("applied").u8('d').u16(2).col(1, "seqno", 20).col(0, "gid", 25)
	evs := feed(t, d, relAcct(), applied,
		msg('B').u64(1).u64(1).u32(50),
		msg('I').u32(16400).u8('N').tuple(3).text("9").null().null(),
		msg('C').u8(0).u64(1).u64(2).u64(1),
		msg('B').u64(3).u64(1).u32(51),
		msg('I').u32(16400).u8('N').tuple(3).text("8").null().null(),
		msg('I').u32(2).u8('N').tuple(2).text("4").text("ordo_2_1"),
		msg('C').u8(0).u64(3).u64(4).u64(1))
	require.Equal(t, []Event{
		Committed{XID: 50, Rows: 1, EndLSN: 2},
		Committed{XID: 51, Apply: true, Rows: 1, EndLSN: 4},
	}, evs)
}

func TestDecoderLimitsAndNoKey(t *testing.T) {
	d := NewDecoder(Limits{MaxRows: 2}, nil)
	ins := msg('I').u32(16400).u8('N').tuple(3).text("1").null().null()
	evs := feed(t, d, relAcct(), beginPrepare(1, "g1"), ins, ins, ins, prepare(1, "g1"))
	p := evs[0].(Prepared)
	require.ErrorIs(t, p.Err, ErrTooLarge)
	require.Contains(t, p.Err.Error(), "max_rows")
	require.Empty(t, p.WriteSet.Rows)

	d = NewDecoder(Limits{MaxBytes: 200}, nil)
	big := msg('I').u32(16400).u8('N').tuple(3).text("1").text(string(make([]byte, 300))).null()
	evs = feed(t, d, relAcct(), beginPrepare(1, "g2"), big, prepare(1, "g2"))
	require.ErrorIs(t, evs[0].(Prepared).Err, ErrTooLarge)

	d = NewDecoder(Limits{}, nil)
	nokey := msg('R').u32(3).str("public").str("log").u8('d').u16(1).col(0, "line", 25)
	evs = feed(t, d, nokey, beginPrepare(1, "g3"), msg('I').u32(3).u8('N').tuple(1).text("x"), prepare(1, "g3"))
	require.NoError(t, evs[0].(Prepared).Err, "inserts into a table without a primary key are replicated")
	require.Len(t, evs[0].(Prepared).WriteSet.Rows, 1)
	// A delete or update of it carries the whole old row (REPLICA
	// IDENTITY FULL), which keys it.
	evs = feed(t, d, beginPrepare(2, "g4"), msg('D').u32(3).u8('O').tuple(1).text("x"),
		msg('U').u32(3).u8('O').tuple(1).null().u8('N').tuple(1).text("y"), prepare(2, "g4"))
	require.NoError(t, evs[0].(Prepared).Err)
	rows := evs[0].(Prepared).WriteSet.Rows
	require.Len(t, rows, 2)
	tbl := rows[0].Table
	require.Equal(t, []Value{{Kind: Text, Text: "x"}}, rows[0].OldRow)
	require.Equal(t, FullRowKey(tbl, []Value{{Kind: Text, Text: "x"}}), rows[0].Key)
	require.Equal(t, []Value{{Kind: Null}}, rows[1].OldRow)
	require.Equal(t, FullRowKey(tbl, []Value{{Kind: Null}}), rows[1].Key)
	require.NotEqual(t, rows[0].Key, rows[1].Key)
	require.NotEqual(t, FullRowKey(tbl, []Value{{Kind: Text, Text: ""}}), FullRowKey(tbl, []Value{{Kind: Null}}), "NULL is not the empty string")
	// Without it (REPLICA IDENTITY USING INDEX sends the index's columns
	// only), the row cannot be found: the write set fails, naming the
	// table.
	evs = feed(t, d, beginPrepare(3, "g5"), msg('D').u32(3).u8('K').tuple(1).text("x"), prepare(3, "g5"))
	err := evs[0].(Prepared).Err
	require.ErrorIs(t, err, ErrNoPrimaryKey)
	require.Contains(t, err.Error(), "public.log")
	require.Contains(t, err.Error(), "REPLICA IDENTITY FULL")
}

func TestDecoderProtocolErrors(t *testing.T) {
	d := NewDecoder(Limits{}, nil)
	m, _ := Decode(msg('I').u32(16400).u8('N').tuple(3).text("1").null().null())
	_, err := d.Handle(m)
	require.ErrorIs(t, err, ErrProtocol)

	feed(t, d, beginPrepare(1, "g"))
	m, _ = Decode(msg('I').u32(99).u8('N').tuple(1).text("1"))
	_, err = d.Handle(m)
	require.True(t, errors.Is(err, ErrProtocol))
	m, _ = Decode(beginPrepare(2, "h"))
	_, err = d.Handle(m)
	require.ErrorIs(t, err, ErrProtocol)
}

func FuzzDecode(f *testing.F) {
	for _, s := range []enc{
		beginPrepare(1, "ordo_1_1"), prepare(1, "ordo_1_1"), relAcct(),
		msg('U').u32(16400).u8('K').tuple(3).text("1").null().null().u8('N').tuple(3).text("2").text("x").unchanged(),
		msg('T').u32(1).u8(3).u32(16400),
		msg('M').u8(1).u64(5).str("p").u32(2).raw("hi"),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := Decode(data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		// Whatever decodes must also be safe to feed to a decoder.
		d := NewDecoder(Limits{MaxRows: 10, MaxBytes: 1 << 16}, nil)
		for _, pre := range []enc{relAcct(), beginPrepare(1, "g")} {
			pm, _ := Decode(pre)
			_, _ = d.Handle(pm)
		}
		_, _ = d.Handle(m)
	})
}
