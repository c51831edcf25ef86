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

// counter is the autocommit workload: blind increments of a few counters
// (table counter, all 0 at the start), each one statement outside any
// block, `UPDATE counter SET n = n + 1 WHERE k = …` (labelled for the
// outcome check), sent as a simple query (as psql, psycopg2 or a cron
// job send them) or with the extended protocol (Parse, Bind and Execute
// in one unit as JDBC sends them, or a prepared statement bound by name),
// some with `RETURNING n`: the value after the increment, which the
// client must receive from the attempt that committed. They conflict all the time, and a node runs such a statement
// again after a replication conflict (autocommit_retries, outcomes.md)
// before its client hears of it: a retry must never apply an increment
// twice, nor report one committed that is not.
//
// Checked (checker.CheckCounter): every counter ends at least at its
// acknowledged increments and at most at those plus its indeterminate
// ones (an indeterminate one the outcome check answered for counts as
// what it answered); the final reads through every node agree.
type counter struct {
	keys int
}

func (w *counter) name() string { return "counter" }

func (w *counter) setup(ctx context.Context, conn *pgx.Conn) error {
	return createCounters(ctx, conn, "counter", w.keys)
}

func (w *counter) digest() string {
	return "SELECT coalesce(string_agg(k || ':' || n, ',' ORDER BY k), '') FROM counter"
}

func (w *counter) run(r *run, stop <-chan struct{}) {
	r.loop("counter", r.cfg.Clients, stop, func(c *client, rng *rand.Rand) {
		k := rng.IntN(w.keys)
		modes := []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec, pgx.QueryExecModeCacheStatement}
		mode := modes[rng.IntN(len(modes))]
		if rng.IntN(2) == 0 {
			c.exec("incr", k, "UPDATE counter SET n = n + 1 WHERE k = $1", mode, k)
			return
		}
		_, _ = c.txnlessDo("incr", k, func(ctx context.Context) (any, error) {
			var n int64
			err := c.conn.QueryRow(ctx, "UPDATE counter SET n = n + 1 WHERE k = $1 RETURNING n", mode, k).Scan(&n)
			return []int64{int64(k), n}, err
		})
	})
}

func (w *counter) final(r *run) []string {
	var problems []string
	for i := 0; i < r.cluster.N(); i++ {
		c := r.newClient("counter-final", i)
		typ, _ := c.txn("read", nil, func(ctx context.Context, tx pgx.Tx) (any, error) {
			return readNumbers(ctx, tx, "SELECT k, n FROM counter")
		})
		c.close()
		if typ != history.OK {
			problems = append(problems, fmt.Sprintf("counter: final read through node %d: %s", i+1, typ))
		}
	}
	return problems
}

func (w *counter) check(r *run, events []history.Event) ([]checker.Anomaly, string) {
	ok, info := map[int]int{}, map[int]int{}
	returned := map[int][]int64{}
	failed := 0
	final := map[int]map[int]int64{}
	for _, op := range history.Pair(events) {
		switch owner := r.owner[op.Process]; {
		case owner == "counter" && op.F == "incr":
			var k int
			if op.Type == history.OK && len(op.Value) > 0 && op.Value[0] == '[' {
				// [k, n]: RETURNING n
				var kn []int64
				if err := json.Unmarshal(op.Value, &kn); err != nil || len(kn) != 2 {
					return []checker.Anomaly{{Kind: "history", Text: fmt.Sprintf("incr value %s: %v", op.Value, err)}}, ""
				}
				k = int(kn[0])
				returned[k] = append(returned[k], kn[1])
			} else if err := json.Unmarshal(op.Value, &k); err != nil {
				return []checker.Anomaly{{Kind: "history", Text: err.Error()}}, ""
			}
			switch resolvedType(op) {
			case history.OK:
				ok[k]++
			case history.Fail:
				failed++
			default:
				info[k]++
			}
		case owner == "counter-final" && op.F == "read" && op.Type == history.OK:
			var m map[int]int64
			if err := json.Unmarshal(op.Value, &m); err != nil {
				return []checker.Anomaly{{Kind: "history", Text: err.Error()}}, ""
			}
			final[op.Node] = m
		}
	}
	res := checker.CheckCounter(ok, info, failed, final, returned)
	summary := fmt.Sprintf("counter: %d autocommit increments (%d ok, %d failed, %d indeterminate; %d returned their value); final counters %v (read through %d nodes); %d anomalies",
		res.OK+res.Failed+res.Info, res.OK, res.Failed, res.Info, res.Returned, res.Final, len(final), len(res.Anomalies))
	for _, a := range res.Anomalies {
		summary += "\n    " + a.String()
	}
	return res.Anomalies, summary
}
