package checker

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func lfRead(id, node int, keys []int, seen ...int) RegisterRead {
	m := map[int]int{}
	for _, k := range seen {
		m[k] = 10 * k
	}
	return RegisterRead{ID: id, Node: node, Keys: keys, Seen: m}
}

func lfWrite(id int, status string, k int) RegisterWrite {
	return RegisterWrite{ID: id, Status: status, K: k, V: 10 * k}
}

func lfFinal(keys ...int) map[int]int {
	m := map[int]int{}
	for _, k := range keys {
		m[k] = 10 * k
	}
	return m
}

func lfKinds(r LongForkResult) []string {
	var ks []string
	for _, a := range r.Anomalies {
		ks = append(ks, a.Kind)
	}
	return ks
}

func TestLongForkNestedReadsPass(t *testing.T) {
	g := []int{0, 1, 2, 3}
	writes := []RegisterWrite{lfWrite(1, "ok", 0), lfWrite(2, "ok", 1), lfWrite(3, "info", 2), lfWrite(4, "fail", 3)}
	reads := []RegisterRead{
		lfRead(5, 1, g),
		lfRead(6, 2, g, 1),
		lfRead(7, 3, g, 0, 1),
		lfRead(8, 1, g, 0, 1),
		lfRead(9, 2, g, 0, 1, 2), // the info write committed
	}
	end := lfFinal(0, 1, 2)
	r := CheckLongFork(writes, reads, map[int]map[int]int{1: end, 2: end, 3: end})
	require.Empty(t, r.Anomalies)
	require.Equal(t, 5, r.Reads)
	require.Equal(t, 1, r.Groups)
}

func TestLongForkAnomalies(t *testing.T) {
	g := []int{0, 1, 2, 3}
	ok := []RegisterWrite{lfWrite(1, "ok", 0), lfWrite(2, "ok", 1)}
	all := map[int]map[int]int{1: lfFinal(0, 1), 2: lfFinal(0, 1)}
	for _, tc := range []struct {
		name   string
		writes []RegisterWrite
		reads  []RegisterRead
		final  map[int]map[int]int
		want   string
	}{
		{"long fork: node 1 saw register 0 first, node 2 register 1", ok, []RegisterRead{
			lfRead(3, 1, g, 0),
			lfRead(4, 2, g, 1),
			lfRead(5, 3, g, 0, 1),
		}, all, LongFork},
		{"long fork among larger reads", append(ok, lfWrite(3, "ok", 2), lfWrite(4, "ok", 3)), []RegisterRead{
			lfRead(5, 1, g, 0, 1, 2),
			lfRead(6, 2, g, 0, 1, 3),
		}, map[int]map[int]int{1: lfFinal(0, 1, 2, 3)}, LongFork},
		{"aborted read", append(ok, lfWrite(3, "fail", 2)), []RegisterRead{
			lfRead(4, 1, g, 0, 2),
		}, all, LongForkAbortedRead},
		{"garbage read", ok, []RegisterRead{
			{ID: 3, Node: 1, Keys: g, Seen: map[int]int{0: 7}},
		}, all, LongForkGarbage},
		{"lost write", ok, nil, map[int]map[int]int{1: lfFinal(0, 1), 2: lfFinal(0)}, LongForkLost},
		{"failed write present", append(ok, lfWrite(3, "fail", 2)), nil, map[int]map[int]int{1: lfFinal(0, 1, 2)}, LongForkFailedPresent},
		{"indeterminate write on one node only", append(ok, lfWrite(3, "info", 2)), nil, map[int]map[int]int{1: lfFinal(0, 1, 2), 2: lfFinal(0, 1)}, LongForkFinalDivergent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := CheckLongFork(tc.writes, tc.reads, tc.final)
			require.Contains(t, lfKinds(r), tc.want, "%v", r.Anomalies)
			for _, a := range r.Anomalies {
				t.Log(a)
			}
		})
	}
}

// TestLongForkGroupsAreSeparate: reads of different groups are never
// compared, and a fork is counted once per pair.
func TestLongForkGroupsAreSeparate(t *testing.T) {
	writes := []RegisterWrite{lfWrite(1, "ok", 0), lfWrite(2, "ok", 1), lfWrite(3, "ok", 4), lfWrite(4, "ok", 5)}
	reads := []RegisterRead{
		lfRead(5, 1, []int{0, 1, 2, 3}, 0),
		lfRead(6, 1, []int{4, 5, 6, 7}, 5),
		lfRead(7, 2, []int{0, 1, 2, 3}, 1),
		lfRead(8, 3, []int{0, 1, 2, 3}, 1),
	}
	r := CheckLongFork(writes, reads, nil)
	require.Equal(t, []string{LongFork}, lfKinds(r), "%v", r.Anomalies)
	require.Equal(t, 2, r.Forks, "T5 against T7 and T8")
	require.Equal(t, 2, r.Groups)
}
