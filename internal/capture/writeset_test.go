package capture

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/internal/txn"
)

func TestUniqueKeys(t *testing.T) {
	tbl := &Table{Schema: "public", Name: "u", KeyColumns: []int{0},
		Columns: []Column{{Name: "id", Key: true}, {Name: "email"}, {Name: "a"}, {Name: "b"}},
		Uniques: []Unique{
			{Name: "u_email_key", Columns: []int{1}},
			{Name: "u_a_b_key", Columns: []int{2, 3}, NullsNotDistinct: true},
			{Name: "u_expr", Opaque: true},
		}}
	text := func(s string) Value { return Value{Kind: Text, Text: s} }
	null := Value{Kind: Null}
	keys := func(r Row) []txn.Key {
		r.Table = tbl
		ws := &WriteSet{Rows: []Row{r}}
		var out []txn.Key
		for _, km := range ws.Keys().Sorted() {
			if km.Key.Level == txn.LevelUnique {
				require.Equal(t, txn.X, km.Mode)
				out = append(out, km.Key)
			}
		}
		return out
	}
	email := txn.UniqueKey("public", "u", "u_email_key", "x@y")
	expr := txn.UniqueKey("public", "u", "u_expr")

	got := keys(Row{Op: OpInsert, Key: txn.RowKey("public", "u", "1"), Values: []Value{text("1"), text("x@y"), text("1"), null}})
	require.ElementsMatch(t, []txn.Key{email, txn.UniqueKey("public", "u", "u_a_b_key", "1", `\N`), expr}, got)

	// A NULL in a plain unique index claims nothing; an unchanged TOASTed
	// value is not a new claim.
	got = keys(Row{Op: OpUpdate, Key: txn.RowKey("public", "u", "1"), Values: []Value{text("1"), null, {Kind: Unchanged}, text("2")}})
	require.ElementsMatch(t, []txn.Key{expr}, got)

	// A delete frees values; it claims none.
	require.Empty(t, keys(Row{Op: OpDelete, Key: txn.RowKey("public", "u", "1")}))
}
