package safety

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-db/ordo/test/safety/checker"
	"github.com/ordo-db/ordo/test/safety/history"
)

// hot is the hot-keys workload: a few counters (table hot, all 0 at the
// start) every client fights over. An increment reads one or two counters
// and sets one of them to the value it read plus one, computed by the
// client (read-modify-write, `UPDATE … SET n = $read + 1`); a read reads
// every counter in one transaction. Under dbsm-rc the increment is
// `UPDATE … SET n = n + 1 RETURNING n` instead: at READ COMMITTED two
// sessions of one node may both read a value and both write it plus one,
// as on PostgreSQL, so the client's computation would lose updates by
// design, while `n = n + 1` re-reads the row it waited for (and between
// nodes the second writer aborts): no update may be lost there either.
// Under cons each transaction declares the table's class (`SET LOCAL
// ordo.conflict_classes = 'public.hot'`), as an application would.
//
// Checked (checker.CheckHot): every committed increment adds exactly 1, so
// the committed increments of a counter wrote 1, 2, …, its final value,
// each once: no two acknowledged increments wrote the same value (a lost
// update), none wrote more than the final value, and every value up to it
// was written by an acknowledged or indeterminate one (the final value is
// the number of acknowledged increments plus some of the indeterminate
// ones); no committed read is above the final value; the final reads
// through every node agree. The workload must never write a counter other
// than by adding one to it.
type hot struct {
	keys int
}

func (h *hot) name() string { return "hot" }

func (h *hot) setup(ctx context.Context, conn *pgx.Conn) error {
	return createCounters(ctx, conn, "hot", h.keys)
}

func (h *hot) digest() string {
	return "SELECT coalesce(string_agg(k || ':' || n, ',' ORDER BY k), '') FROM hot"
}

// hotIncr is an increment's history value: filled in as the transaction
// runs, so that an indeterminate one records what it wrote.
type hotIncr struct {
	K     int           `json:"k"`
	Read  map[int]int64 `json:"read,omitempty"`
	Wrote int64         `json:"wrote,omitempty"`
}

// declare takes the hot table's conflict class under cons.
func (h *hot) declare(ctx context.Context, r *run, tx pgx.Tx) error {
	if r.cfg.Protocol != "cons" {
		return nil
	}
	_, err := tx.Exec(ctx, "SET LOCAL ordo.conflict_classes = 'public.hot'")
	return err
}

func (h *hot) readAll(ctx context.Context, r *run, tx pgx.Tx) (map[int]int64, error) {
	if err := h.declare(ctx, r, tx); err != nil {
		return nil, err
	}
	return readNumbers(ctx, tx, "SELECT k, n FROM hot")
}

func (h *hot) run(r *run, stop <-chan struct{}) {
	rc := r.cfg.Protocol == "dbsm-rc"
	r.loop("hot", r.cfg.Clients, stop, func(c *client, rng *rand.Rand) {
		if rng.IntN(4) == 0 {
			c.txn("read", nil, func(ctx context.Context, tx pgx.Tx) (any, error) {
				return h.readAll(ctx, r, tx)
			})
			return
		}
		op := &hotIncr{K: rng.IntN(h.keys), Read: map[int]int64{}}
		reads := []int{op.K}
		if rng.IntN(2) == 0 {
			// A second counter, read first or after.
			other := (op.K + 1 + rng.IntN(h.keys-1)) % h.keys
			reads = append(reads, other)
			if rng.IntN(2) == 0 {
				reads[0], reads[1] = reads[1], reads[0]
			}
		}
		c.txn("incr", op, func(ctx context.Context, tx pgx.Tx) (any, error) {
			if err := h.declare(ctx, r, tx); err != nil {
				return nil, err
			}
			for _, k := range reads {
				var n int64
				if err := tx.QueryRow(ctx, "SELECT n FROM hot WHERE k = $1", k).Scan(&n); err != nil {
					return nil, err
				}
				op.Read[k] = n
			}
			if rc {
				return op, tx.QueryRow(ctx, "UPDATE hot SET n = n + 1 WHERE k = $1 RETURNING n", op.K).Scan(&op.Wrote)
			}
			op.Wrote = op.Read[op.K] + 1
			if _, err := tx.Exec(ctx, "UPDATE hot SET n = $2 WHERE k = $1", op.K, op.Wrote); err != nil {
				op.Wrote = 0
				return nil, err
			}
			return op, nil
		})
	})
}

func (h *hot) final(r *run) []string {
	var problems []string
	for i := 0; i < r.cluster.N(); i++ {
		c := r.newClient("hot-final", i)
		typ, _ := c.txn("read", nil, func(ctx context.Context, tx pgx.Tx) (any, error) {
			return h.readAll(ctx, r, tx)
		})
		c.close()
		if typ != history.OK {
			problems = append(problems, fmt.Sprintf("hot: final read through node %d: %s", i+1, typ))
		}
	}
	return problems
}

func (h *hot) check(r *run, events []history.Event) ([]checker.Anomaly, string) {
	var incrs []checker.HotIncr
	var reads []checker.HotRead
	final := map[int]map[int]int64{}
	for _, op := range history.Pair(events) {
		owner := r.owner[op.Process]
		if owner != "hot" && owner != "hot-final" {
			continue
		}
		switch op.F {
		case "incr":
			var v hotIncr
			if err := json.Unmarshal(op.Value, &v); err != nil {
				return []checker.Anomaly{{Kind: "history", Text: err.Error()}}, ""
			}
			incrs = append(incrs, checker.HotIncr{ID: op.Index, Node: op.Node, Status: resolvedType(op), K: v.K, Wrote: v.Wrote, Read: v.Read})
		case "read":
			if op.Type != history.OK {
				continue
			}
			var m map[int]int64
			if err := json.Unmarshal(op.Value, &m); err != nil {
				return []checker.Anomaly{{Kind: "history", Text: err.Error()}}, ""
			}
			if owner == "hot-final" {
				final[op.Node] = m
			} else {
				reads = append(reads, checker.HotRead{ID: op.Index, Node: op.Node, Values: m})
			}
		}
	}
	res := checker.CheckHot(incrs, reads, final)
	summary := fmt.Sprintf("hot: %d increments (%d ok, %d failed, %d indeterminate: %d of them committed), %d committed reads; final counters %v (read through %d nodes); %d anomalies",
		len(incrs), res.OK, res.Failed, res.Info, res.InfoCommitted, len(reads), res.Final, len(final), len(res.Anomalies))
	for _, a := range res.Anomalies {
		summary += "\n    " + a.String()
	}
	return res.Anomalies, summary
}

// resolvedType is an operation's outcome for the checkers of hot,
// longfork and ddl: an indeterminate one the outcome check answered
// committed for is taken as acknowledged (one answered aborted is a fail
// already: history.Pair).
func resolvedType(op history.Op) string {
	if op.Type == history.Info && op.Outcome == history.Committed {
		return history.OK
	}
	return op.Type
}
