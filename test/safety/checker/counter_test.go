package checker

import "testing"

func TestCheckCounter(t *testing.T) {
	final := func(vals ...int64) map[int]map[int]int64 {
		m := map[int]map[int]int64{}
		for i, v := range vals {
			m[i+1] = map[int]int64{0: v}
		}
		return m
	}
	for _, tc := range []struct {
		name       string
		ok, info   int
		final      map[int]map[int]int64
		returned   []int64
		wantAnomal string
	}{
		{"exact", 5, 0, final(5, 5, 5), []int64{1, 4, 5}, ""},
		{"indeterminate ones committed", 5, 2, final(6, 6, 6), []int64{6, 2}, ""},
		{"lost", 5, 2, final(4, 4, 4), nil, CounterLost},
		{"applied twice", 5, 0, final(6, 6, 6), nil, CounterExtra},
		{"divergent", 5, 1, final(5, 6, 5), nil, CounterDivergent},
		{"a value returned twice", 5, 0, final(5, 5, 5), []int64{3, 2, 3}, CounterReturned},
		{"a value never committed", 5, 0, final(5, 5, 5), []int64{1, 6}, CounterReturned},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := CheckCounter(map[int]int{0: tc.ok}, map[int]int{0: tc.info}, 3, tc.final, map[int][]int64{0: tc.returned})
			got := ""
			if len(res.Anomalies) > 0 {
				got = res.Anomalies[0].Kind
			}
			if got != tc.wantAnomal {
				t.Fatalf("anomalies %v, want %q", res.Anomalies, tc.wantAnomal)
			}
			if res.OK != tc.ok || res.Info != tc.info || res.Failed != 3 {
				t.Fatalf("counts %+v", res)
			}
		})
	}
}
