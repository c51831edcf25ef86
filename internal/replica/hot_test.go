package replica

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/internal/txn"
)

// TestHotConflicts: the hottest keys and tables of the last minutes,
// hottest first; older minutes drop out; aborts without a key are not
// counted.
func TestHotConflicts(t *testing.T) {
	var h hotTracker
	t0 := time.Date(2026, 11, 24, 10, 0, 30, 0, time.UTC)
	a, b := txn.RowKey("public", "t", "1"), txn.RowKey("public", "t", "2")
	u := txn.TableKey("public", "u")
	h.record(a, t0)
	h.record(a, t0.Add(time.Second))
	h.record(b, t0.Add(2*time.Second))
	h.record(u, t0.Add(time.Minute))
	h.record(txn.Key{}, t0.Add(time.Minute))
	got := h.top(t0.Add(time.Minute))
	require.EqualValues(t, 4, got.Conflicts)
	require.Equal(t, []Hot{{"public.t(1)", 2, 50}, {"public.t(2)", 1, 25}, {"public.u", 1, 25}}, got.Keys)
	require.Equal(t, []Hot{{"public.t", 3, 75}, {"public.u", 1, 25}}, got.Tables)

	// Five minutes on, the first minute is gone.
	got = h.top(t0.Add(5 * time.Minute))
	require.EqualValues(t, 1, got.Conflicts)
	require.Equal(t, []Hot{{"public.u", 1, 100}}, got.Keys)
	// And nothing is kept beyond the window, however long it runs.
	for i := 0; i < 100; i++ {
		h.record(a, t0.Add(time.Duration(10+i)*time.Minute))
	}
	require.Len(t, h.minutes, hotBuckets)
}
