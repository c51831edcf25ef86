package analysis

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/internal/catalog"
	"github.com/ordo-db/ordo/internal/txn"
)

// TestGranuleValueIsDecoded: a granule key gives the column's value as a
// row key does, not its encoded form, so a text granule with a space
// names the same partition either way (it was quoted, and refused
// against its own declaration).
func TestGranuleValueIsDecoded(t *testing.T) {
	cat, err := catalog.New(catalog.Description{Tables: []catalog.TableDesc{
		{Schema: "public", Name: "shop", Columns: []catalog.Column{{Name: "region", Type: "text"}, {Name: "id", Type: "int4"}}, PK: []string{"region", "id"}},
	}}, 1)
	require.NoError(t, err)
	tbl := catalog.Name{Schema: "public", Name: "shop"}
	g, ok := granuleValue(cat, tbl, "region", txn.GranuleKey("public", "shop", "region", "north east"))
	require.True(t, ok)
	r, ok := granuleValue(cat, tbl, "region", txn.RowKey("public", "shop", "north east", "7"))
	require.True(t, ok)
	require.Equal(t, "north east", g)
	require.Equal(t, r, g)
}
