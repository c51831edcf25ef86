package session

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ordo-db/ordo/internal/capture"
	"github.com/ordo-db/ordo/internal/termination"
	"github.com/ordo-db/ordo/internal/txn"
)

// quickProbe asks whether the open transaction has an xid, and whether
// the session has a temporary schema (it has none until it creates a
// temporary table). Without one, it cannot have written a temporary table
// and the full probe is not needed.
const quickProbe = `SELECT pg_current_xact_id_if_assigned() IS NOT NULL, pg_my_temp_schema() <> 0`

// probe asks PostgreSQL what the open transaction wrote: whether it has an
// xid, and whether it holds write locks on temporary or permanent
// relations. A failed PREPARE would roll the transaction back, so the probe
// comes first.
const probe = `SELECT pg_current_xact_id_if_assigned() IS NOT NULL,
  coalesce(bool_or(c.relpersistence = 't'), false),
  coalesce(bool_or(c.relpersistence <> 't' AND n.nspname NOT IN ('pg_catalog', '_ordo')), false)
FROM pg_locks l
JOIN pg_class c ON c.oid = l.relation
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE l.pid = pg_backend_pid() AND l.locktype = 'relation'
  AND l.mode IN ('RowExclusiveLock', 'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock')`

type written struct {
	xid, temp, permanent bool
}

func (s *session) probe(ctx context.Context) (written, error) {
	res, err := s.be.Exec(ctx, quickProbe)
	if err != nil {
		return written{}, err
	}
	if res.Err == nil && len(res.Rows) == 1 && len(res.Rows[0]) == 2 && (res.Rows[0][0] != "t" || res.Rows[0][1] != "t") {
		xid := res.Rows[0][0] == "t"
		return written{xid: xid, permanent: xid}, nil
	}
	if res.Err == nil {
		res, err = s.be.Exec(ctx, probe)
	}
	if err != nil {
		return written{}, err
	}
	if res.Err != nil {
		if s.aborted.Load() || canceled(res.Err) {
			// A brute-force cancel that arrived late hit the probe.
			s.rollback(ctx)
			return written{}, errBruteForce
		}
		return written{}, res.Err
	}
	if len(res.Rows) != 1 || len(res.Rows[0]) != 3 {
		return written{}, pgErr(codeInternal, "ordo: unexpected reply to the write probe")
	}
	r := res.Rows[0]
	return written{xid: r[0] == "t", temp: r[1] == "t", permanent: r[2] == "t"}, nil
}

// prepare decides how the open transaction ends and, if it must be
// replicated, prepares it as a new gid, with then appended to the PREPARE
// (in the same round trip). replicate is false when it should commit
// locally (read-only, or only temporary tables written; nothing is done
// then). what names the transaction in errors.
func (s *session) prepare(ctx context.Context, then, what string) (gid txn.GID, replicate bool, prepared time.Time, err error) {
	t0 := time.Now()
	seqs, err := s.sequenceChanges(ctx)
	if err != nil {
		return "", false, t0, err
	}
	w, err := s.probe(ctx)
	if err != nil {
		return "", false, t0, err
	}
	if !seqs && (!w.xid || (w.temp && !w.permanent)) {
		return "", false, t0, nil
	}
	if w.temp {
		s.rollback(ctx)
		return "", false, t0, pgErr(codeFeatureNotSupported, "ordo: a %s that writes both temporary and replicated tables cannot be replicated; it was rolled back", what)
	}
	if err := s.afterDDL(ctx); err != nil {
		s.rollback(ctx)
		return "", false, t0, err
	}
	gid = s.consGID()
	t0 = s.h.m.since(stageProbe, t0)
	res, err := s.be.Exec(ctx, "PREPARE TRANSACTION '"+string(gid)+"'"+then)
	if err != nil {
		return "", false, t0, err
	}
	if res.Err != nil {
		// The PREPARE may have succeeded and a later statement of the
		// string (or a brute-force cancel racing with its end) failed:
		// never leave the transaction prepared and unknown to the order.
		s.abandon(gid)
		if s.aborted.Load() || canceled(res.Err) {
			return "", false, t0, errBruteForce
		}
		return "", false, t0, prepareFailed(res.Err)
	}
	return gid, true, s.h.m.since(stagePrepare, t0), nil
}

// commitExplicit terminates the client's open transaction when its COMMIT
// arrives. On success it leaves an empty transaction open, which the
// client's COMMIT (sent on after this returns) ends.
func (s *session) commitExplicit(ctx context.Context) error {
	if err := s.consCommit(ctx); err != nil {
		return err
	}
	gid, replicate, prepared, err := s.prepare(ctx, "; BEGIN", "transaction")
	if err != nil {
		return err
	}
	s.tx.done = true
	if !replicate {
		return s.runNotify(ctx) // commits locally with the client's COMMIT
	}
	if err := s.terminate(ctx, gid, prepared); err != nil {
		s.rollback(ctx) // the empty transaction
		return err
	}
	// The held notifications go into the empty transaction the client's
	// COMMIT ends, so they are sent once the replicated commit is decided.
	return s.runNotify(ctx)
}

// runNotify runs the held LISTEN/UNLISTEN/NOTIFY statements in the open
// transaction.
func (s *session) runNotify(ctx context.Context) error {
	for _, sql := range s.tx.notify {
		res, err := s.be.Exec(ctx, sql)
		if err != nil {
			return err
		}
		if res.Err != nil {
			if canceled(res.Err) {
				s.rollback(ctx)
				return errBruteForce
			}
			return res.Err
		}
	}
	s.tx.notify = nil
	return nil
}

// BeforeReady implements wire.ReadyHolder: it terminates a wrapped
// autocommit statement before the client sees ReadyForQuery.
func (s *session) BeforeReady(ctx context.Context) error {
	defer func() {
		s.consEnd() // its classes, unless its TxnEntry releases them
		s.tx = txState{}
	}()
	if !s.tx.wrapped {
		return nil
	}
	switch s.be.TxStatus() {
	case 'E':
		s.rollback(ctx)
		return nil
	case 'I':
		return nil // the statement ended the block itself (refused earlier)
	}
	gid, replicate, prepared, err := s.prepare(ctx, "", "statement")
	if err != nil {
		return err
	}
	if !replicate {
		_, err := s.be.Exec(ctx, "COMMIT")
		return err
	}
	return s.terminate(ctx, gid, prepared)
}

// afterDDL runs Config.AfterDDL in a transaction that ran DDL.
func (s *session) afterDDL(ctx context.Context) error {
	if len(s.tx.ddl) == 0 || s.h.cfg.AfterDDL == "" {
		return nil
	}
	res, err := s.be.Exec(ctx, s.h.cfg.AfterDDL)
	if err != nil {
		return err
	}
	if res.Err != nil {
		if canceled(res.Err) {
			return errBruteForce
		}
		return fmt.Errorf("ordo: after the transaction's DDL (it was rolled back): %w", res.Err)
	}
	return nil
}

func prepareFailed(err error) error {
	return fmt.Errorf("ordo: could not prepare the transaction for replication (it was rolled back): %w", err)
}

func (s *session) rollback(ctx context.Context) {
	_, _ = s.be.Exec(ctx, "ROLLBACK")
}

// terminate hands the prepared transaction gid to the replica and waits for
// its outcome. The replica commits or rolls back the prepared transaction.
// prepared is when PREPARE TRANSACTION returned.
//
// No fixed deadline covers the whole: the capture waits as long as
// PostgreSQL keeps sending (a large write set takes a while to decode),
// and the replica bounds each proposal, and the wait for the outcome, by
// commit_timeout.
func (s *session) terminate(ctx context.Context, gid txn.GID, prepared time.Time) error {
	if p, ok := s.h.cfg.Replica.(termination.Preparer); ok {
		defer p.Prepared(gid)()
	}
	ws, err := s.h.cfg.Capture.Await(ctx, gid)
	if err != nil {
		s.abandon(gid)
		if errors.Is(err, capture.ErrNoPrimaryKey) {
			return pgErr(codeFeatureNotSupported, "ordo: %v; the transaction was rolled back", err)
		}
		if errors.Is(err, capture.ErrTooLarge) {
			return pgErr(codeProgramLimitExceeded, "ordo: %v; the transaction was rolled back (split it, or raise max_write_set_rows / max_write_set_bytes on every node)", err)
		}
		return pgErr(codeSerializationFailure, "ordo: could not capture the transaction's writes (it was rolled back): %v", err)
	}
	if err := s.consCheckWrites(ws); err != nil {
		s.abandon(gid)
		return err
	}
	captured := s.h.m.since(stageCapture, prepared)
	s.h.cfg.Logger.Debug("session: write set captured", "gid", gid, "after", captured.Sub(prepared))
	records := ws.DDLRecords
	if s.h.cfg.AfterDDL != "" {
		// Ordo's own statement after DDL (sequences into this node's
		// residue class): every node runs its own after a replay.
		records = slices.DeleteFunc(slices.Clone(records), func(r capture.DDLRecord) bool { return r.Query == s.h.cfg.AfterDDL })
	}
	ddl, err := joinDDL(s.tx.ddl, records, s.tx.blocks, len(ws.Rows) > 0)
	if err != nil {
		s.abandon(gid)
		return pgErr(codeFeatureNotSupported, "%v; the transaction was rolled back", err)
	}
	t := &termination.Txn{
		GID:           gid,
		Origin:        s.h.cfg.NodeID,
		SnapshotSeqno: s.tx.snapSeq,
		DDL:           ddl.ddl,
		DDLSettings:   ddl.settings,
		SearchPath:    s.searchPath,
		WriteSet:      ws,
		Label:         s.label,
	}
	s.label = "" // one transaction's name
	keys := ws.Keys()
	for _, k := range ddl.keys {
		keys.Add(k, txn.X)
	}
	for _, k := range objectKeys(ws.DDLDropped) {
		keys.Add(k, txn.X)
	}
	if s.tx.reads.All() {
		t.ReadAll = true
	}
	for _, k := range s.tx.reads.Keys() {
		keys.Add(k, txn.S)
	}
	if esc := keys.Escalate(s.h.cfg.KeyEscalationRows); len(esc) > 0 {
		s.h.cfg.Logger.Debug("session: write keys escalated to whole tables", "gid", gid, "tables", esc)
	}
	t.Keys = keys.Sorted()
	out, err := s.h.cfg.Replica.Terminate(ctx, t)
	s.h.m.since(stageTerminate, captured)
	if err != nil {
		if errors.Is(err, termination.ErrInconsistent) {
			s.abandon(gid)
			return pgErr(codeReadOnly, "ordo: %v", err)
		}
		if errors.Is(err, termination.ErrTooLarge) {
			s.abandon(gid)
			return pgErr(codeProgramLimitExceeded, "ordo: %v; the transaction was rolled back (split it, or raise max_entry_bytes on every node)", err)
		}
		if errors.Is(err, termination.ErrNotReplicated) {
			s.abandon(gid)
			return pgErr(codeSerializationFailure, "ordo: %v; the transaction was rolled back, retry it", err)
		}
		return pgErr(codeResolutionUnknown,
			"ordo: the cluster did not confirm the commit in time (%v); the transaction will be committed everywhere or nowhere, check before retrying", err)
	}
	if !out.Commit {
		return pgErr(codeSerializationFailure, "ordo: could not serialize access due to a concurrent update on another node (%s); retry the transaction", out.Reason)
	}
	if len(s.tx.ddl) > 0 && s.h.cfg.Catalog != nil {
		if _, err := s.h.cfg.Catalog.Refresh(ctx); err != nil {
			s.h.cfg.Logger.Warn("catalog refresh after DDL", "err", err)
		}
	}
	return nil
}

// abandon rolls back a prepared transaction that was never proposed.
func (s *session) abandon(gid txn.GID) {
	ctx := context.Background()
	if s.be.TxStatus() != 'I' {
		s.rollback(ctx) // ROLLBACK PREPARED cannot run inside a block
	}
	_, _ = s.be.Exec(ctx, "ROLLBACK PREPARED '"+strings.ReplaceAll(string(gid), "'", "")+"'")
}
