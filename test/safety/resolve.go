package safety

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-db/ordo/test/safety/history"
)

// resolution counts what the outcome check answered for the run's
// indeterminate operations.
type resolution struct {
	indeterminate               int // labelled info operations
	committed, aborted, unknown int
	unanswered                  int // no node answered
	errs                        []string
}

// resolve asks the cluster, once it has converged, for the outcome of every
// indeterminate operation that labelled its transaction
// (`_ordo.txn_status`, outcomes.md) and records each answer as a resolve
// event, which history.Pair applies: an operation resolved as aborted is a
// fail to every checker, one resolved as committed is taken as committed by
// the checkers that can (sets, list-append). A wrong answer is therefore
// caught by the checks it feeds: a "committed" add missing at the end, an
// "aborted" append someone read.
//
// It asks through the first node that answers, after a sync read, so that
// "unknown" means the transaction never reached the total order.
func (r *run) resolve(ctx context.Context) resolution {
	var res resolution
	var todo []history.Op
	for _, op := range history.Pair(r.rec.Events()) {
		if op.Type == history.Info && op.Label != "" && op.Complete >= 0 {
			todo = append(todo, op)
		}
	}
	res.indeterminate = len(todo)
	if len(todo) == 0 {
		return res
	}
	var conn *pgx.Conn
	for i := 0; i < r.cluster.N() && conn == nil; i++ {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		c, err := pgx.Connect(cctx, r.cluster.DSN(i))
		if err == nil {
			_, err = c.Exec(cctx, "SET ordo.read_consistency = 'sync'")
		}
		cancel()
		if err != nil {
			res.errs = append(res.errs, fmt.Sprintf("node %d: %v", i+1, err))
			if c != nil {
				c.Close(ctx)
			}
			continue
		}
		conn = c
	}
	if conn == nil {
		res.unanswered = len(todo)
		return res
	}
	defer conn.Close(ctx)
	for _, op := range todo {
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var outcome string
		err := conn.QueryRow(qctx, "SELECT _ordo.txn_status($1)", op.Label).Scan(&outcome)
		cancel()
		if err != nil {
			res.unanswered++
			if len(res.errs) < 5 {
				res.errs = append(res.errs, fmt.Sprintf("%s: %v", op.Label, err))
			}
			continue
		}
		switch outcome {
		case history.Committed:
			res.committed++
		case history.Aborted:
			res.aborted++
		case history.Unknown:
			res.unknown++
		default:
			r.problem("the outcome check answered %q for %s (committed, aborted or unknown expected)", outcome, op.Label)
			continue
		}
		r.rec.Record(history.Info, history.ResolverProcess, 0, "resolve",
			history.Resolution{Index: op.Index, Label: op.Label, Outcome: outcome}, "")
	}
	return res
}

func (res resolution) String() string {
	s := fmt.Sprintf("outcome check: %d indeterminate operations asked about: %d committed, %d aborted, %d unknown, %d unanswered",
		res.indeterminate, res.committed, res.aborted, res.unknown, res.unanswered)
	for _, e := range res.errs {
		s += "\n    " + e
	}
	return s
}
