package session

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ordo-db/ordo/internal/analysis"
	"github.com/ordo-db/ordo/internal/capture"
	"github.com/ordo-db/ordo/internal/catalog"
	"github.com/ordo-db/ordo/internal/termination"
	"github.com/ordo-db/ordo/internal/txn"
	"github.com/ordo-db/ordo/internal/wire"
)

// quickProbe asks whether the open transaction has an xid, and whether
// the session has a temporary schema (it has none until it creates a
// temporary table). Without one, it cannot have written a temporary table
// and the full probe is not needed. Its third column is probeSerializable.
const quickProbe = `SELECT pg_current_xact_id_if_assigned() IS NOT NULL, pg_my_temp_schema() <> 0` + probeSerializable

// probeSerializable asks whether the transaction runs at SERIALIZABLE:
// under dbsm-si and dbsm-rc its reads are then certified (tracksReads),
// whatever made it so (a BEGIN Ordo followed, or a session default Ordo
// does not: dbsm-rc runs a BEGIN without a level at the default).
const probeSerializable = `, current_setting('transaction_isolation') = 'serializable'`

// probeLargeObjects asks whether the open transaction changed large
// objects (capture.LargeObjectProbe): two more columns of either probe.
var probeLargeObjects = ", " + capture.LargeObjectProbe

// probe asks PostgreSQL what the open transaction did: whether it has an
// xid, whether it touched a temporary object (holds any lock on a
// temporary relation, or created or dropped a temporary object, which the
// DDL event triggers note in ordo.temp_touched), and whether it wrote
// replicated state (holds a write lock on a permanent relation, or ran
// DDL the triggers recorded). PostgreSQL cannot PREPARE a transaction
// that touched a temporary object, and a failed PREPARE would roll the
// transaction back, so the probe comes first.
var probe = probeColumns + probeFrom

// probeColumns and probeFrom are the full probe's two halves: a session
// known to have a temporary schema runs it alone (probeAlone), with the
// quick probe's last columns between them.
var probeColumns = `SELECT pg_current_xact_id_if_assigned() IS NOT NULL,
  coalesce(bool_or(c.relpersistence = 't'), false) OR coalesce(current_setting('ordo.temp_touched', true) = 'on', false),
  coalesce(bool_or(c.relpersistence <> 't' AND n.nspname NOT IN ('pg_catalog', '_ordo')
    AND l.mode IN ('RowExclusiveLock', 'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock')), false)
    OR coalesce(current_setting('ordo.ddl_replicated', true) = 'on', false)` + probeLargeObjects

const probeFrom = `
FROM pg_locks l
JOIN pg_class c ON c.oid = l.relation
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE l.pid = pg_backend_pid() AND l.locktype = 'relation'`

// untimed goes with the probe, the first of Ordo's statements that end a
// transaction: the client's statement_timeout is for its own statements,
// and cancelling Ordo's (a PREPARE waits for a WAL flush) would fail a
// commit PostgreSQL makes, reported as if a conflict had aborted it.
// Nothing of the client's runs in the transaction after it.
const untimed = "SET LOCAL statement_timeout = 0"

// quickProbeRC is quickProbe that also reads the prefix committed in the
// probe's own snapshot, dbsm-rc's snapshot_seqno.
const quickProbeRC = quickProbe + committedPrefix

// committedPrefix is the probes' column of dbsm-rc's snapshot_seqno.
const committedPrefix = `, _ordo.committed_prefix()`

// probeLabel reads the transaction's ordo.txn_label as PostgreSQL has it
// now, the last column of either quick probe: PostgreSQL undoes a SET
// of it in a block that rolled back or after a savepoint rolled back to,
// and set_config sets it where Ordo does not look.
const probeLabel = `, coalesce(current_setting('ordo.txn_label', true), '')`

// resetLabel runs right before the PREPARE of a labelled transaction: the
// label names one transaction, so PostgreSQL forgets it as Ordo does. A
// SET in a transaction that is prepared stays in force in the session
// (PostgreSQL treats it as committed), whatever the order decides.
const resetLabel = "RESET ordo.txn_label"

type written struct {
	xid, temp, permanent bool
	// loMeta, loData: it changed large objects (probeLargeObjects).
	loMeta, loData bool
	// prefix is the committed prefix the probe saw (dbsm-rc only).
	prefix uint64
	// serializable: it runs at SERIALIZABLE (probeSerializable).
	serializable bool
	// tempSchema: the session has a temporary schema (the full probe ran).
	tempSchema bool
	// label is the transaction's ordo.txn_label (probeLabel), if labelOK.
	label   string
	labelOK bool
}

func (s *session) probe(ctx context.Context) (written, error) {
	if s.tempSchema && s.be.TxRowsChanged() > 0 {
		return s.probeAlone(ctx)
	}
	q, cols := quickProbe+probeLargeObjects+probeLabel, 6
	if s.rc {
		q, cols = quickProbeRC+probeLargeObjects+probeLabel, 7
	}
	res, err := s.be.Exec(ctx, untimed, q)
	if err != nil {
		return written{}, err
	}
	var prefix uint64
	var serializable, loMeta, loData, labelOK bool
	var label string
	if res.Err == nil && len(res.Rows) == 1 && len(res.Rows[0]) == cols {
		r := res.Rows[0]
		serializable = r[2] == "t"
		if s.rc {
			prefix, _ = strconv.ParseUint(r[3], 10, 64)
		}
		loMeta, loData = r[cols-3] == "t", r[cols-2] == "t"
		label, labelOK = r[cols-1], true
		if r[0] != "t" || r[1] != "t" {
			xid := r[0] == "t"
			return written{xid: xid, permanent: xid, prefix: prefix, serializable: serializable, loMeta: loMeta, loData: loData, label: label, labelOK: labelOK}, nil
		}
	}
	if res.Err == nil {
		res, err = s.be.Exec(ctx, probe)
	}
	if err != nil {
		return written{}, err
	}
	if res.Err != nil {
		return written{}, s.failedBeforePrepare(ctx, res)
	}
	if len(res.Rows) != 1 || len(res.Rows[0]) != 5 {
		return written{}, pgErr(codeInternal, "ordo: unexpected reply to the write probe")
	}
	s.tempSchema = true
	return fullProbe(res.Rows[0], prefix, serializable, label, labelOK), nil
}

// fullProbe reads the first five columns of the full probe's row.
func fullProbe(r []string, prefix uint64, serializable bool, label string, labelOK bool) written {
	return written{xid: r[0] == "t", temp: r[1] == "t", permanent: r[2] == "t" || r[3] == "t" || r[4] == "t",
		prefix: prefix, serializable: serializable, loMeta: r[3] == "t", loData: r[4] == "t", tempSchema: true, label: label, labelOK: labelOK}
}

// probeAlone is the write probe of a transaction that changed rows in a
// session known to have a temporary schema (a temporary schema stays the
// session's): there the quick probe of a transaction with an xid only
// leads to the full probe, so the full probe runs at once, carrying the
// quick probe's label (and, under dbsm-rc, its committed prefix): one
// round trip instead of two. Its answers are the two probes' in one.
// Other transactions of such a session (a block that only read) keep the
// quick probe: the full one reads pg_locks, which costs PostgreSQL
// 0.5–1.5 ms (performance.md).
func (s *session) probeAlone(ctx context.Context) (written, error) {
	q, cols := probeColumns+probeSerializable+probeLabel+probeFrom, 7
	if s.rc {
		q, cols = probeColumns+probeSerializable+committedPrefix+probeLabel+probeFrom, 8
	}
	res, err := s.be.Exec(ctx, untimed, q)
	if err != nil {
		return written{}, err
	}
	if res.Err != nil {
		return written{}, s.failedBeforePrepare(ctx, res)
	}
	if len(res.Rows) != 1 || len(res.Rows[0]) != cols {
		return written{}, pgErr(codeInternal, "ordo: unexpected reply to the write probe")
	}
	r := res.Rows[0]
	var prefix uint64
	if s.rc {
		prefix, _ = strconv.ParseUint(r[6], 10, 64)
	}
	return fullProbe(r, prefix, r[5] == "t", r[cols-1], true), nil
}

// prepareMark runs before the PREPARE TRANSACTION of a transaction whose
// statements changed no rows: a transactional logical message of Ordo's
// (capture ignores it), so that the decoding of the prepared transaction
// has something to send. PostgreSQL sends no PREPARE for a transaction
// that changed nothing it decodes (one that only locked rows, took an
// ACCESS EXCLUSIVE lock, or called txid_current(): each has an xid), and
// the commit would wait for a write set that never comes. (A transaction
// whose statements changed rows has them decoded; the mark would only
// show in other consumers of the node's logical decoding.)
const prepareMark = "SELECT _ordo.prepare_mark()"

// prepare decides how the open transaction ends and, if it must be
// replicated, prepares it as a new gid, with the statements then run
// after the PREPARE (in the same round trip). replicate is false when it should commit
// locally (read-only, or only temporary tables written; nothing is done
// then). what names the transaction in errors.
func (s *session) prepare(ctx context.Context, then []string, what string) (gid txn.GID, replicate bool, prepared time.Time, err error) {
	t0 := time.Now()
	if s.preparesAtOnce() {
		gid, prepared, apart, err := s.prepareAtOnce(ctx, then)
		if !apart {
			return gid, err == nil, prepared, err
		}
		s.h.m.prepares.WithLabelValues(probedFellBack).Inc()
	} else {
		s.h.m.prepares.WithLabelValues(probedApart).Inc()
	}
	w, err := s.probe(ctx) // first: it lifts the client's statement_timeout
	if err != nil {
		return "", false, t0, err
	}
	w.temp = w.temp || s.tx.tempNamed
	if w.tempSchema || w.loMeta || w.loData {
		s.probeApart = true // (a temporary schema stays the session's)
	}
	resetStale := false
	if w.labelOK {
		resetStale = s.postgresLabel(w.label)
	}
	seqs, err := s.sequenceChanges(ctx)
	if err != nil {
		return "", false, t0, err
	}
	if !seqs && (!w.xid || (w.temp && !w.permanent)) {
		return "", false, t0, nil // read only, or only temporary objects: commits here
	}
	if w.temp {
		s.rollback(ctx)
		return "", false, t0, pgErr(codeFeatureNotSupported,
			"ordo: this %s used temporary objects and also changed replicated tables, sequences or schema, so it cannot be replicated (PostgreSQL cannot PREPARE a transaction that touched a temporary object); it was rolled back. Do the replicated changes in a transaction of their own", what)
	}
	if err := s.afterDDL(ctx); err != nil {
		s.rollback(ctx)
		return "", false, t0, err
	}
	if s.tx.los, err = s.largeObjects(ctx, w.loMeta, w.loData); err != nil {
		s.rollback(ctx)
		return "", false, t0, err
	}
	if s.serialOnDemand && w.serializable {
		// At SERIALIZABLE its reads are certified, as under dbsm; all of
		// them if they were not followed from its first snapshot (a
		// session default Ordo did not know of).
		s.tx.serializable = true
		if !s.tx.readsFromStart {
			s.tx.reads.AddAll()
		}
	}
	if s.rc && s.tx.serializable {
		// One snapshot for the whole transaction, which its reads are
		// certified from: the prefix it holds (the probe ran in it),
		// or the applied prefix before it was taken, whichever is
		// older.
		if !s.tx.snapshot || w.prefix < s.tx.snapSeq {
			s.tx.snapSeq = w.prefix
		}
	} else if s.rc {
		// READ COMMITTED: each statement saw the latest commits, and an
		// UPDATE that waited for a lock worked on the version committed
		// meanwhile. So the transaction is certified against the prefix
		// committed now, while it still holds every lock it took: a
		// remote transaction applied here since its first statement
		// either came before its writes to the same rows (it saw it) or
		// waited for its locks, and an apply waiting for an uncertified
		// transaction's lock aborts it (replica, bruteforce.go).
		s.tx.snapSeq = w.prefix
		if vp, ok := s.h.cfg.Replica.(termination.VisiblePrefixer); ok {
			// Local commits prove themselves after they are visible.
			s.tx.snapSeq = max(s.tx.snapSeq, vp.VisiblePrefix(ctx))
		}
	}
	if s.rc && len(s.tx.locks) > 0 {
		// Its row locks (SELECT … FOR UPDATE) are held since they were
		// taken, and a remote transaction that locked the same row
		// writes no row here that would wait for them: it is certified
		// from before its first lock (at most more aborts than its
		// level needs, never fewer).
		s.tx.snapSeq = min(s.tx.snapSeq, s.tx.lockSnap)
	}
	gid = s.consGID()
	t0 = s.h.m.since(stageProbe, t0)
	var stmts []string
	if s.be.TxRowsChanged() == 0 {
		// (Its INSERT, UPDATE, DELETE or MERGE changed rows: decoding
		// has them, and sends the PREPARE without a mark.)
		stmts = append(stmts, prepareMark)
	}
	if s.label != "" || resetStale {
		stmts = append(stmts, resetLabel)
	}
	stmts = append(stmts, "PREPARE TRANSACTION '"+string(gid)+"'")
	stmts = append(stmts, then...)
	res, err := s.be.Exec(ctx, stmts[0], stmts[1:]...)
	if err != nil {
		return "", false, t0, err
	}
	if err := s.preparedReply(res, gid); err != nil {
		return "", false, t0, err
	}
	return gid, true, s.h.m.since(stagePrepare, t0), nil
}

// failedBeforePrepare ends the transaction that one of Ordo's statements
// before its PREPARE failed in (res: that statement's reply): nothing of
// it can commit.
func (s *session) failedBeforePrepare(ctx context.Context, res *wire.Result) error {
	brute := s.bruteForced(res) // (a cancel that arrived late hit it)
	s.rollback(ctx)
	if brute {
		return errBruteForce
	}
	return res.Err
}

// preparedReply checks the reply to a string that ran PREPARE TRANSACTION
// gid (and perhaps statements after it).
func (s *session) preparedReply(res *wire.Result, gid txn.GID) error {
	if res.Err != nil {
		// The PREPARE may have succeeded and a later statement of the
		// string (or a brute-force cancel racing with its end) failed:
		// never leave the transaction prepared and unknown to the order.
		s.abandon(gid)
		if s.bruteForced(res) {
			return errBruteForce
		}
		return prepareFailed(res.Err)
	}
	if slices.Contains(res.Tags, "ROLLBACK") {
		// PostgreSQL answers PREPARE TRANSACTION in a failed transaction
		// by rolling it back, without an error: nothing was prepared, and
		// waiting for its write set would only time out.
		return pgErr(codeInFailedTransaction,
			"ordo: the transaction had failed before its commit (one of Ordo's own statements in it failed; the node log says which); it was rolled back")
	}
	return nil
}

// postgresLabel takes label, the transaction's ordo.txn_label as
// PostgreSQL has it before its PREPARE (probeLabel, prepare_check), for
// the transaction's, unless a retry pinned its own. resetStale: it is a
// label used up earlier in the batch, which PostgreSQL must forget.
func (s *session) postgresLabel(label string) (resetStale bool) {
	if s.labelPinned {
		return false
	}
	s.label = label // PostgreSQL's (see probeLabel)
	s.labelUnseen = false
	if s.labelResetPending && s.label == s.labelUsed {
		// A label used up earlier in this batch, whose reset waits
		// for the batch's end: it is not this transaction's.
		s.label, resetStale = "", true
	}
	if r := s.tx.retry.candidate(); r != nil {
		r.label = s.label // every attempt's, as PostgreSQL had it
	}
	return resetStale
}

// probeSavepoint is the savepoint prepareAtOnce checks the transaction
// in: a refusal of _ordo.prepare_check is rolled back to it.
const probeSavepoint = "ordo_probe"

// preparesAtOnce reports whether the transaction is probed in the round
// trip of its PREPARE (prepareAtOnce) rather than in one before it: it
// changed rows (so it has an xid, and needs no mark), and nothing Ordo
// must run between the probe and the PREPARE is pending: no sequence
// replay, no DDL (afterDDL), no dbsm-rc snapshot taken from the probe,
// not SERIALIZABLE under dbsm-si (the probe tells). A read-only
// transaction is probed apart: the check would refuse it, as it refuses
// one at SERIALIZABLE Ordo did not expect.
func (s *session) preparesAtOnce() bool {
	return !s.probeApart && !s.rc && s.be.TxRowsChanged() > 0 && s.tx.seqBefore == nil && len(s.tx.ddl) == 0 &&
		!(s.serialOnDemand && s.tx.isolation == "serializable")
}

// prepareAtOnce probes and prepares the open transaction in one round
// trip: in a savepoint, _ordo.prepare_check (apply, bootstrap.go) makes
// sure the transaction is one the probe would send on to its PREPARE
// (it has an xid, the session no temporary schema, it changed no large
// objects), and takes its label; the PREPARE follows in the same string.
// The probe's round trip was one of the five a replicated commit makes
// (docs/performance.md). If the check refuses, the transaction is rolled
// back to the savepoint, as it was, and apart is true: the caller probes
// it. Errors are prepare's.
func (s *session) prepareAtOnce(ctx context.Context, then []string) (gid txn.GID, prepared time.Time, apart bool, err error) {
	t0 := time.Now()
	gid = s.consGID()
	// The statements before the PREPARE, by position: Tags holds the
	// tag of each one that completed, so len(Tags) is the position of
	// the one that failed.
	const (
		atCheck   = 2 // SELECT _ordo.prepare_check()
		atPrepare = 4 // PREPARE TRANSACTION
	)
	stmts := append([]string{untimed, "SAVEPOINT " + probeSavepoint, "SELECT _ordo.prepare_check()",
		"RELEASE SAVEPOINT " + probeSavepoint, "PREPARE TRANSACTION '" + string(gid) + "'"}, then...)
	res, err := s.be.Exec(ctx, stmts[0], stmts[1:]...)
	if err != nil {
		return "", t0, false, err
	}
	if len(res.Tags) > atCheck {
		// The check passed: its row is the transaction's label, which
		// a failure after it records the abort under (labelFailed) and
		// a retry carries, as when the probe ran apart.
		if len(res.Rows) == 0 || len(res.Rows[0]) != 1 {
			s.abandon(gid)
			return "", t0, false, pgErr(codeInternal, "ordo: unexpected reply to the write probe")
		}
		s.postgresLabel(res.Rows[0][0]) // (prepare_check reset it in PostgreSQL)
		s.h.m.prepares.WithLabelValues(probedWithPrepare).Inc()
	}
	if res.Err != nil && len(res.Tags) < atPrepare {
		var pe *pgconn.PgError
		if len(res.Tags) == atCheck && !s.bruteForced(res) && errors.As(res.Err, &pe) && !strings.HasPrefix(pe.Code, "57") {
			// The check refused (or failed: it is only a shortcut). A
			// cancel is not undone, as it would not be in the probe.
			s.probeApart = true
			res, err = s.be.Exec(ctx, "ROLLBACK TO SAVEPOINT "+probeSavepoint, "RELEASE SAVEPOINT "+probeSavepoint)
			if err != nil {
				return "", t0, false, err
			}
			if res.Err == nil {
				return "", t0, true, nil
			}
		}
		return "", t0, false, s.failedBeforePrepare(ctx, res) // nothing was prepared
	}
	if err := s.preparedReply(res, gid); err != nil {
		return "", t0, false, err
	}
	return gid, s.h.m.since(stagePrepare, t0), false, nil
}

// commitExplicit terminates the client's open transaction when its COMMIT
// arrives. On success it leaves an empty transaction open, which the
// client's COMMIT (sent on after this returns) ends. chain: the client's
// COMMIT AND CHAIN starts the next block from that empty transaction,
// which is then begun at the level the block ran at (a chained
// SERIALIZABLE block ran at READ COMMITTED under dbsm-rc: session fuzzer,
// seed 1796195836661307025).
func (s *session) commitExplicit(ctx context.Context, chain bool) error {
	if err := s.consCommit(ctx); err != nil {
		s.labelFailed(ctx, err)
		return err
	}
	begin := "BEGIN"
	if chain {
		// (READ WRITE: a block that is replicated wrote, which a READ
		// ONLY one cannot; its chain is read-write too, whatever
		// default_transaction_read_only says.)
		level := " ISOLATION LEVEL " + strings.ToUpper(s.runLevel(s.tx.isolation))
		if s.rc && s.tx.isolation == "" {
			// Under dbsm-rc a block that asked for no level ran at the
			// session's, and so does its chain, as in PostgreSQL
			// (runLevel has no level for it: the chain ran at
			// REPEATABLE READ).
			level = ""
		}
		begin = "BEGIN" + level + " READ WRITE"
	}
	gid, replicate, prepared, err := s.prepare(ctx, []string{begin}, "transaction")
	if err != nil {
		s.labelFailed(ctx, err)
		return err
	}
	s.tx.done = true
	if !replicate {
		// It commits here with the client's COMMIT; its NOTIFYs are
		// ordered for the other nodes' listeners first.
		if err := s.orderNotify(ctx, s.notifications()); err != nil {
			s.rollback(ctx)
			return err
		}
		return s.runNotify(ctx)
	}
	if err := s.terminate(ctx, gid, prepared); err != nil {
		s.labelFailed(ctx, err) // (before Replica.Terminate took the label)
		s.rollback(ctx)         // the empty transaction
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
			if s.bruteForced(res) {
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
	injectedRan := s.wrapInjected && s.be.InjectedBegins() > s.wrapInjectedAt
	ours := s.wrapExec || injectedRan
	s.wrapExec, s.wrapInjected = false, false
	if s.be.TxStatus() == 'E' && (s.tx.wrapped || ours) {
		// Whether a BEGIN of the client's ran in the block Ordo opened.
		// Begins is exact against a count taken at a boundary (wrap);
		// one taken mid-batch (beginHere) may miss a BEGIN sent before
		// it whose reply had not arrived, so an injected block counts
		// the client's BEGINs after its own.
		clientBegan := s.be.Begins() != s.wrapBegins
		if injectedRan {
			clientBegan = s.be.BeginsSinceInjected() > 0
		}
		if ours && !clientBegan {
			// A block Ordo opened failed, and no BEGIN of the client's
			// made it theirs: PostgreSQL would have rolled back the
			// implicit transaction.
			retry := s.tx.retry.candidate()
			s.rollback(ctx)
			if held := s.be.HeldConflict(); held != nil && retry != nil {
				// Its statement met a conflict (held back, retry.go).
				defer s.endWrapped()
				err := s.retry(ctx, retry, held)
				s.labelFailed(ctx, err)
				return err
			}
			s.endWrapped()
			s.labelFailed(ctx, errStatementFailed)
			return nil
		}
		// The failed block is the client's (Ordo's BEGIN was skipped
		// after an error earlier in the batch, or the client's BEGIN
		// ran in it).
		s.tx.wrapped = false
		return nil
	}
	if !s.tx.wrapped {
		// Nothing wrapped is open (a COMMIT of a split query ended it),
		// or a BEGIN made it the client's own block.
		return s.unexecutedEnd(ctx)
	}
	if s.clientBeganIn() && s.be.TxStatus() != 'I' {
		// The client's BEGIN ran in the block Ordo opened: as in
		// PostgreSQL, what ran before it is part of the client's block,
		// which stays open (failed or not).
		s.tx.wrapped = false
		return nil
	}
	defer s.endWrapped()
	switch s.be.TxStatus() {
	case 'E':
		s.rollback(ctx)
		s.labelFailed(ctx, errStatementFailed)
		return nil
	case 'I':
		s.labelFailed(ctx, errStatementFailed)
		return nil // the statement ended the block itself (refused earlier)
	}
	retry := s.tx.retry.candidate()
	if !s.be.HeldComplete() {
		retry = nil // its statement did not complete (a Bind without an Execute), or the client saw it
	}
	err := s.finishWrapped(ctx)
	if retry != nil && conflict(err) {
		err = s.retry(ctx, retry, err)
	}
	s.labelFailed(ctx, err)
	return err
}

// clientBeganIn reports whether a BEGIN of the client's ran in the
// wrapped block (Ordo's) since it was opened, making it the client's.
// Exact once PostgreSQL answered what was sent.
func (s *session) clientBeganIn() bool {
	if s.tx.injected {
		return s.be.BeginsSinceInjected() > 0
	}
	return s.be.Begins() > s.tx.begins
}

// boundEnd is a COMMIT that ended the implicit transaction of Ordo's
// block at its Bind, in unit unit, Backend.Begins being begins then
// (session.boundEnd).
type boundEnd struct {
	unit   uint64
	begins int64
}

// unexecutedEnd ends Ordo's block at the end of a unit in which the
// client bound a COMMIT of the implicit transaction and never executed
// it. The session took it as run at its Bind: the transaction was
// terminated there, leaving open the empty block the COMMIT's Execute
// would have ended. PostgreSQL's Sync commits the implicit transaction
// instead. Left open, the block took the client's next autocommit
// statements, told they succeeded, and never committed or replicated
// them (compatibility.md). It is committed here, with what the batch
// read in it.
func (s *session) unexecutedEnd(ctx context.Context) error {
	be := s.boundEnd
	s.boundEnd = boundEnd{}
	if be.unit == 0 || be.unit != s.unit || s.be.TxStatus() != 'T' || s.be.Begins() != be.begins {
		// Executed (PostgreSQL ended the block), or a BEGIN of the
		// client's ran after it, making the block theirs. (The block's
		// ReadyForQuery made s.tx active: the session took it for the
		// client's.)
		return nil
	}
	defer s.endWrapped()
	res, err := s.be.Exec(ctx, "COMMIT")
	if err == nil {
		err = res.Err
	}
	return err
}

// errStatementFailed stands for the error of an autocommit statement that
// PostgreSQL or Ordo refused, which the client already has.
var errStatementFailed = errors.New("the statement failed")

// labelFailed records, through the order, that the labelled transaction
// whose commit the client asked for (its COMMIT, or its autocommit
// statement) ended with err before its commit reached the order: the
// label is still unused then (Terminate takes it). The outcome check
// answered "unknown" for such a label for good, so a client that lost its
// connection could not tell it from a commit still on its way. Nothing is
// recorded when err says the outcome is unknown (08007: an entry under the
// label, of an earlier attempt, may still commit). Either way the label
// was this transaction's: it no longer names the client's next one (the
// next statement took it, and its commit answered "committed" for the
// operation that had failed).
func (s *session) labelFailed(ctx context.Context, err error) {
	if err == nil || s.label == "" && !s.labelUnseen {
		return
	}
	label := s.label
	if s.labelUnseen && s.be.TxStatus() == 'I' {
		// A set_config may have set it where Ordo does not look:
		// PostgreSQL's is the one (its transaction is over, so a SET
		// in it that rolled back is undone).
		if v, ok := s.takeLabel(ctx); ok {
			label = v
		}
	}
	if label != "" {
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != codeResolutionUnknown {
			if la, ok := s.h.cfg.Replica.(termination.LabelAborter); ok {
				la.AbortLabelled(s.h.nextGID(), label)
			}
		}
		s.labelUsed = label
	}
	s.label, s.labelLocal = "", false // one transaction's name
	// PostgreSQL forgets it too (the RESET before the PREPARE, if one ran,
	// was rolled back with the transaction): now, or once the failed
	// block the client still has to end is over.
	s.labelResetPending = true
	if s.be.TxStatus() == 'I' {
		s.takeLabel(ctx)
	}
}

// takeLabel reads and resets ordo.txn_label in PostgreSQL, outside a
// transaction; until that succeeds the reset stays pending (an Exec
// mid-batch is not possible: ErrNotAtBoundary).
func (s *session) takeLabel(ctx context.Context) (string, bool) {
	res, err := s.be.Exec(ctx, "SELECT coalesce(current_setting('ordo.txn_label', true), '')", resetLabel)
	if err == nil && res.Err != nil {
		err = res.Err
	}
	if err != nil || len(res.Rows) != 1 || len(res.Rows[0]) != 1 {
		s.h.cfg.Logger.Debug("session: forget a used label", "err", err)
		return "", false
	}
	s.labelResetPending, s.labelUnseen = false, false
	return res.Rows[0][0], true
}

// finishWrapped ends the wrapped transaction of an autocommit statement:
// it commits here or is replicated.
func (s *session) finishWrapped(ctx context.Context) error {
	gid, replicate, prepared, err := s.prepare(ctx, nil, "statement")
	if err != nil {
		return err
	}
	if !replicate {
		// Its held notifications (SELECT pg_notify(…)) are ordered for
		// the other nodes' listeners, then sent here at the commit.
		if err := s.orderNotify(ctx, s.notifications()); err != nil {
			s.rollback(ctx)
			return err
		}
		// PostgreSQL's own error at COMMIT (a deferred constraint of a
		// temporary table) is the statement's.
		run := append(slices.Clone(s.tx.notify), "COMMIT")
		res, err := s.be.Exec(ctx, run[0], run[1:]...)
		if err != nil {
			return err
		}
		return res.Err
	}
	if err := s.terminate(ctx, gid, prepared); err != nil {
		return err
	}
	// Committed: its notifications go to this node's listeners (the
	// others send them as they apply it).
	for _, sql := range s.tx.notify {
		res, err := s.be.Exec(ctx, sql)
		if err != nil {
			return err
		}
		if res.Err != nil {
			s.h.cfg.Logger.Warn("session: a notification of a committed transaction could not be sent", "err", res.Err)
		}
	}
	return nil
}

// endWrapped forgets the wrapped transaction that ended, and releases its
// conflict classes (cons), unless its TxnEntry releases them.
func (s *session) endWrapped() {
	s.consEnd()
	s.tx = txState{}
	if s.be.TxStatus() == 'I' {
		// Over: no relayed ReadyForQuery says so (BeforeReady's is
		// Ordo's), and an Abort that raced with its end must not fail
		// the client's next transaction.
		s.resetAborted()
		s.inTxn.Store(false)
	}
}

// afterDDL runs Config.AfterDDL in a transaction that ran DDL.
func (s *session) afterDDL(ctx context.Context) error {
	if err := s.literalDefaults(ctx); err != nil {
		return err
	}
	if err := s.materializedKeys(ctx); err != nil {
		return err
	}
	if len(ranDDL(s.tx.ddl)) == 0 || s.h.cfg.AfterDDL == "" {
		return nil
	}
	_, err := s.execOwn(ctx, "after the transaction's DDL", s.h.cfg.AfterDDL)
	return err
}

// prepareFailed is the error of a PREPARE TRANSACTION that failed (the
// transaction was rolled back). An error PostgreSQL raises at commit (a
// deferred constraint) reaches the client as PostgreSQL raised it; its
// refusal to prepare a transaction (a WITH HOLD cursor, an exported
// snapshot) says why Ordo cannot replicate it.
func prepareFailed(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == codeFeatureNotSupported && strings.HasPrefix(pe.Message, "cannot PREPARE") {
		e := *pe
		e.Message = "ordo: this transaction cannot be replicated and was rolled back: PostgreSQL cannot prepare" +
			strings.TrimPrefix(pe.Message, "cannot PREPARE") + ", and Ordo replicates a transaction by preparing it"
		return &e
	}
	if errors.As(err, &pe) {
		return pe
	}
	return fmt.Errorf("ordo: could not prepare the transaction for replication (it was rolled back): %w", err)
}

// execOwn runs Ordo's own statements in the client's transaction before
// its PREPARE; what names them in an error.
func (s *session) execOwn(ctx context.Context, what, sql string, more ...string) (*wire.Result, error) {
	res, err := s.be.Exec(ctx, sql, more...)
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		if s.bruteForced(res) {
			return nil, errBruteForce
		}
		return nil, fmt.Errorf("ordo: %s (the transaction was rolled back): %w", what, res.Err)
	}
	return res, nil
}

// rollback ends the open transaction. A query cancel pending in the
// backend (a statement timeout that fired as a statement ended, a late
// brute-force cancel) can fail the ROLLBACK itself and leave the
// transaction open, failed, under a client that believes it ended: the
// cancel is spent then, and the ROLLBACK is sent again.
func (s *session) rollback(ctx context.Context) {
	for range 3 {
		res, err := s.be.Exec(ctx, "ROLLBACK")
		if err != nil || res.Err == nil || s.be.TxStatus() == 'I' {
			return
		}
	}
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
		e := pgErr(codeSerializationFailure, "ordo: could not capture the transaction's writes (it was rolled back): %v", err)
		if errors.Is(err, capture.ErrEnded) {
			// Rolled back before its write set was claimed (an apply
			// needed its locks): a conflict, never proposed.
			return e
		}
		return unordered{e} // (not run again: a capture that stalled would stall again)
	}
	ws.LargeObjects = s.tx.los
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
	ddl, err := joinDDL(ranDDL(s.tx.ddl), records, s.tx.blocks, len(ws.Rows) > 0)
	if err != nil {
		s.abandon(gid)
		return pgErr(codeFeatureNotSupported, "%v; the transaction was rolled back", err)
	}
	ws.Notify = s.notifications()
	t := &termination.Txn{
		GID:           gid,
		Origin:        s.h.cfg.NodeID,
		SnapshotSeqno: s.tx.snapSeq,
		Serializable:  s.tx.serializable,
		DDL:           ddl.ddl,
		DDLSettings:   ddl.settings,
		DDLRowsBefore: ddl.rowsBefore,
		SearchPath:    s.searchPath,
		WriteSet:      ws,
		Label:         s.label,
	}
	s.label = "" // one transaction's name
	keys := ws.Keys()
	if cat := s.h.cfg.Catalog.Current(); cat != nil {
		granuleKeys(cat, ws, keys)
		s.tx.gran.note(cat.GranuleSeqno())
	}
	if s.tx.gran.mixed && s.h.cfg.Replica.Name() != termination.CONS {
		s.abandon(gid)
		return pgErr(codeSerializationFailure, "ordo: the granule columns of the conflict classes changed while the transaction ran (its keys would mix two configurations); it was rolled back, retry it")
	}
	t.GranuleSeqno = s.tx.gran.seqno
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
	for _, k := range s.tx.locks {
		keys.Add(k, txn.X) // rows it locked: as if written
	}
	if esc := keys.Escalate(s.h.cfg.KeyEscalationRows); len(esc) > 0 {
		s.h.cfg.Logger.Debug("session: write keys escalated to whole tables", "gid", gid, "tables", esc)
	}
	t.Keys = keys.Sorted()
	out, err := s.h.cfg.Replica.Terminate(ctx, t)
	s.h.m.since(stageTerminate, captured)
	if err != nil {
		if errors.Is(err, termination.ErrInconsistent) || errors.Is(err, termination.ErrStopped) {
			s.abandon(gid)
			return pgErr(codeReadOnly, "ordo: %v", err)
		}
		if errors.Is(err, termination.ErrNotUTF8) {
			s.abandon(gid)
			return pgErr(codeCharacterNotInRepertoire, "ordo: %v; Ordo replicates text as UTF-8, so the transaction was rolled back (the database's encoding stores any bytes: store such values as bytea, or use a UTF8 database)", err)
		}
		if errors.Is(err, termination.ErrTooLarge) {
			s.abandon(gid)
			return pgErr(codeProgramLimitExceeded, "ordo: %v; the transaction was rolled back (split it, or raise max_entry_bytes on every node)", err)
		}
		if errors.Is(err, termination.ErrNotReplicated) {
			s.abandon(gid)
			e := pgErr(codeSerializationFailure, "ordo: %v; the transaction was rolled back, retry it", err)
			if errors.Is(err, termination.ErrPreempted) {
				return recorded{e} // a conflict; its abort is ordered under its label
			}
			return unordered{e} // a fragment the order did not take (retry.go)
		}
		return pgErr(codeResolutionUnknown,
			"ordo: the cluster did not confirm the commit in time (%v); the transaction will be committed everywhere or nowhere, check before retrying", err)
	}
	if !out.Commit && out.Unordered {
		return unordered{pgErr(codeSerializationFailure, "ordo: the transaction was rolled back: %s; retry it", out.Reason)}
	}
	if !out.Commit {
		return recorded{pgErr(codeSerializationFailure, "ordo: could not serialize access due to a concurrent update on another node (%s); retry the transaction", out.Reason)}
	}
	// The node's catalog was marked stale before the outcome was given
	// (replica.Config.OnDDL): the client's next statement is analyzed
	// against the refreshed one.
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

// granuleKeys adds, for every row ws writes in a table with a granule
// column (catalog.Relation.Granule, from the split conflict classes), IX
// on the granule of the row after the change and of the row before it
// (its key columns hold the granule column, or the table has no primary
// key and the old row is whole): a concurrent transaction that read the
// granule (S) conflicts with it in certification. A row whose granule
// cannot be told takes X on its table.
func granuleKeys(cat *catalog.Catalog, ws *capture.WriteSet, keys *txn.KeySet) {
	for i := range ws.Rows {
		r := &ws.Rows[i]
		if r.Op == capture.OpTruncate {
			continue // X on its table already
		}
		rel, ok := cat.Lookup(catalog.Name{Schema: r.Table.Schema, Name: r.Table.Name})
		if !ok || rel.Granule == "" {
			continue
		}
		col := slices.IndexFunc(r.Table.Columns, func(c capture.Column) bool { return c.Name == rel.Granule })
		if col < 0 {
			keys.Add(r.Table.TableKey(), txn.X)
			continue
		}
		add := func(v capture.Value) bool {
			switch v.Kind {
			case capture.Text:
				keys.Add(txn.GranuleKey(r.Table.Schema, r.Table.Name, rel.Granule, v.Text), txn.IX)
				return true
			case capture.Null:
				return true // in no granule a read can name
			}
			return false
		}
		if r.Values != nil && !add(r.Values[col]) {
			keys.Add(r.Table.TableKey(), txn.X)
			continue
		}
		switch {
		case r.OldRow != nil:
			if !add(r.OldRow[col]) {
				keys.Add(r.Table.TableKey(), txn.X)
			}
		case r.OldValues != nil:
			k := slices.Index(r.Table.KeyColumns, col)
			if k < 0 || k >= len(r.OldValues) {
				keys.Add(r.Table.TableKey(), txn.X)
				continue
			}
			keys.Add(txn.GranuleKey(r.Table.Schema, r.Table.Name, rel.Granule, r.OldValues[k]), txn.IX)
		case r.Op == capture.OpDelete:
			keys.Add(r.Table.TableKey(), txn.X) // a delete that named no old row
		}
	}
}

// orderNotify has the replica order ns for the other nodes (a
// transaction that replicates nothing else: termination.Notifier).
func (s *session) orderNotify(ctx context.Context, ns []capture.Notification) error {
	nf, ok := s.h.cfg.Replica.(termination.Notifier)
	if !ok || len(ns) == 0 {
		return nil
	}
	for _, n := range ns {
		if len(n.Payload) >= notifyPayloadMax {
			return nil // PostgreSQL refuses it (22023) and sends nothing
		}
	}
	if err := nf.Notify(ctx, ns); err != nil {
		return pgErr(codeResolutionUnknown,
			"ordo: the notification could not be ordered through the cluster (%v); it was not sent to this node's listeners and may or may not reach the other nodes'", err)
	}
	return nil
}

// notifyCallSQL is the statement that sends the notification of a
// SELECT pg_notify(…) bound to params, held until the commit, or the
// error PostgreSQL would have raised for it.
func notifyCallSQL(c *analysis.NotifyCall, params []analysis.Param) (string, error) {
	channel, null, err := c.Channel.Value(params)
	if err != nil {
		return "", pgErr(codeProtocolViolation, "ordo: %v", err)
	}
	if null || channel == "" {
		return "", pgErr(codeInvalidParameterValue, "channel name cannot be empty")
	}
	if len(channel) >= notifyChannelMax {
		return "", pgErr(codeInvalidParameterValue, "channel name too long")
	}
	payload, _, err := c.Payload.Value(params) // NULL is the empty payload
	if err != nil {
		return "", pgErr(codeProtocolViolation, "ordo: %v", err)
	}
	if len(payload) >= notifyPayloadMax {
		return "", pgErr(codeInvalidParameterValue, "payload string too long")
	}
	return "SELECT pg_notify(" + escapedLiteral(channel) + ", " + escapedLiteral(payload) + ")", nil
}

// escapedLiteral quotes s as an E” string constant, whose meaning does
// not depend on standard_conforming_strings.
func escapedLiteral(s string) string {
	return "E'" + strings.NewReplacer(`\`, `\\`, "'", `\'`).Replace(s) + "'"
}

// notifyChannelMax is the length from which PostgreSQL refuses a channel
// name (NAMEDATALEN).
const notifyChannelMax = 64

// notifyPayloadMax is PostgreSQL's limit on a NOTIFY payload, in bytes
// (NOTIFY_PAYLOAD_MAX_LENGTH): a longer one fails and sends nothing.
const notifyPayloadMax = 8000

// notifications returns the NOTIFYs among the statements the session held
// until the commit (LISTEN and UNLISTEN are the session's own): every node
// sends them when it applies the transaction.
func (s *session) notifications() []capture.Notification {
	var out []capture.Notification
	for _, sql := range s.tx.notify {
		for _, a := range s.analyze(sql) {
			if a.Notify != nil {
				out = append(out, capture.Notification{Channel: a.Notify.Channel, Payload: a.Notify.Payload})
			}
			if c := a.NotifyCall; c != nil && c.Channel.Param == 0 && c.Payload.Param == 0 {
				// Held as sent by notifyCallSQL: constants.
				out = append(out, capture.Notification{Channel: c.Channel.Text, Payload: c.Payload.Text})
			}
		}
	}
	return out
}
