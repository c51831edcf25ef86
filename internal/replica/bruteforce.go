package replica

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ordo-db/ordo/internal/txn"
)

// Every prepared transaction of this node has an owner until the order
// decides it: the session waiting for its outcome (Replica.waiters), or,
// once none waits, the orphan set (its outcome became unknown, or it was
// left over from before a restart: abortInBackground and loadOrphans put
// it there; the delivery loop takes it out when it carries out a decision
// on it).
//
// Any of them may block an apply: the apply was delivered first, so each
// is ordered after it and is rolled back early ("brute force"). The early
// rollback is recorded in _ordo.rolled_back, durably, before it is done:
// should the order then commit the transaction, the loop applies its write
// set like a remote one instead of COMMIT PREPARED, even after a crash of
// this process in between (a COMMIT PREPARED that finds nothing prepared
// would otherwise be taken for one done before the crash, and the rows
// would be missing here only). The record goes once the decision is
// carried out.

// loadRolledBack reads the early rollbacks recorded before a restart and
// this node's prepared transactions left over from before it (delivery
// loop, before the first delivery).
func (r *Replica) loadRolledBack(ctx context.Context) error {
	rows, err := r.conn.Query(ctx, "SELECT gid FROM _ordo.rolled_back")
	if err != nil {
		return fmt.Errorf("replica: read early rollbacks: %w", err)
	}
	rolled, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("replica: read early rollbacks: %w", err)
	}
	rows, err = r.conn.Query(ctx, "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()")
	if err != nil {
		return fmt.Errorf("replica: list prepared transactions: %w", err)
	}
	prepared, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("replica: list prepared transactions: %w", err)
	}
	still := map[string]bool{}
	for _, g := range prepared {
		still[g] = true
	}
	for _, g := range rolled {
		if still[g] {
			// Recorded, but this process died before the rollback itself.
			if _, err := r.conn.Exec(ctx, "ROLLBACK PREPARED "+quoteGID(txn.GID(g))); err != nil && !notPrepared(err) {
				return fmt.Errorf("replica: finish an early rollback: %w", err)
			}
			delete(still, g)
		}
	}
	r.rolledMu.Lock()
	defer r.rolledMu.Unlock()
	for _, g := range rolled {
		r.rolledBack[txn.GID(g)] = true
	}
	for g := range still {
		if node, _, err := txn.ParseGID(g); err == nil && node == r.cfg.NodeID {
			r.orphans[txn.GID(g)] = true
		}
	}
	if len(rolled)+len(r.orphans) > 0 {
		r.log.Info("prepared transactions of this node wait for the order's decision", "prepared", len(r.orphans), "rolled_back_early", len(rolled))
	}
	return nil
}

// RollbackUndecided rolls back every prepared transaction of this node.
// The applier calls it (through the node's OnBlocked) when a prepared
// transaction blocks an apply: the delivery loop is blocked in that apply,
// so it has carried out every decision delivered before it, and every
// prepared transaction of this node still there is undecided and ordered
// after the apply, whoever owns it (a waiting session, an unknown outcome,
// a leftover from before a restart or a crash, one whose session died).
// Should the order later commit one of them, the delivery loop applies its
// write set instead of COMMIT PREPARED, so rolling back a non-conflicting
// one is harmless.
func (r *Replica) RollbackUndecided(ctx context.Context) {
	r.bfMu.Lock()
	defer r.bfMu.Unlock()
	if r.bfConn == nil || r.bfConn.IsClosed() {
		conn, err := pgx.Connect(ctx, r.cfg.DSN)
		if err != nil {
			r.log.Warn("brute-force rollback: connect", "err", err)
			return
		}
		r.bfConn = conn
	}
	gids, err := r.preparedHere(ctx, r.bfConn, 0)
	if err != nil {
		r.log.Warn("brute-force rollback: list prepared transactions", "err", err)
		return
	}
	if len(gids) == 0 {
		r.log.Debug("a prepared transaction blocks an apply, and this node has none to roll back")
		return
	}
	for _, gid := range gids {
		if r.isRolledBack(gid) {
			// Recorded, but still prepared: this process died between
			// the record and the rollback. The record stands.
			if _, err := r.bfConn.Exec(ctx, "ROLLBACK PREPARED "+quoteGID(gid)); err != nil && !notPrepared(err) {
				r.log.Warn("brute-force rollback of a prepared transaction", "gid", gid, "err", err)
			}
			continue
		}
		if err := r.rollBackEarly(ctx, r.bfConn, gid); err != nil {
			r.log.Warn("brute-force rollback of a prepared transaction", "gid", gid, "err", err)
		}
	}
}

// preparedHere lists this node's prepared transactions prepared at least
// olderThan ago, in gid order.
func (r *Replica) preparedHere(ctx context.Context, conn *pgx.Conn, olderThan time.Duration) ([]txn.GID, error) {
	rows, err := conn.Query(ctx, `SELECT gid FROM pg_prepared_xacts WHERE database = current_database()
		AND prepared <= now() - make_interval(secs => $1) ORDER BY gid`, olderThan.Seconds())
	if err != nil {
		return nil, err
	}
	all, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	var gids []txn.GID
	for _, g := range all {
		if node, _, err := txn.ParseGID(g); err == nil && node == r.cfg.NodeID {
			gids = append(gids, txn.GID(g))
		}
	}
	return gids, nil
}

// sweepEvery is how often the sweep looks for prepared transactions nobody
// owns, and how old one must be to be taken for such.
const sweepEvery = 10 * time.Second

// sweep, every sweepEvery while ctx lasts, orders the abort of this node's
// prepared transactions that nobody owns: no session waits for them and
// no abort of theirs is on its way (their session died with a backend
// crash between PREPARE and its proposal, say). Left alone they would hold
// their locks until the node restarts. Whichever of the transaction and
// its abort is delivered first decides, on every node.
func (r *Replica) sweep(ctx context.Context) {
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		conn, err := pgx.Connect(ctx, r.cfg.DSN)
		if err != nil {
			continue
		}
		gids, err := r.preparedHere(ctx, conn, 3*sweepEvery)
		conn.Close(context.Background())
		if err != nil {
			continue
		}
		for _, gid := range gids {
			r.mu.Lock()
			_, waited := r.waiters[gid]
			r.mu.Unlock()
			r.rolledMu.Lock()
			owned := r.orphans[gid] || r.rolledBack[gid]
			r.rolledMu.Unlock()
			if waited || owned {
				continue
			}
			r.log.Warn("a prepared transaction nobody waits for is aborted through the order", "gid", gid)
			r.abortInBackground(gid, "")
		}
	}
}

// rollBackEarly records, durably, that gid is rolled back before the order
// decided it, then rolls it back, on conn. If gid is not prepared (any
// more: its session gave up on it, or it was decided meanwhile), the
// record is withdrawn and gid forgotten.
func (r *Replica) rollBackEarly(ctx context.Context, conn *pgx.Conn, gid txn.GID) error {
	lit := quoteGID(gid)
	inserted := false
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL synchronous_commit = on"); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, "INSERT INTO _ordo.rolled_back (gid) VALUES ($1) ON CONFLICT DO NOTHING", string(gid))
		inserted = tag.RowsAffected() == 1
		return err
	})
	if err != nil {
		return fmt.Errorf("record the early rollback: %w", err)
	}
	r.rolledMu.Lock()
	r.rolledBack[gid] = true
	r.rolledMu.Unlock()
	if _, err := conn.Exec(ctx, "ROLLBACK PREPARED "+lit); err != nil {
		if !notPrepared(err) {
			return err // recorded: the loop rolls it back, or applies it, when decided
		}
		r.log.Debug("brute-force rollback: no such prepared transaction", "gid", gid)
		if !inserted {
			return nil // recorded by an earlier rollback, which stands
		}
		r.rolledMu.Lock()
		delete(r.rolledBack, gid)
		delete(r.orphans, gid)
		r.rolledMu.Unlock()
		if _, err := conn.Exec(ctx, "DELETE FROM _ordo.rolled_back WHERE gid = "+lit); err != nil {
			r.log.Debug("brute-force rollback: withdraw the record", "gid", gid, "err", err)
		}
		return nil
	}
	r.m.bruteForce.Inc()
	return nil
}

// orphan notes that no session waits for gid any more, though the order
// has not decided it.
func (r *Replica) orphan(gid txn.GID) {
	r.rolledMu.Lock()
	r.orphans[gid] = true
	r.rolledMu.Unlock()
}

// forgetRolledBack forgets gid, never proposed: nothing will decide it.
func (r *Replica) forgetRolledBack(gid txn.GID) {
	r.rolledMu.Lock()
	delete(r.rolledBack, gid)
	delete(r.orphans, gid)
	r.rolledMu.Unlock()
}

// takeDecided takes gid, whose decision the delivery loop is carrying out, out
// of the orphans and says whether it was rolled back early.
func (r *Replica) takeDecided(gid txn.GID) (rolledBack bool) {
	r.rolledMu.Lock()
	defer r.rolledMu.Unlock()
	delete(r.orphans, gid)
	return r.rolledBack[gid]
}

// notPrepared reports whether err says the prepared transaction does not
// exist (42704).
func notPrepared(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42704"
}

// quoteGID returns gid as an SQL string literal.
func quoteGID(gid txn.GID) string {
	return "'" + strings.ReplaceAll(string(gid), "'", "''") + "'"
}

// rollbackConflicting rolls back, before a remote transaction is applied,
// this node's undecided prepared transactions that write a key it writes:
// they hold the row locks the apply needs, and they will fail
// certification anyway (each took its snapshot before this apply, and the
// remote transaction is ordered before it). Rolling them back now instead
// of when the applier finds itself blocked saves the blocker check's
// delay; should the order commit one after all, finishLocal applies its
// write set.
func (r *Replica) rollbackConflicting(ctx context.Context, keys []txn.KeyMode) {
	var gids []txn.GID
	r.mu.Lock()
	for gid, w := range r.waiters {
		if w.decided {
			continue
		}
		for _, k := range keys {
			if k.Mode&txn.X != 0 && w.writes[k.Key] {
				gids = append(gids, gid)
				break
			}
		}
	}
	r.mu.Unlock()
	for _, gid := range gids {
		if r.isRolledBack(gid) {
			continue
		}
		if err := r.rollBackEarly(ctx, r.conn, gid); err != nil {
			// The applier's blocker check remains the safety net.
			r.log.Debug("early rollback of a conflicting prepared transaction", "gid", gid, "err", err)
		}
	}
}

func (r *Replica) isRolledBack(gid txn.GID) bool {
	r.rolledMu.Lock()
	defer r.rolledMu.Unlock()
	return r.rolledBack[gid]
}
