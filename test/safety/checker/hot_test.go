package checker

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func incr(id int, status string, k int, wrote int64) HotIncr {
	return HotIncr{ID: id, Status: status, K: k, Wrote: wrote, Read: map[int]int64{k: wrote - 1}}
}

func hotKinds(r HotResult) []string {
	var ks []string
	for _, a := range r.Anomalies {
		ks = append(ks, a.Kind)
	}
	return ks
}

func TestHotSerialHistoryPasses(t *testing.T) {
	incrs := []HotIncr{
		incr(1, "ok", 0, 1),
		incr(2, "fail", 0, 2), // lost the race to T3
		incr(3, "ok", 0, 2),
		incr(4, "info", 0, 3), // committed: counter 0 ends at 3
		incr(5, "info", 1, 1), // did not commit: counter 1 ends at 0
		incr(6, "fail", 1, 0), // failed before its UPDATE
	}
	reads := []HotRead{{ID: 7, Values: map[int]int64{0: 2, 1: 0}}, {ID: 8, Values: map[int]int64{0: 3, 1: 0}}}
	end := map[int]int64{0: 3, 1: 0}
	r := CheckHot(incrs, reads, map[int]map[int]int64{1: end, 2: end, 3: end})
	require.Empty(t, r.Anomalies)
	require.Equal(t, 2, r.OK)
	require.Equal(t, 2, r.Failed)
	require.Equal(t, 2, r.Info)
	require.Equal(t, 1, r.InfoCommitted)
}

func TestHotAnomalies(t *testing.T) {
	end := func(v int64) map[int]map[int]int64 {
		return map[int]map[int]int64{1: {0: v}, 2: {0: v}}
	}
	for _, tc := range []struct {
		name  string
		incrs []HotIncr
		reads []HotRead
		final map[int]map[int]int64
		want  string
	}{
		{"lost update: two acknowledged increments read 0 and wrote 1", []HotIncr{
			incr(1, "ok", 0, 1), incr(2, "ok", 0, 1),
		}, nil, end(1), HotLostUpdate},
		{"lost increment: the counter ends below an acknowledged write", []HotIncr{
			incr(1, "ok", 0, 1), incr(2, "ok", 0, 2),
		}, nil, end(1), HotLostIncrement},
		{"a failed increment took effect", []HotIncr{
			incr(1, "ok", 0, 1), incr(2, "fail", 0, 2),
		}, nil, end(2), HotUnexplained},
		{"more than every increment", []HotIncr{
			incr(1, "ok", 0, 1), incr(2, "info", 0, 2),
		}, nil, end(3), HotUnexplained},
		{"a read above the final value", []HotIncr{
			incr(1, "ok", 0, 1), incr(2, "fail", 0, 2),
		}, []HotRead{{ID: 3, Values: map[int]int64{0: 2}}}, end(1), HotReadRange},
		{"an increment read above the final value", []HotIncr{
			incr(1, "ok", 0, 1), {ID: 2, Status: "ok", K: 1, Wrote: 1, Read: map[int]int64{0: 5, 1: 0}},
		}, nil, map[int]map[int]int64{1: {0: 1, 1: 1}}, HotReadRange},
		{"nodes disagree", []HotIncr{
			incr(1, "ok", 0, 1), incr(2, "info", 0, 2),
		}, nil, map[int]map[int]int64{1: {0: 1}, 2: {0: 2}}, HotFinalDivergent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := CheckHot(tc.incrs, tc.reads, tc.final)
			require.Contains(t, hotKinds(r), tc.want, "%v", r.Anomalies)
			for _, a := range r.Anomalies {
				t.Log(a)
			}
		})
	}
}
