package checker

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func ddlKinds(r DDLResult) []string {
	var ks []string
	for _, a := range r.Anomalies {
		ks = append(ks, a.Kind)
	}
	return ks
}

func ddlHistory() []DDLOp {
	return []DDLOp{
		{ID: 1, Status: "ok", Inserts: map[string][]int{"main": {1}}, Refused: "vol_1"},
		{ID: 2, Status: "fail", Inserts: map[string][]int{"main": {2}}},
		{ID: 3, Status: "info", Inserts: map[string][]int{"main": {3}}},
		{ID: 4, Status: "ok", Create: "own_1", Inserts: map[string][]int{"own_1": {1, 2}}},
		{ID: 5, Status: "ok", Create: "own_2", Inserts: map[string][]int{"own_2": {1, 2}}},
		{ID: 6, Status: "fail", Create: "own_3", Inserts: map[string][]int{"own_3": {1}}},
		{ID: 7, Status: "ok", Drop: "own_1"},
		{ID: 8, Status: "ok", Create: "own_4"},
		{ID: 9, Status: "info", Drop: "own_4"},
	}
}

func ddlEnd() DDLFinal {
	return DDLFinal{
		Rows:    map[string][]int{"main": {1, 3}, "own_2": {1, 2}},
		Columns: []string{"id integer", "c1 timestamp with time zone"},
	}
}

func TestDDLConsistentHistoryPasses(t *testing.T) {
	r := CheckDDL(ddlHistory(), map[int]DDLFinal{1: ddlEnd(), 2: ddlEnd(), 3: ddlEnd()})
	require.Empty(t, r.Anomalies)
	require.Equal(t, 5, r.OK)
	require.Equal(t, 2, r.Failed)
	require.Equal(t, 2, r.Info)
}

func TestDDLAnomalies(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ops    []DDLOp
		change func(f *DDLFinal)
		want   string
	}{
		{"a node has another column type", nil, func(f *DDLFinal) { f.Columns[1] = "c1 timestamp without time zone" }, DDLFinalDivergent},
		{"acknowledged row lost", nil, func(f *DDLFinal) { f.Rows["main"] = []int{3} }, DDLLostInsert},
		{"failed row present", nil, func(f *DDLFinal) { f.Rows["main"] = []int{1, 2, 3} }, DDLFailedPresent},
		{"acknowledged table lost", nil, func(f *DDLFinal) { delete(f.Rows, "own_2") }, DDLLostTable},
		{"dropped table present", nil, func(f *DDLFinal) { f.Rows["own_1"] = []int{1, 2} }, DDLDroppedPresent},
		{"failed table present", nil, func(f *DDLFinal) { f.Rows["own_3"] = []int{1} }, DDLFailedPresent},
		{"refused column present", nil, func(f *DDLFinal) { f.Columns = append(f.Columns, "vol_1 double precision") }, DDLRefusedPresent},
		{"volatile rewrite accepted", []DDLOp{{ID: 10, Status: "ok", NotRefused: "vol_2", Inserts: map[string][]int{"main": {10}}}}, func(f *DDLFinal) {
			f.Rows["main"] = []int{1, 3, 10}
		}, DDLNotRefused},
		{"wrong time zone", nil, func(f *DDLFinal) { f.TimeZone = []string{"ts 4: 2024-06-01 16:00:00-04"} }, DDLTimeZone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := ddlEnd()
			bad.Rows = map[string][]int{"main": {1, 3}, "own_2": {1, 2}}
			bad.Columns = append([]string(nil), bad.Columns...)
			tc.change(&bad)
			r := CheckDDL(append(ddlHistory(), tc.ops...), map[int]DDLFinal{1: ddlEnd(), 2: bad})
			require.Contains(t, ddlKinds(r), tc.want, "%v", r.Anomalies)
			for _, a := range r.Anomalies {
				t.Log(a)
			}
		})
	}
}
