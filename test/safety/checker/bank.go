package checker

import (
	"fmt"
	"sort"
)

// BankRead is a committed read of every account: id → balance.
type BankRead struct {
	ID       int
	Node     int
	Balances map[int]int64
}

// CheckBank returns an anomaly for every read whose accounts are not
// exactly 0…accounts-1 or whose balances do not sum to total.
func CheckBank(reads []BankRead, accounts int, total int64) []Anomaly {
	var out []Anomaly
	for _, r := range reads {
		var sum int64
		for _, b := range r.Balances {
			sum += b
		}
		if len(r.Balances) != accounts {
			ids := make([]int, 0, len(r.Balances))
			for id := range r.Balances {
				ids = append(ids, id)
			}
			sort.Ints(ids)
			out = append(out, Anomaly{"bank-accounts", []int{r.ID}, fmt.Sprintf("read T%d on node %d saw accounts %v, want %d accounts", r.ID, r.Node, ids, accounts)})
			continue
		}
		if sum != total {
			out = append(out, Anomaly{"bank-total", []int{r.ID}, fmt.Sprintf("read T%d on node %d: balances %v sum to %d, want %d", r.ID, r.Node, r.Balances, sum, total)})
		}
	}
	return out
}
