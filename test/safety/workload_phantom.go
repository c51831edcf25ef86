package safety

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-db/ordo/test/safety/checker"
	"github.com/ordo-db/ordo/test/safety/history"
)

// phantom is the predicate write-skew workload. Table phantom (id, w)
// starts empty; its ids fall in windows of ten (window w holds ids 10w+1
// … 10w+10). A transaction reads the ids a window holds through a range
// of the key (BETWEEN, or a lower and an upper bound; with parameters or
// as literals in a simple query), and if there are fewer than max it
// inserts a row at a free id of the window, else deletes one of them (so
// the windows keep changing). Two such transactions on one window that
// both saw max-1 rows are write skew through a phantom: each inserted a
// row the other's range would have read.
//
// Every transaction keeps a window at max rows or fewer, so in a
// serializable history every state does: under dbsm, pgr, cons and at
// SERIALIZABLE under any protocol no committed transaction may read more
// than max rows in a window, and no window may end with more (the final
// reads through every node; they agree, or the digest says so). Under
// dbsm-si and dbsm-rc both are counted, not held: snapshot isolation
// allows it.
// A range certified as anything less than every row it can read (its
// bounds only, say) lets two such transactions commit.
type phantom struct {
	windows, max int
}

func (w *phantom) name() string { return "phantom" }

func (w *phantom) setup(ctx context.Context, conn *pgx.Conn) error {
	_, err := conn.Exec(ctx, "CREATE TABLE phantom (id int PRIMARY KEY, w int NOT NULL)")
	return err
}

func (w *phantom) digest() string {
	return "SELECT coalesce(string_agg(id::text, ',' ORDER BY id), '') FROM phantom"
}

// phantomReads are the forms of a window's range read, with the bounds
// each takes for ids lo … hi.
var phantomReads = []struct {
	sql    string
	bounds func(lo, hi int) (int, int)
	simple bool // the bounds as literals, in a simple query
}{
	{"SELECT id FROM phantom WHERE id BETWEEN $1 AND $2", func(lo, hi int) (int, int) { return lo, hi }, false},
	{"SELECT id FROM phantom WHERE id >= $1 AND id < $2", func(lo, hi int) (int, int) { return lo, hi + 1 }, false},
	{"SELECT id FROM phantom WHERE id BETWEEN %d AND %d", func(lo, hi int) (int, int) { return lo, hi }, true},
	{"SELECT id FROM phantom WHERE %d < id AND id <= %d", func(lo, hi int) (int, int) { return lo - 1, hi }, true},
}

func (w *phantom) run(r *run, stop <-chan struct{}) {
	r.loop("phantom", r.cfg.Clients, stop, func(c *client, rng *rand.Rand) {
		win := rng.IntN(w.windows)
		form := phantomReads[rng.IntN(len(phantomReads))]
		pick := rng.IntN(10)
		c.txn("change", win, func(ctx context.Context, tx pgx.Tx) (any, error) {
			lo, hi := form.bounds(10*win+1, 10*win+10)
			var rows pgx.Rows
			var err error
			if form.simple {
				rows, err = tx.Query(ctx, fmt.Sprintf(form.sql, lo, hi), pgx.QueryExecModeSimpleProtocol)
			} else {
				rows, err = tx.Query(ctx, form.sql, lo, hi)
			}
			if err != nil {
				return nil, err
			}
			seen := map[int]bool{}
			for rows.Next() {
				var id int
				if err := rows.Scan(&id); err != nil {
					rows.Close()
					return nil, err
				}
				seen[id] = true
			}
			if err := rows.Err(); err != nil {
				return nil, err
			}
			id := 10*win + 1 + pick
			if len(seen) >= w.max {
				// Full: make room, so that the window keeps changing.
				for !seen[id] {
					id = 10*win + 1 + (id-10*win)%10
				}
				if _, err := tx.Exec(ctx, "DELETE FROM phantom WHERE id = $1", id); err != nil {
					return nil, err
				}
				return []int{win, len(seen), -id}, nil
			}
			for seen[id] {
				id = 10*win + 1 + (id-10*win)%10
			}
			if _, err := tx.Exec(ctx, "INSERT INTO phantom VALUES ($1, $2)", id, win); err != nil {
				return nil, err
			}
			return []int{win, len(seen), id}, nil
		})
	})
}

func (w *phantom) final(r *run) []string {
	var problems []string
	for i := 0; i < r.cluster.N(); i++ {
		c := r.newClient("phantom-final", i)
		typ, _ := c.txn("read", nil, func(ctx context.Context, tx pgx.Tx) (any, error) {
			return readNumbers(ctx, tx, "SELECT id, w FROM phantom")
		})
		c.close()
		if typ != history.OK {
			problems = append(problems, fmt.Sprintf("phantom: final read through node %d: %s", i+1, typ))
		}
	}
	return problems
}

// phantomHeld reports whether model forbids write skew (serializability).
func phantomHeld(model string) bool {
	switch model {
	case "dbsm", "pgr", "cons", "serializable":
		return true
	}
	return false
}

func (w *phantom) check(r *run, events []history.Event) ([]checker.Anomaly, string) {
	counts := map[string]int{}
	var saw []string // committed reads of a window over max
	var finals []map[int]int64
	for _, op := range history.Pair(events) {
		switch owner := r.owner[op.Process]; {
		case owner == "phantom" && op.F == "change":
			counts[resolvedType(op)]++
			var v []int
			if op.Type == history.OK && json.Unmarshal(op.Value, &v) == nil && len(v) == 3 && v[1] > w.max {
				saw = append(saw, fmt.Sprintf("a committed transaction saw window %d with %d rows", v[0], v[1]))
			}
		case owner == "phantom-final" && op.F == "read" && op.Type == history.OK:
			var m map[int]int64
			if err := json.Unmarshal(op.Value, &m); err != nil {
				return []checker.Anomaly{{Kind: "history", Text: err.Error()}}, ""
			}
			finals = append(finals, m)
		}
	}
	var forbidden []checker.Anomaly
	over := map[int][]int{} // window → its ids, for the windows over max
	for _, m := range finals {
		ids := map[int][]int{}
		for id, win := range m {
			ids[int(win)] = append(ids[int(win)], id)
		}
		for win, list := range ids {
			if len(list) > w.max {
				sort.Ints(list)
				over[win] = list
			}
		}
	}
	wins := make([]int, 0, len(over))
	for win := range over {
		wins = append(wins, win)
	}
	sort.Ints(wins)
	if phantomHeld(r.model()) {
		for _, win := range wins {
			forbidden = append(forbidden, checker.Anomaly{Kind: "phantom", Text: fmt.Sprintf("window %d ends with rows %v, more than %d: two transactions that read it through a range both inserted into it", win, over[win], w.max)})
		}
		for _, text := range saw {
			forbidden = append(forbidden, checker.Anomaly{Kind: "phantom", Text: text + fmt.Sprintf(", more than %d: two transactions that read it through a range both inserted into it", w.max)})
		}
	}
	summary := fmt.Sprintf("phantom: %d transactions (%d ok, %d failed, %d indeterminate); committed reads of a window over %d rows: %d; windows over %d rows at the end: %d (forbidden under %s: %v)",
		counts[history.OK]+counts[history.Fail]+counts[history.Info], counts[history.OK], counts[history.Fail], counts[history.Info],
		w.max, len(saw), w.max, len(over), r.model(), phantomHeld(r.model()))
	for _, a := range forbidden {
		summary += "\n    " + a.String()
	}
	return forbidden, summary
}
