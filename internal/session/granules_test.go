package session

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/internal/capture"
	"github.com/ordo-db/ordo/internal/catalog"
	"github.com/ordo-db/ordo/internal/txn"
)

// TestGranuleKeys: every row written in a table with a granule column
// takes IX on its granule, before and after the change; a NULL granule
// takes none; a table without one takes nothing more.
func TestGranuleKeys(t *testing.T) {
	cat, err := catalog.New(catalog.Description{
		Tables: []catalog.TableDesc{
			{Schema: "public", Name: "stock", Columns: []catalog.Column{{Name: "w", Type: "int4"}, {Name: "i", Type: "int4"}, {Name: "q", Type: "int4"}}, PK: []string{"w", "i"}},
			{Schema: "public", Name: "hist", Columns: []catalog.Column{{Name: "w", Type: "int4"}, {Name: "v", Type: "text"}}},
			{Schema: "public", Name: "item", Columns: []catalog.Column{{Name: "i", Type: "int4"}}, PK: []string{"i"}},
		},
		Granules:     map[string]string{"public.stock": "w", "public.hist": "w"},
		GranuleSeqno: 7,
	}, 1)
	require.NoError(t, err)
	require.Equal(t, uint64(7), cat.GranuleSeqno())
	stock := &capture.Table{Schema: "public", Name: "stock", Columns: []capture.Column{{Name: "w"}, {Name: "i"}, {Name: "q"}}, KeyColumns: []int{0, 1}}
	hist := &capture.Table{Schema: "public", Name: "hist", Columns: []capture.Column{{Name: "w"}, {Name: "v"}}}
	item := &capture.Table{Schema: "public", Name: "item", Columns: []capture.Column{{Name: "i"}}, KeyColumns: []int{0}}
	text := func(s string) capture.Value { return capture.Value{Kind: capture.Text, Text: s} }
	ws := &capture.WriteSet{Rows: []capture.Row{
		{Op: capture.OpUpdate, Table: stock, Key: txn.RowKey("public", "stock", "2", "5"), OldKey: txn.RowKey("public", "stock", "1", "5"),
			Values: []capture.Value{text("2"), text("5"), text("9")}, OldValues: []string{"1", "5"}}, // moved from warehouse 1 to 2
		{Op: capture.OpDelete, Table: stock, Key: txn.RowKey("public", "stock", "3", "1"), OldValues: []string{"3", "1"}},
		{Op: capture.OpInsert, Table: hist, Values: []capture.Value{text("4"), text("x")}},
		{Op: capture.OpUpdate, Table: hist, Values: []capture.Value{text("5"), text("y")}, OldRow: []capture.Value{text("6"), text("y")}},
		{Op: capture.OpInsert, Table: hist, Values: []capture.Value{{Kind: capture.Null}, text("z")}},
		{Op: capture.OpInsert, Table: item, Key: txn.RowKey("public", "item", "1"), Values: []capture.Value{text("1")}},
	}}
	var keys txn.KeySet
	granuleKeys(cat, ws, &keys)
	var got []string
	for _, km := range keys.Sorted() {
		got = append(got, km.Mode.String()+" "+km.Key.String())
	}
	require.Equal(t, []string{
		"IX public.hist@w=4", "IX public.hist@w=5", "IX public.hist@w=6",
		"IX public.stock@w=1", "IX public.stock@w=2", "IX public.stock@w=3",
	}, got)
}
