package replica

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ordo-db/ordo/internal/apply"
	"github.com/ordo-db/ordo/internal/termination"

	"github.com/ordo-db/ordo/internal/txn"
)

// Decisions survive a restart in _ordo.applied. A remote transaction's
// apply inserts its proof row (seqno, gid) in the same PostgreSQL
// transaction as its rows; a local transaction's proof row is inserted by
// the delivery loop after its COMMIT PREPARED, always before the next
// apply commits (proofs become durable in seqno order, even without
// waiting for their WAL flush), and under dbsm-rc before the commit is
// shown (its SERIALIZABLE transactions are certified from the proofs
// their snapshots hold: carryOut), in the COMMIT PREPARED's own round
// trip (commitWithProof). So for every seqno up to the largest proof
// (the proven prefix), a proof row exists exactly if the transaction
// committed here, which every node decided alike.
//
// A restarted node replays a certification window before its proven
// prefix to rebuild the certifier. It must not certify those entries anew:
// an entry whose snapshot is older than where the replay starts would be
// found too old although it committed, its keys would be missing from the
// index, and a later transaction conflicting with it could commit on this
// node alone. Up to the proven prefix, the loop records the outcomes the
// proof rows give instead.

// proof is a committed local transaction whose proof row is not written
// yet.
type proof struct {
	seqno uint64
	gid   txn.GID
	label string // the client's label, "" for none
}

// loadProven reads which seqnos in (StartAfter, Proven] committed here.
func (r *Replica) loadProven(ctx context.Context) error {
	r.proven = make(map[uint64]bool)
	if r.cfg.Proven <= r.cfg.StartAfter {
		return nil
	}
	rows, err := r.conn.Query(ctx, "SELECT seqno, gid FROM _ordo.applied WHERE seqno > $1 AND seqno <= $2",
		int64(r.cfg.StartAfter), int64(r.cfg.Proven))
	if err != nil {
		return fmt.Errorf("replica: read the decisions before the restart: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var s int64
		var gid string
		if err := rows.Scan(&s, &gid); err != nil {
			return fmt.Errorf("replica: read the decisions before the restart: %w", err)
		}
		r.proven[uint64(s)] = true
		if strings.HasPrefix(gid, skippedPrefix) {
			r.skipped[uint64(s)] = true // by the cluster's verdict (vote.go)
		}
	}
	return rows.Err()
}

// skippedPrefix marks the proof row of an entry this node skipped by the
// cluster's verdict (vote.go): committed by the order, carried out
// without it here. A restart replays it as committed and not to apply,
// and the votes on it as on an entry it skipped.
const skippedPrefix = "skipped:"

// replayed reports whether seqno was decided before the restart and, if
// so, whether it committed.
func (r *Replica) replayed(seqno uint64) (decided, commit bool) {
	if seqno > r.cfg.Proven {
		return false, false
	}
	commit = r.proven[seqno]
	delete(r.proven, seqno)
	return true, commit
}

// flushProofs writes the proof rows of the local transactions committed
// since the last flush, retrying (execRetrying): a proof row that never
// gets written would make a restarted node take a committed transaction
// for an aborted one.
func (r *Replica) flushProofs(ctx context.Context) error {
	if len(r.abortedLabels) > 0 {
		seqnos, gids, labels := columns(r.abortedLabels)
		err := r.execRetrying(ctx, "record the outcome of labelled aborted transactions", nil,
			`INSERT INTO _ordo.aborted (seqno, gid, label) SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[]) ON CONFLICT DO NOTHING`, seqnos, gids, labels)
		if err != nil {
			return err
		}
		r.abortedLabels = r.abortedLabels[:0]
	}
	if len(r.proofs) == 0 {
		return nil
	}
	seqnos, gids, labels := columns(r.proofs)
	last := r.proofs[len(r.proofs)-1].seqno
	err := r.execRetrying(ctx, fmt.Sprintf("write the proof rows of local commits up to seqno %d", last), nil,
		proofsSQL, seqnos, gids, labels)
	if err != nil {
		return err
	}
	r.proofs = r.proofs[:0]
	r.proved(last)
	return nil
}

// proofsSQL inserts proof rows: seqnos, gids and labels ("" for none).
const proofsSQL = `INSERT INTO _ordo.applied (seqno, gid, label) SELECT s, g, nullif(l, '') FROM unnest($1::bigint[], $2::text[], $3::text[]) AS u(s, g, l) ON CONFLICT DO NOTHING`

// commitWithProof sends a local transaction's COMMIT PREPARED (stmt) and
// the insert of the proof rows ps (its own, after any not written yet, in
// seqno order) in one round trip: one batch, one Sync. PostgreSQL runs
// the COMMIT PREPARED in a transaction of its own (it is the batch's
// first statement) and skips the rest of the batch after an error, so the
// rows are written only if the commit was, as the loop's way of one
// statement after the other guarantees. Under dbsm-rc the proof row must
// be written before the commit is shown (carryOutTxn): this saves the
// client that round trip. An error leaves the commit, and the rows, to
// the caller's way (execRetrying, flushProofs), which retries each.
func commitWithProof(ctx context.Context, conn *pgx.Conn, stmt string, ps []proof) error {
	sd, err := conn.Prepare(ctx, "ordo_proofs", proofsSQL) // a round trip once per connection
	if err != nil {
		return err
	}
	seqnos, gids, labels := columns(ps)
	params := make([][]byte, 3)
	for i, v := range []any{seqnos, gids, labels} {
		if params[i], err = conn.TypeMap().Encode(sd.ParamOIDs[i], pgx.TextFormatCode, v, nil); err != nil {
			return err
		}
	}
	b := &pgconn.Batch{}
	b.ExecParams(stmt, nil, nil, nil, nil)
	b.ExecPrepared(sd.Name, params, nil, nil)
	results, err := conn.PgConn().ExecBatch(ctx, b).ReadAll()
	if err != nil {
		return err
	}
	for _, res := range results {
		if res.Err != nil {
			return res.Err
		}
	}
	return nil
}

// trimProofs forgets, once per certification window, the proof rows older
// than two windows: nothing replays that far back.
func (r *Replica) trimProofs(ctx context.Context, seqno uint64) error {
	w := r.cfg.Window
	if seqno/w == r.trimmed/w || seqno <= 2*w {
		return nil
	}
	if err := r.execRetrying(ctx, "forget old proof rows", nil, `DELETE FROM _ordo.applied WHERE seqno <= $1`, int64(seqno-2*w)); err != nil {
		return err
	}
	if err := r.execRetrying(ctx, "forget old outcomes of aborted transactions", nil, `DELETE FROM _ordo.aborted WHERE seqno <= $1`, int64(seqno-2*w)); err != nil {
		return err
	}
	r.trimmed = seqno
	return nil
}

// execRetrying runs sql on the delivery loop's connection, reconnecting
// and retrying for about two seconds; an error for which done reports true
// counts as success (done may be nil). It gives up at once if PostgreSQL
// restarted under the node.
func (r *Replica) execRetrying(ctx context.Context, what string, done func(error) bool, sql string, args ...any) error {
	for attempt := 0; ; attempt++ {
		_, err := r.conn.Exec(ctx, sql, args...)
		if err == nil || (done != nil && done(err)) {
			return nil
		}
		if ctx.Err() != nil || attempt == 20 {
			return fmt.Errorf("replica: %s: %w", what, err)
		}
		r.log.Warn("replica: retrying", "what", what, "err", err)
		if r.conn.IsClosed() {
			c, cerr := r.connectLoop(ctx)
			if cerr == nil {
				if cerr = r.lostCommits(ctx, c); cerr != nil {
					c.Close(context.Background())
				}
			}
			if errors.Is(cerr, ErrPostgresRestarted) {
				return cerr
			}
			if cerr == nil {
				r.conn = c
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// proved notes that the proof row of seqno is committed (by an apply, or
// by flushProofs).
func (r *Replica) proved(seqno uint64) {
	r.lastProof = max(r.lastProof, seqno)
	if r.cfg.Applier != nil {
		r.cfg.Applier.NoteCommitted(seqno) // one watermark for the loop and the applier
	}
}

// lostCommits checks, on a fresh connection after the loop lost its own,
// that PostgreSQL kept everything the loop had committed: the last proof
// row it committed (apply.LostCommits), and the COMMIT PREPARED of local
// transactions whose proof rows are not written yet (each would be
// prepared again). A crash of any backend reinitializes PostgreSQL and
// drops the WAL tail it had not written, which synchronous_commit = off
// allows; the node must then replay from what the database proves.
func (r *Replica) lostCommits(ctx context.Context, conn *pgx.Conn) error {
	last := r.lastProof
	if r.cfg.Applier != nil {
		last = max(last, r.cfg.Applier.Committed())
	}
	if err := apply.LostCommits(ctx, conn, last); err != nil {
		return fmt.Errorf("%w: %w", termination.ErrPostgresRestarted, err)
	}
	if len(r.proofs) == 0 {
		return nil
	}
	gids := make([]string, len(r.proofs))
	for i, p := range r.proofs {
		gids[i] = string(p.gid)
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_xacts WHERE gid = ANY($1)", gids).Scan(&n); err != nil {
		return fmt.Errorf("replica: check for lost commits: %w", err)
	}
	if n > 0 {
		return fmt.Errorf("%w (%d local transactions it had committed are prepared again: a backend crash reinitialized it)", termination.ErrPostgresRestarted, n)
	}
	return nil
}

// columns splits proofs into the arrays an unnest insert takes.
func columns(ps []proof) (seqnos []int64, gids, labels []string) {
	for _, p := range ps {
		seqnos = append(seqnos, int64(p.seqno))
		gids = append(gids, string(p.gid))
		labels = append(labels, p.label)
	}
	return seqnos, gids, labels
}
