package checker

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func ap(k, v int) MOp        { return MOp{F: "append", K: k, V: v} }
func rd(k int, r ...int) MOp { return MOp{F: "r", K: k, R: r} }

func txn(id int, status string, ops ...MOp) Txn { return Txn{ID: id, Status: status, Ops: ops} }

func TestListAppendSerialHistoryPasses(t *testing.T) {
	res := CheckListAppend([]Txn{
		txn(1, "ok", ap(1, 1), ap(2, 1)),
		txn(2, "ok", rd(1, 1), ap(1, 2), rd(1, 1, 2)),
		txn(3, "fail", ap(1, 3)),
		txn(4, "ok", rd(1, 1, 2), rd(2, 1), ap(2, 2)),
		txn(5, "info", ap(2, 3)),
		txn(6, "ok", rd(1, 1, 2), rd(2, 1, 2, 3)),
	})
	require.Empty(t, res.Anomalies)
	require.Equal(t, 5, res.Committed, "the info txn whose append was read counts as committed")
	require.Equal(t, 1, res.InfoCommitted)
	require.Empty(t, res.Forbidden("dbsm"))
}

func TestListAppendAnomalies(t *testing.T) {
	for _, tc := range []struct {
		name    string
		txns    []Txn
		want    string
		allowed bool // under dbsm-si
	}{
		{"G0 write cycle", []Txn{
			txn(1, "ok", ap(1, 1), ap(2, 2)),
			txn(2, "ok", ap(1, 3), ap(2, 4)),
			txn(3, "ok", rd(1, 1, 3), rd(2, 4, 2)),
		}, G0, false},
		{"G1a aborted read", []Txn{
			txn(1, "fail", ap(1, 1)),
			txn(2, "ok", rd(1, 1)),
		}, G1a, false},
		{"G1b intermediate read", []Txn{
			txn(1, "ok", ap(1, 1), ap(1, 2)),
			txn(2, "ok", rd(1, 1)),
			txn(3, "ok", rd(1, 1, 2)),
		}, G1b, false},
		{"G1c circular information flow", []Txn{
			txn(1, "ok", ap(1, 1), rd(2, 2)),
			txn(2, "ok", ap(2, 2), rd(1, 1)),
		}, G1c, false},
		{"G-single read skew", []Txn{
			txn(1, "ok", rd(1), rd(2, 2)),
			txn(2, "ok", ap(1, 1), ap(2, 2)),
			txn(3, "ok", rd(1, 1), rd(2, 2)),
		}, GSingle, false},
		{"G2-item write skew", []Txn{
			txn(1, "ok", rd(1), rd(2), ap(1, 1)),
			txn(2, "ok", rd(1), rd(2), ap(2, 2)),
			txn(3, "ok", rd(1, 1), rd(2, 2)),
		}, G2Item, true},
		{"lost update", []Txn{
			txn(1, "ok", rd(1), ap(1, 1)),
			txn(2, "ok", rd(1), ap(1, 2)),
			txn(3, "ok", rd(1, 1, 2)),
		}, LostUpdate, false},
		{"incompatible order", []Txn{
			txn(1, "ok", ap(1, 1)),
			txn(2, "ok", ap(1, 2)),
			txn(3, "ok", rd(1, 1, 2)),
			txn(4, "ok", rd(1, 2, 1)),
		}, IncompatibleOrder, false},
		{"duplicate", []Txn{
			txn(1, "ok", ap(1, 1)),
			txn(2, "ok", rd(1, 1, 1)),
		}, Duplicate, false},
		{"garbage read", []Txn{
			txn(1, "ok", rd(1, 9)),
		}, GarbageRead, false},
		{"internal", []Txn{
			txn(1, "ok", ap(1, 1), rd(1)),
		}, Internal, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := CheckListAppend(tc.txns)
			require.Contains(t, res.Kinds(), tc.want, "%v", res.Anomalies)
			require.NotEmpty(t, res.Forbidden("dbsm"), "dbsm forbids every anomaly")
			var found bool
			for _, a := range res.Forbidden("dbsm-si") {
				found = found || a.Kind == tc.want
			}
			require.Equal(t, !tc.allowed, found, "dbsm-si: %v", res.Anomalies)
			// READ COMMITTED permits the cycles with anti-dependencies and
			// two appends after reads of one version; nothing else.
			allowedRC := map[string]bool{GSingle: true, G2Item: true, LostUpdate: true}[tc.want]
			found = false
			for _, a := range res.Forbidden("dbsm-rc") {
				found = found || a.Kind == tc.want
			}
			require.Equal(t, !allowedRC, found, "dbsm-rc: %v", res.Anomalies)
			for _, a := range res.Anomalies {
				t.Log(a)
			}
		})
	}
}

func TestLostUpdateIsAlsoGSingle(t *testing.T) {
	res := CheckListAppend([]Txn{
		txn(1, "ok", rd(1), ap(1, 1)),
		txn(2, "ok", rd(1), ap(1, 2)),
		txn(3, "ok", rd(1, 1, 2)),
	})
	require.Equal(t, []string{GSingle, LostUpdate}, res.Kinds())
}

func TestBank(t *testing.T) {
	ok := BankRead{ID: 1, Node: 1, Balances: map[int]int64{0: 50, 1: 150}}
	bad := BankRead{ID: 2, Node: 2, Balances: map[int]int64{0: 50, 1: 100}}
	missing := BankRead{ID: 3, Node: 3, Balances: map[int]int64{0: 200}}
	require.Empty(t, CheckBank([]BankRead{ok}, 2, 200))
	got := CheckBank([]BankRead{ok, bad, missing}, 2, 200)
	require.Len(t, got, 2)
	require.Equal(t, "bank-total", got[0].Kind)
	require.Equal(t, "bank-accounts", got[1].Kind)
}

func TestSets(t *testing.T) {
	adds := map[int]string{1: "ok", 2: "ok", 3: "fail", 4: "info", 5: "info"}
	all := map[int]bool{1: true, 2: true, 4: true}
	r := CheckSets(adds, map[int]map[int]bool{1: all, 2: all})
	require.Empty(t, r.Anomalies)
	require.Equal(t, 1, r.InfoPresent)
	require.Equal(t, 1, r.InfoAbsent)

	r = CheckSets(adds, map[int]map[int]bool{
		1: {1: true, 2: true, 3: true},
		2: {1: true, 4: true, 9: true},
	})
	var kinds []string
	for _, a := range r.Anomalies {
		kinds = append(kinds, a.Kind)
	}
	require.ElementsMatch(t, []string{"sets-divergent", "sets-lost", "sets-failed-present", "sets-unexpected"}, kinds)
}

// TestListAppendRandomSerialHistoriesPass: transactions executed one after
// the other against a model (some failing, whose appends are never seen)
// show no anomaly, whatever the mix of keys and operations.
func TestListAppendRandomSerialHistoriesPass(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0))
		state := map[int][]int{}
		var txns []Txn
		next := 0
		for id := 1; id <= 300; id++ {
			status := "ok"
			if rng.IntN(5) == 0 {
				status = "fail"
			}
			local := map[int][]int{}
			var ops []MOp
			for n := 1 + rng.IntN(4); n > 0; n-- {
				k := rng.IntN(5)
				if _, ok := local[k]; !ok {
					local[k] = append([]int(nil), state[k]...)
				}
				if rng.IntN(2) == 0 {
					next++
					local[k] = append(local[k], next)
					ops = append(ops, ap(k, next))
				} else {
					ops = append(ops, rd(k, append([]int(nil), local[k]...)...))
				}
			}
			if status == "ok" {
				for k, v := range local {
					state[k] = v
				}
			}
			txns = append(txns, Txn{ID: id, Status: status, Ops: ops})
		}
		var final []MOp
		for k := 0; k < 5; k++ {
			final = append(final, rd(k, state[k]...))
		}
		txns = append(txns, Txn{ID: 1000, Status: "ok", Ops: final})
		res := CheckListAppend(txns)
		require.Empty(t, res.Anomalies, "seed %d", seed)
		require.Positive(t, res.Edges)
	}
}

func TestFinalReads(t *testing.T) {
	txns := []Txn{
		txn(1, "ok", ap(1, 1)),
		txn(2, "ok", ap(1, 2)),
		txn(3, "fail", ap(1, 3)),
		txn(10, "ok", rd(1, 1, 2)),
		txn(11, "ok", rd(1, 1, 2)),
	}
	final := map[int]bool{10: true, 11: true}
	require.Empty(t, CheckFinalReads(txns, final))

	txns[4] = txn(11, "ok", rd(1, 1))
	got := CheckFinalReads(txns, final)
	require.Len(t, got, 1)
	require.Equal(t, FinalDivergent, got[0].Kind)

	txns[3], txns[4] = txn(10, "ok", rd(1, 1)), txn(11, "ok", rd(1, 1))
	got = CheckFinalReads(txns, final)
	require.Len(t, got, 1)
	require.Equal(t, LostAppend, got[0].Kind, "%v", got)
}

// TestFinalReadsOfResolvedTransactions: an indeterminate transaction the
// outcome check answered committed for must be in the final state, like an
// acknowledged one; an unresolved one may be missing.
func TestFinalReadsOfResolvedTransactions(t *testing.T) {
	resolved := txn(2, "info", ap(1, 2))
	resolved.Outcome = "committed"
	txns := []Txn{
		txn(1, "ok", ap(1, 1)),
		resolved,
		txn(3, "info", ap(1, 3)),
		txn(10, "ok", rd(1, 1, 2)),
	}
	final := map[int]bool{10: true}
	require.Empty(t, CheckFinalReads(txns, final))

	txns[3] = txn(10, "ok", rd(1, 1))
	got := CheckFinalReads(txns, final)
	require.Len(t, got, 1)
	require.Equal(t, LostAppend, got[0].Kind, "%v", got)
	require.Contains(t, got[0].Text, "outcome check answered committed")

	res := CheckListAppend(txns)
	require.Equal(t, 1, res.InfoCommitted)
	require.Equal(t, 1, res.InfoUnknown)
}
