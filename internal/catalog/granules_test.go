package catalog

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestUsableGranules: a granule column is given only to a table that has
// it in its primary key, or has no primary key (its old rows are logged
// whole): otherwise an update could move a row to another granule unseen.
func TestUsableGranules(t *testing.T) {
	l := NewLoader(nil, nil)
	l.SetGranules(map[string]string{"public.a": "w", "public.b": "w", "public.c": "w", "public.gone": "w", "public.d": "nosuch"}, 3)
	got := l.usableGranules([]TableDesc{
		{Schema: "public", Name: "a", Columns: []Column{{Name: "w"}, {Name: "id"}}, PK: []string{"w", "id"}},
		{Schema: "public", Name: "b", Columns: []Column{{Name: "w"}, {Name: "id"}}, PK: []string{"id"}},
		{Schema: "public", Name: "c", Columns: []Column{{Name: "w"}}},
		{Schema: "public", Name: "d", Columns: []Column{{Name: "w"}}},
	})
	require.Equal(t, map[string]string{"public.a": "w", "public.c": "w"}, got)
}
