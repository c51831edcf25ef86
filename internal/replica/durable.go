package replica

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/ordo-db/ordo/internal/apply"
	"github.com/ordo-db/ordo/internal/termination"
)

// Applies and the loop's COMMIT PREPARED run with synchronous_commit =
// off: their WAL reaches the disk a little later. The total order may
// compact its log below what every node says it applied, so a node says
// so only once the WAL that carried it is flushed: if PostgreSQL then lost
// an unflushed tail in a crash, the entries to replay are still in the log.

// walMark is a carried-out seqno and the WAL insert position once it was.
type walMark struct {
	seqno uint64
	lsn   pglogrepl.LSN
}

// markDurable notes that everything up to seqno is carried out (delivery
// loop, once per batch), and at most every walCheckEvery reads the WAL
// positions (checkDurable): a query per batch cost the loop a round trip
// to PostgreSQL on every batch, for a figure only compaction and a
// suspected crash use.
func (r *Replica) markDurable(ctx context.Context, seqno uint64) {
	r.unmarked = max(r.unmarked, seqno)
	if time.Since(r.walChecked) >= walCheckEvery {
		r.checkDurable(ctx)
	}
}

// walCheckEvery bounds how often the loop reads the WAL positions.
const walCheckEvery = 20 * time.Millisecond

// durablePending reports whether carried-out seqnos wait for checkDurable
// (the loop calls it after walCheckEvery when no batch comes).
func (r *Replica) durablePending() bool { return r.unmarked > 0 || len(r.marks) > 0 }

// checkDurable gives the seqnos carried out since the last check the WAL
// insert position now (at or past the end of their WAL), and tells the
// total order the largest seqno whose position PostgreSQL has flushed. A
// failure to ask only delays compaction.
func (r *Replica) checkDurable(ctx context.Context) {
	r.walChecked = time.Now()
	var insert, flush string
	if err := r.conn.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text, pg_current_wal_flush_lsn()::text").Scan(&insert, &flush); err != nil {
		r.log.Debug("replica: read the WAL position", "err", err)
		return
	}
	ins, err1 := pglogrepl.ParseLSN(insert)
	fl, err2 := pglogrepl.ParseLSN(flush)
	if err1 != nil || err2 != nil {
		r.log.Warn("replica: unexpected WAL position", "insert", insert, "flush", flush)
		return
	}
	if n := len(r.marks); r.unmarked > 0 && (n == 0 || r.marks[n-1].seqno < r.unmarked) {
		r.marks = append(r.marks, walMark{r.unmarked, ins})
	}
	r.unmarked = 0
	durable := uint64(0)
	i := 0
	for ; i < len(r.marks) && r.marks[i].lsn <= fl; i++ {
		durable = r.marks[i].seqno
	}
	r.marks = r.marks[i:]
	if durable > 0 {
		r.durable.Store(max(r.durable.Load(), durable))
		r.cfg.Order.MarkApplied(durable)
	}
}

// watchPostgres holds a connection that waits for nothing, so that the
// node learns at once when PostgreSQL drops every connection (a backend
// crash reinitializes it, and it loses the WAL it had not flushed): until
// a fresh connection shows nothing acknowledged was lost, snapshots are
// given only the flushed prefix (AppliedPrefix). If something was lost,
// the node refuses updates and the delivery loop stops, so the node stops
// and replays from what the database proves once restarted.
func (r *Replica) watchPostgres(ctx context.Context, stopLoop context.CancelCauseFunc) {
	for ctx.Err() == nil {
		conn, err := pgx.Connect(ctx, r.cfg.DSN)
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if r.suspect.Load() {
			committed := uint64(0)
			if r.cfg.Applier != nil {
				committed = r.cfg.Applier.Committed()
			}
			if err := apply.LostCommits(ctx, conn, committed); err != nil {
				err = fmt.Errorf("%w: %w", termination.ErrPostgresRestarted, err)
				r.fail(err)
				stopLoop(err)
				conn.Close(context.Background())
				return
			}
			r.suspect.Store(false)
			r.log.Info("PostgreSQL is back and kept every acknowledged commit")
		}
		_, err = conn.WaitForNotification(ctx) // it LISTENs to nothing: returns when the connection is lost, or ctx ends
		conn.Close(context.Background())
		if ctx.Err() != nil {
			return
		}
		r.suspect.Store(true)
		r.log.Warn("lost the connection to PostgreSQL: until it proves nothing was lost, snapshots see only the flushed prefix", "err", err)
	}
}
