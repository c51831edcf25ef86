package termination

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/internal/txn"
)

func TestGranulesStale(t *testing.T) {
	g := txn.KeyMode{Key: txn.GranuleKey("public", "stock", "w", "1"), Mode: txn.S}
	row := txn.KeyMode{Key: txn.RowKey("public", "stock", "1", "2"), Mode: txn.X}
	for name, tc := range map[string]struct {
		e     Entry
		stale bool
	}{
		"no granules ever":               {Entry{Keys: []txn.KeyMode{row}}, false},
		"same epoch, snapshot after":     {Entry{GranuleSeqno: 10, GranulesInForce: 10, SnapshotSeqno: 12, Keys: []txn.KeyMode{g}}, false},
		"keys of another epoch":          {Entry{GranuleSeqno: 10, GranulesInForce: 20, SnapshotSeqno: 25, Keys: []txn.KeyMode{row}}, true},
		"granule keys, older snapshot":   {Entry{GranuleSeqno: 10, GranulesInForce: 10, SnapshotSeqno: 9, Keys: []txn.KeyMode{row, g}}, true},
		"no granule keys, older snap":    {Entry{GranuleSeqno: 10, GranulesInForce: 10, SnapshotSeqno: 9, Keys: []txn.KeyMode{row}}, false},
		"granule read key at the origin": {Entry{GranuleSeqno: 10, GranulesInForce: 10, SnapshotSeqno: 9, Keys: []txn.KeyMode{row}, Local: &Local{Keys: []txn.KeyMode{g}}}, true},
	} {
		require.Equal(t, tc.stale, tc.e.GranulesStale() != "", name)
	}
}
