package replica

import (
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/ordo-db/ordo/internal/capture"
	"github.com/ordo-db/ordo/internal/txn"
	ordov1 "github.com/ordo-db/ordo/pkg/api/ordo/v1"
)

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
		{Op: capture.OpTruncate, Table: log, Key: txn.TableKey("public", "log"), TruncateGroup: 1, Cascade: true},
	}}
	in := &Txn{GID: ws.GID, Origin: 2, SnapshotSeqno: 41, WriteSet: ws, DDL: []string{"ALTER TABLE acct ADD doc text"}, SearchPath: `"$user", public`,
		Keys: ws.Keys().Sorted()}
	b, err := encodeTxn(in, DBSM)
	require.NoError(t, err)
	var e ordov1.Entry
	require.NoError(t, proto.Unmarshal(b, &e))
	te := e.GetTxn()
	require.NotNil(t, te)
	require.Equal(t, in.Keys, decodeKeys(te))
	require.Equal(t, []string{"ALTER TABLE acct ADD doc text"}, te.Ddl)
	got, err := decodeWriteSet(te)
	require.NoError(t, err)
	require.Len(t, got.Rows, len(ws.Rows))
	for i := range ws.Rows {
		w, g := ws.Rows[i], got.Rows[i]
		require.Equal(t, w.Op, g.Op, "row %d", i)
		require.Equal(t, *w.Table, *g.Table, "row %d", i)
		require.Equal(t, w.Values, g.Values, "row %d", i)
		require.Equal(t, w.OldValues, g.OldValues, "row %d", i)
		require.Equal(t, w.TruncateGroup, g.TruncateGroup, "row %d", i)
		require.Equal(t, w.Cascade, g.Cascade, "row %d", i)
		require.Equal(t, w.Key, g.Key, "row %d", i)
		require.Equal(t, w.OldKey, g.OldKey, "row %d", i)
	}
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
	} {
		_, err := decodeWriteSet(e)
		require.Error(t, err, name)
	}
}
