package replica

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/ordo-db/ordo/internal/capture"
	"github.com/ordo-db/ordo/internal/txn"
	ordov1 "github.com/ordo-db/ordo/pkg/api/ordo/v1"
)

// encodeAll returns every payload of t, the TxnEntry last.
func encodeAll(t *Txn, protocol string, maxEntry int) ([][]byte, error) {
	var out [][]byte
	final, err := encodeTxn(t, protocol, maxEntry, func(b []byte) error { out = append(out, b); return nil })
	if err != nil {
		return nil, err
	}
	return append(out, final), nil
}

func TestTxnEntryRoundTrip(t *testing.T) {
	acct := &capture.Table{Schema: "public", Name: "acct",
		Columns: []capture.Column{{Name: "id", TypeOID: 23, Key: true}, {Name: "bal", TypeOID: 20}, {Name: "doc", TypeOID: 25}}, KeyColumns: []int{0}}
	log := &capture.Table{Schema: "public", Name: "log", Columns: []capture.Column{{Name: "line", TypeOID: 25}}}
	ws := &capture.WriteSet{GID: "ordo_2_7", Rows: []capture.Row{
		{Op: capture.OpInsert, Table: acct, Key: txn.RowKey("public", "acct", "1"),
			Values: []capture.Value{{Kind: capture.Text, Text: "1"}, {Kind: capture.Null}, {Kind: capture.Text, Text: "x"}}},
		{Op: capture.OpUpdate, Table: acct, Key: txn.RowKey("public", "acct", "3"), OldKey: txn.RowKey("public", "acct", "2"), OldValues: []string{"2"},
			Values: []capture.Value{{Kind: capture.Text, Text: "3"}, {Kind: capture.Text, Text: "5"}, {Kind: capture.Unchanged}}},
		{Op: capture.OpDelete, Table: acct, Key: txn.RowKey("public", "acct", "9"), OldValues: []string{"9"}},
		{Op: capture.OpInsert, Table: log, Values: []capture.Value{{Kind: capture.Text, Text: "no key"}}},
		{Op: capture.OpUpdate, Table: log, Key: capture.FullRowKey(log, []capture.Value{{Kind: capture.Text, Text: "no key"}}),
			OldRow: []capture.Value{{Kind: capture.Text, Text: "no key"}}, Values: []capture.Value{{Kind: capture.Text, Text: "still none"}}},
		{Op: capture.OpDelete, Table: log, Key: capture.FullRowKey(log, []capture.Value{{Kind: capture.Null}}), OldRow: []capture.Value{{Kind: capture.Null}}},
		{Op: capture.OpTruncate, Table: log, Key: txn.TableKey("public", "log"), TruncateGroup: 1, Cascade: true},
	}}
	in := &Txn{GID: ws.GID, Origin: 2, SnapshotSeqno: 41, WriteSet: ws, DDL: []string{"ALTER TABLE acct ADD doc text"}, SearchPath: `"$user", public`,
		Keys: ws.Keys().Sorted(), Serializable: true}
	bs, err := encodeAll(in, DBSM, 1<<20)
	require.NoError(t, err)
	require.Len(t, bs, 1, "a small transaction is one entry")
	var e ordov1.Entry
	require.NoError(t, proto.Unmarshal(bs[0], &e))
	te := e.GetTxn()
	require.NotNil(t, te)
	require.Equal(t, in.Keys, decodeKeys(te))
	require.Equal(t, []string{"ALTER TABLE acct ADD doc text"}, te.Ddl)
	require.True(t, te.Serializable, "the decider certifies its reads by it")
	got, err := decodeWriteSet(te)
	require.NoError(t, err)
	require.Len(t, got.Rows, len(ws.Rows))
	for i := range ws.Rows {
		w, g := ws.Rows[i], got.Rows[i]
		require.Equal(t, w.Op, g.Op, "row %d", i)
		require.Equal(t, *w.Table, *g.Table, "row %d", i)
		require.Equal(t, w.Values, g.Values, "row %d", i)
		require.Equal(t, w.OldValues, g.OldValues, "row %d", i)
		require.Equal(t, w.OldRow, g.OldRow, "row %d", i)
		require.Equal(t, w.TruncateGroup, g.TruncateGroup, "row %d", i)
		require.Equal(t, w.Cascade, g.Cascade, "row %d", i)
		require.Equal(t, w.Key, g.Key, "row %d", i)
		require.Equal(t, w.OldKey, g.OldKey, "row %d", i)
	}
}

// TestLargeTxnSplitsIntoFragments: a write set larger than the entry size
// travels as fragments of at most that size (a row larger than it alone),
// then the TxnEntry with the keys and the last rows; decoding the pieces in
// order gives back every row, with one table description per table.
func TestLargeTxnSplitsIntoFragments(t *testing.T) {
	acct := &capture.Table{Schema: "public", Name: "acct",
		Columns: []capture.Column{{Name: "id", TypeOID: 23, Key: true}, {Name: "pad", TypeOID: 25}}, KeyColumns: []int{0}}
	log := &capture.Table{Schema: "public", Name: "log", Columns: []capture.Column{{Name: "line", TypeOID: 25}}}
	ws := &capture.WriteSet{GID: "ordo_1_9"}
	for i := range 500 {
		id := strconv.Itoa(i)
		ws.Rows = append(ws.Rows, capture.Row{Op: capture.OpInsert, Table: acct, Key: txn.RowKey("public", "acct", id),
			Values: []capture.Value{{Kind: capture.Text, Text: id}, {Kind: capture.Text, Text: strings.Repeat("p", i%50)}}})
		if i%7 == 0 {
			ws.Rows = append(ws.Rows, capture.Row{Op: capture.OpInsert, Table: log, Values: []capture.Value{{Kind: capture.Text, Text: "line " + id}}})
		}
	}
	huge := strings.Repeat("h", 5000) // larger than an entry
	ws.Rows = append(ws.Rows, capture.Row{Op: capture.OpInsert, Table: log, Values: []capture.Value{{Kind: capture.Text, Text: huge}}})
	in := &Txn{GID: ws.GID, Origin: 1, SnapshotSeqno: 3, WriteSet: ws, Keys: ws.Keys().Sorted()}
	const maxEntry = 4000

	bs, err := encodeAll(in, DBSMSI, maxEntry)
	require.NoError(t, err)
	require.Greater(t, len(bs), 5)
	var frags []*ordov1.FragmentEntry
	for i, b := range bs[:len(bs)-1] {
		var e ordov1.Entry
		require.NoError(t, proto.Unmarshal(b, &e))
		f := e.GetFragment()
		require.NotNil(t, f, "payload %d", i)
		require.Equal(t, uint32(i), f.Index)
		require.Equal(t, string(ws.GID), f.Gid)
		if len(f.Rows) > 1 {
			require.LessOrEqual(t, len(b), maxEntry, "fragment %d: %d rows %d tables, proto %d", i, len(f.Rows), len(f.Tables), proto.Size(f))
		}
		frags = append(frags, f)
	}
	var e ordov1.Entry
	require.NoError(t, proto.Unmarshal(bs[len(bs)-1], &e))
	te := e.GetTxn()
	require.NotNil(t, te, "the last payload ends the transaction")
	require.Equal(t, uint32(len(frags)), te.Fragments)
	require.Equal(t, in.Keys, decodeKeys(te))

	got, err := decodeWriteSet(te, frags...)
	require.NoError(t, err)
	require.Len(t, got.Rows, len(ws.Rows))
	tables := map[string]*capture.Table{}
	for i := range ws.Rows {
		w, g := ws.Rows[i], got.Rows[i]
		require.Equal(t, w.Values, g.Values, "row %d", i)
		require.Equal(t, w.Key, g.Key, "row %d", i)
		require.Equal(t, *w.Table, *g.Table, "row %d", i)
		if prev, ok := tables[g.Table.Name]; ok {
			require.Same(t, prev, g.Table, "row %d: one description per table", i)
		}
		tables[g.Table.Name] = g.Table
	}
}

// TestLargeObjectsTravelWithTheirTransaction: the large objects a
// transaction changed travel in its entry, or, when their content does not
// fit, their content travels in chunks in fragments after its rows; either
// way decoding gives back each object's state and stored pieces (a sparse
// object's holes stay holes), with its keys.
func TestLargeObjectsTravelWithTheirTransaction(t *testing.T) {
	log := &capture.Table{Schema: "public", Name: "log", Columns: []capture.Column{{Name: "line", TypeOID: 25}}}
	big := []byte(strings.Repeat("0123456789", 1500)) // 15,000 bytes: several entries
	los := []capture.LargeObject{
		{OID: 16401, Owner: "alice", ACL: "{alice=rw/alice,=r/alice}", HasComment: true, Comment: "a scan", Content: true,
			Pieces: []capture.LargeObjectPiece{{Offset: 0, Data: []byte("small")}}, Size: 5},
		{OID: 16402, Owner: "bob", Content: true, Pieces: []capture.LargeObjectPiece{{Offset: 0, Data: big}, {Offset: 1 << 31, Data: []byte("far")}}, Size: 1<<31 + 3},
		{OID: 16403, Unlinked: true},
		{OID: 16404, Owner: "bob", Content: true, Size: 4096}, // cut at 4096, no data
		{OID: 16405, Owner: "carol"},                          // metadata only
	}
	for _, maxEntry := range []int{1 << 20, 4000} {
		ws := &capture.WriteSet{GID: "ordo_3_1", LargeObjects: los}
		for i := range 40 {
			ws.Rows = append(ws.Rows, capture.Row{Op: capture.OpInsert, Table: log, Values: []capture.Value{{Kind: capture.Text, Text: strings.Repeat("r", i*10)}}})
		}
		in := &Txn{GID: ws.GID, Origin: 3, WriteSet: ws, Keys: ws.Keys().Sorted()}
		bs, err := encodeAll(in, DBSMSI, maxEntry)
		require.NoError(t, err)
		var frags []*ordov1.FragmentEntry
		chunks := 0
		for _, b := range bs[:len(bs)-1] {
			require.LessOrEqual(t, len(b), maxEntry)
			var e ordov1.Entry
			require.NoError(t, proto.Unmarshal(b, &e))
			frags = append(frags, e.GetFragment())
			chunks += len(e.GetFragment().LargeObjectData)
		}
		require.LessOrEqual(t, len(bs[len(bs)-1]), maxEntry)
		var e ordov1.Entry
		require.NoError(t, proto.Unmarshal(bs[len(bs)-1], &e))
		if maxEntry == 1<<20 {
			require.Len(t, bs, 1, "small enough for one entry")
		} else {
			require.GreaterOrEqual(t, chunks, 4, "the content travels in chunks")
		}
		got, err := decodeWriteSet(e.GetTxn(), frags...)
		require.NoError(t, err)
		require.Len(t, got.Rows, len(ws.Rows))
		require.Len(t, got.LargeObjects, len(los))
		for i := range los {
			w, g := los[i], got.LargeObjects[i]
			require.Equal(t, w.OID, g.OID)
			require.Equal(t, w.Unlinked, g.Unlinked)
			require.Equal(t, w.Owner, g.Owner)
			require.Equal(t, w.ACL, g.ACL)
			require.Equal(t, w.HasComment, g.HasComment)
			require.Equal(t, w.Comment, g.Comment)
			require.Equal(t, w.Content, g.Content)
			require.Equal(t, w.Size, g.Size)
			require.Equal(t, len(w.Pieces), len(g.Pieces), "object %d, max entry %d", w.OID, maxEntry)
			for k := range w.Pieces {
				require.Equal(t, w.Pieces[k].Offset, g.Pieces[k].Offset)
				require.Equal(t, string(w.Pieces[k].Data), string(g.Pieces[k].Data), "object %d piece %d, max entry %d", w.OID, k, maxEntry)
			}
		}
		keys := decodeKeys(e.GetTxn())
		require.Contains(t, keys, txn.KeyMode{Key: capture.LargeObjectKey(16403), Mode: txn.X})
		require.Contains(t, keys, txn.KeyMode{Key: capture.LargeObjectsTable(), Mode: txn.IX})
	}
	// Pieces out of order, of an object the entry does not name, or of
	// one whose content it did not write.
	te := &ordov1.TxnEntry{Gid: "g", LargeObjects: []*ordov1.LargeObject{{Oid: 1, Content: true}, {Oid: 3}},
		LargeObjectData: []*ordov1.LargeObjectData{{Oid: 1, Offset: 3, Data: []byte("d")}}}
	_, err := decodeWriteSet(te, &ordov1.FragmentEntry{Gid: "g", LargeObjectData: []*ordov1.LargeObjectData{{Oid: 1, Offset: 1, Data: []byte("abc")}}})
	require.Error(t, err)
	_, err = decodeWriteSet(te, &ordov1.FragmentEntry{Gid: "g", LargeObjectData: []*ordov1.LargeObjectData{{Oid: 2, Data: []byte("abc")}}})
	require.Error(t, err)
	_, err = decodeWriteSet(te, &ordov1.FragmentEntry{Gid: "g", LargeObjectData: []*ordov1.LargeObjectData{{Oid: 3, Data: []byte("abc")}}})
	require.Error(t, err)
	got, err := decodeWriteSet(te, &ordov1.FragmentEntry{Gid: "g", LargeObjectData: []*ordov1.LargeObjectData{{Oid: 1, Data: []byte("abc")}}})
	require.NoError(t, err)
	require.Equal(t, []capture.LargeObjectPiece{{Offset: 0, Data: []byte("abcd")}}, got.LargeObjects[0].Pieces)
}

func TestDecodeRejectsMalformedEntries(t *testing.T) {
	for name, e := range map[string]*ordov1.TxnEntry{
		"table out of range": {Gid: "g", Rows: []*ordov1.RowChange{{Op: 1, Table: 3}}},
		"values mismatch":    {Gid: "g", Tables: []*ordov1.Table{{Name: "t", Columns: []string{"a"}, TypeOids: []uint32{23}, KeyColumns: []uint32{0}}}, Rows: []*ordov1.RowChange{{Op: 1, Values: []*ordov1.Value{{}, {}}}}},
		"key out of range":   {Gid: "g", Tables: []*ordov1.Table{{Name: "t", Columns: []string{"a"}, TypeOids: []uint32{23}, KeyColumns: []uint32{4}}}},
		"delete without key": {Gid: "g", Tables: []*ordov1.Table{{Name: "t", Columns: []string{"a"}, TypeOids: []uint32{23}, KeyColumns: []uint32{0}}}, Rows: []*ordov1.RowChange{{Op: 3}}},
		"unknown op":         {Gid: "g", Tables: []*ordov1.Table{{Name: "t", Columns: []string{"a"}, TypeOids: []uint32{23}, KeyColumns: []uint32{0}}}, Rows: []*ordov1.RowChange{{Op: 9}}},
		"keyless delete":     {Gid: "g", Tables: []*ordov1.Table{{Name: "t", Columns: []string{"a"}, TypeOids: []uint32{23}}}, Rows: []*ordov1.RowChange{{Op: 3, OldKey: []string{"1"}}}},
		"types mismatch":     {Gid: "g", Tables: []*ordov1.Table{{Name: "t", Columns: []string{"a"}}}},
		"old row mismatch":   {Gid: "g", Tables: []*ordov1.Table{{Name: "t", Columns: []string{"a"}, TypeOids: []uint32{23}}}, Rows: []*ordov1.RowChange{{Op: 3, OldRow: []*ordov1.Value{{Kind: 2}, {Kind: 2}}}}},
		"old row unchanged":  {Gid: "g", Tables: []*ordov1.Table{{Name: "t", Columns: []string{"a"}, TypeOids: []uint32{23}}}, Rows: []*ordov1.RowChange{{Op: 3, OldRow: []*ordov1.Value{{Kind: 3}}}}},
		"keyless update":     {Gid: "g", Tables: []*ordov1.Table{{Name: "t", Columns: []string{"a"}, TypeOids: []uint32{23}}}, Rows: []*ordov1.RowChange{{Op: 2, OldRow: []*ordov1.Value{{Kind: 2}}}}},
	} {
		_, err := decodeWriteSet(e)
		require.Error(t, err, name)
	}
}

// TestEntriesFromANewerVersionAreRecognised: a kind of entry or a field
// this version does not know is detected (the delivery loop then stops
// rather than carry out part of what the entry means).
func TestEntriesFromANewerVersionAreRecognised(t *testing.T) {
	known, err := proto.Marshal(&ordov1.Entry{Kind: &ordov1.Entry_Txn{Txn: &ordov1.TxnEntry{Gid: "ordo_1_1"}}})
	require.NoError(t, err)
	decode := func(b []byte) *ordov1.Entry {
		var e ordov1.Entry
		require.NoError(t, proto.Unmarshal(b, &e))
		return &e
	}
	require.False(t, fromNewerVersion(decode(known)))
	newKind := protowire.AppendTag(nil, 99, protowire.BytesType)
	newKind = protowire.AppendBytes(newKind, []byte{})
	require.True(t, fromNewerVersion(decode(newKind)), "an unknown kind")
	inner := protowire.AppendTag(nil, 1, protowire.BytesType)
	inner = protowire.AppendString(inner, "ordo_1_1")
	inner = protowire.AppendTag(inner, 77, protowire.VarintType)
	inner = protowire.AppendVarint(inner, 3)
	newField := protowire.AppendTag(nil, 1, protowire.BytesType)
	newField = protowire.AppendBytes(newField, inner)
	require.True(t, fromNewerVersion(decode(newField)), "an unknown field of a TxnEntry")

	deep := &ordov1.Entry{Kind: &ordov1.Entry_Txn{Txn: &ordov1.TxnEntry{Gid: "ordo_1_1",
		Keys: []*ordov1.Key{{Level: 3, Schema: "s", Table: "t", Value: "1", Mode: uint32(txn.X)}},
		Rows: []*ordov1.RowChange{{Op: 1, Values: []*ordov1.Value{{Kind: 2, Text: "1"}}}}}}}
	require.False(t, fromNewerVersion(deep))
	deep.GetTxn().Rows[0].Values[0].ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 9, protowire.VarintType), 1))
	require.True(t, fromNewerVersion(deep), "an unknown field of a value inside a row")
	deep.GetTxn().Rows[0].Values[0].ProtoReflect().SetUnknown(nil)
	deep.GetTxn().Keys[0].Mode = 1 << 6
	require.True(t, fromNewerVersion(deep), "a key mode this version does not know")
	deep.GetTxn().Keys[0].Mode = uint32(txn.X)
	deep.GetTxn().KeyRuns = []*ordov1.KeyRun{{Level: 3, Schema: "s", Table: "t", Column: "id", Values: []string{"1", "2"}, Mode: uint32(txn.S)}}
	require.False(t, fromNewerVersion(deep))
	deep.GetTxn().KeyRuns[0].Mode = 1 << 6
	require.True(t, fromNewerVersion(deep), "a key mode this version does not know, in a run")
	deep.GetTxn().KeyRuns[0].Mode = uint32(txn.S)
	deep.GetTxn().KeyRuns[0].ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 9, protowire.VarintType), 1))
	require.True(t, fromNewerVersion(deep), "an unknown field of a key run")
	deep.GetTxn().KeyRuns = nil
	deep.GetTxn().Rows[0].Values[0].Kind = 4
	require.True(t, fromNewerVersion(deep), "a value kind this version does not know")
	deep.GetTxn().Rows[0].Values[0].Kind = 2
	deep.GetTxn().Rows[0].Op = 5
	require.True(t, fromNewerVersion(deep), "a row operation this version does not know")

	notify := &ordov1.Entry{Kind: &ordov1.Entry_Notify{Notify: &ordov1.NotifyEntry{Origin: 1,
		Notify: []*ordov1.Notification{{Channel: "jobs", Payload: "1"}}}}}
	require.False(t, fromNewerVersion(notify))
	notify.GetNotify().Notify[0].ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 9, protowire.VarintType), 1))
	require.True(t, fromNewerVersion(notify), "an unknown field of a notification")
}

// TestDDLRowsBeforeRoundTrip: where each DDL statement ran among the rows
// travels with the entry, and a position the rows cannot hold is refused.
func TestDDLRowsBeforeRoundTrip(t *testing.T) {
	e := &ordov1.TxnEntry{Gid: "g", Ddl: []string{"a", "b", "c"}, DdlRowsBefore: encodeRowsBefore([]int{0, 2, 2})}
	at, err := decodeRowsBefore(e, 2)
	if err != nil || !slices.Equal(at, []int{0, 2, 2}) {
		t.Fatalf("decoded %v, %v", at, err)
	}
	if at, err := decodeRowsBefore(&ordov1.TxnEntry{Gid: "g", Ddl: []string{"a"}}, 5); err != nil || at != nil {
		t.Fatalf("an entry without positions: %v, %v (want every statement first)", at, err)
	}
	for _, bad := range [][]uint64{{0, 1}, {0, 3, 3}, {2, 1, 2}} {
		if _, err := decodeRowsBefore(&ordov1.TxnEntry{Gid: "g", Ddl: []string{"a", "b", "c"}, DdlRowsBefore: bad}, 2); err == nil {
			t.Errorf("positions %v for 3 statements among 2 rows accepted", bad)
		}
	}
}

// TestKeysTravelInRuns: a transaction's keys travel in runs of one column
// (a range read's keys in one run, with the names once) and come back as
// they went, in order; keys of an entry written before runs (the keys
// field) come first.
func TestKeysTravelInRuns(t *testing.T) {
	row := func(table, column, value string, m txn.Mode) txn.KeyMode {
		return txn.KeyMode{Key: txn.Key{Level: txn.LevelRow, Schema: "public", Table: table, Column: column, Value: value}, Mode: m}
	}
	var keys []txn.KeyMode
	for id := 100; id < 200; id++ {
		keys = append(keys, row("a", "id", strconv.Itoa(id), txn.S))
	}
	keys = append(keys, row("a", "id", "250", txn.X), row("a", "id", "251", txn.X|txn.S),
		row("a", "k", "x", txn.S), row("b", "id", "1", txn.S),
		txn.KeyMode{Key: txn.Key{Level: txn.LevelTable, Schema: "public", Table: "c"}, Mode: txn.IX},
		txn.KeyMode{Key: txn.Key{Level: txn.LevelTable, Schema: "public", Table: "d"}, Mode: txn.IX})
	runs := encodeKeys(keys)
	require.Len(t, runs, 7, "runs: one per table, column and mode")
	require.Len(t, runs[0].Values, 100)
	te := &ordov1.TxnEntry{KeyRuns: runs}
	require.Equal(t, keys, decodeKeys(te))

	old := &ordov1.Key{Level: uint32(txn.LevelRow), Schema: "public", Table: "z", Column: "id", Value: "9", Mode: uint32(txn.X)}
	te.Keys = []*ordov1.Key{old}
	got := decodeKeys(te)
	require.Equal(t, row("z", "id", "9", txn.X), got[0])
	require.Equal(t, keys, got[1:])

	// On the wire: a hundred keys of a range cost their values, not their names.
	many, err := proto.Marshal(&ordov1.TxnEntry{KeyRuns: runs[:1]})
	require.NoError(t, err)
	require.Less(t, len(many), 100*6, "100 keys of one column in %d bytes", len(many))
}
