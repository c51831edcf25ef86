package session

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ordo-db/ordo/internal/analysis"
	"github.com/ordo-db/ordo/internal/wire"
	"github.com/ordo-db/ordo/pkg/config"
)

// An autocommit statement that a replication conflict aborts (another
// node's transaction was ordered first, or its apply needed this one's
// locks) is run again, up to Config.AutocommitRetries times, before its
// client hears of the conflict, as Galera's wsrep_retry_autocommit does:
// the aborted attempt was rolled back everywhere, so running the statement
// again is what the client would do on a 40001, but it cannot tell. Only
// where the client has seen nothing of the first attempt that a second
// could contradict: one statement that writes rows or refreshes a
// materialized view, sent either as a simple Query or as the one Bind
// (and Execute) of an extended-protocol unit whose Sync came with it,
// whose rows (RETURNING) and CommandComplete the node holds until the
// commit (wire.Backend.HoldConflicts), which started no COPY. The client
// receives the rows and tag of the attempt that committed, or the error
// of the last.

// retryStmt is an autocommit statement that may be run again.
type retryStmt struct {
	sql string // as sent to PostgreSQL (extended: as it parsed it)
	// label names every attempt (ordo.txn_label): the outcome checks
	// answer committed if one attempt committed (_ordo.txn_status). A
	// labelled statement is not run again after an abort the order
	// recorded under its label (recorded): until a later attempt is
	// decided, the outcome check would answer aborted for a statement
	// that may still commit.
	label string
	// extended: the client's prepared statement name, bound in unit to
	// params in formats, its results in results (params nil until its
	// Bind). It is run again bound the same way (wire.Backend.ExecBound).
	extended bool
	name     string
	unit     uint64
	formats  []int16
	params   [][]byte
	results  []int16
}

// retryable returns the statement just wrapped (wrap) if a conflict may
// be retried, or nil: a simple Query's, or an extended-protocol unit's
// first Parse or Bind.
func (s *session) retryable(stmts []*analysis.Statement, params []analysis.Param, m at) *retryStmt {
	if !retryKind(stmts) {
		return nil
	}
	if s.unitCons {
		return nil // cons takes its classes before the statement runs
	}
	r := &retryStmt{sql: m.sent, label: s.label}
	if m.kind != wire.KindQuery && m.msg == nil {
		return nil
	}
	switch m.kind {
	case wire.KindQuery:
		if len(params) > 0 || m.sent == "" {
			return nil // a FunctionCall
		}
	case wire.KindParse:
		r.extended, r.unit, r.name = true, s.unit, m.msg.Name
	case wire.KindBind:
		r.extended, r.unit, r.name = true, s.unit, m.msg.Name
		r.bound(m.msg)
	default:
		return nil
	}
	return r
}

// bound notes the Bind of an extended-protocol statement, keeping copies
// of its parameters (the Bind's are the wire's).
func (r *retryStmt) bound(b *wire.Statement) {
	r.formats, r.results = slices.Clone(b.ParamFormats), slices.Clone(b.ResultFormats)
	r.params = make([][]byte, len(b.Params))
	for i, p := range b.Params {
		if p != nil {
			r.params[i] = slices.Clone(p)
			if r.params[i] == nil {
				r.params[i] = []byte{} // an empty value, not NULL
			}
		}
	}
}

// candidate returns r if it may still be run again at the end of its
// unit: an extended-protocol statement only once bound.
func (r *retryStmt) candidate() *retryStmt {
	if r == nil || r.extended && r.params == nil {
		return nil
	}
	return r
}

// retryKind reports whether stmts is one statement of a kind that may be
// run again: one that writes rows or refreshes a materialized view, and
// sets no sequence and sends no notification.
func retryKind(stmts []*analysis.Statement) bool {
	if len(stmts) != 1 {
		return false
	}
	a := stmts[0]
	if a.SetsSequence || a.NotifyCall != nil || a.Notify != nil {
		return false
	}
	return a.Kind == analysis.KindWrite || a.Kind == analysis.KindDDL && a.Tag == "RefreshMatViewStmt"
}

// unordered is the 40001 of a transaction whose commit the order did not
// take in time, and whose abort it did: the cluster could not order it
// (a node cut off from the majority), and running the statement again
// would only make its client wait as long again for the same answer.
type unordered struct{ error }

func (u unordered) Unwrap() error { return u.error }

// recorded is the 40001 of a transaction whose abort the order decided
// and recorded under its label (if any): certification aborted it, or the
// node preempted it before its capture (termination.ErrPreempted).
type recorded struct{ error }

func (r recorded) Unwrap() error { return r.error }

// conflict reports whether err says the transaction was aborted, and
// rolled back everywhere, by a replication conflict.
func conflict(err error) bool {
	if errors.Is(err, errBruteForce) {
		return true
	}
	if errors.As(err, new(unordered)) {
		return false
	}
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == codeSerializationFailure || pe.Code == codeDeadlock)
}

// retry runs r again while a conflict aborts it, up to
// Config.AutocommitRetries times; err is the first attempt's conflict.
func (s *session) retry(ctx context.Context, r *retryStmt, err error) error {
	if !conflict(err) {
		return err
	}
	if s.be.UnitSentRows() {
		s.unretried(unretriedRowsSent)
		return err // the client has read some of the first attempt
	}
	if !s.toIdle(ctx) {
		s.unretried(unretriedNotIdle)
		return err
	}
	label := s.label // "" once the first attempt's termination used it
	// A cancel from here on ends the retries (retryStatement's pause).
	s.retryCanceled = s.be.CancelRequested()
	s.canceled = s.retryCanceled // and the attempts' waits inside Ordo
	if err = s.attempts(ctx, r, s.autocommitRetries(ctx), err); err != nil {
		// An attempt that failed before its termination left the label
		// set: as it was before the retries, for labelFailed to judge
		// (a label the first attempt's termination used is gone).
		s.label = label
	}
	return err
}

// attempts runs r again, up to retries times, while a conflict aborts it;
// err is the last attempt's conflict. It returns the outcome the client
// gets: nil once an attempt committed, or the error of the last.
func (s *session) attempts(ctx context.Context, r *retryStmt, retries int, err error) error {
	for n := 0; ; n++ {
		switch {
		case !conflict(err):
			return err // committed, or failed otherwise
		case n >= retries:
			if retries <= 0 {
				s.unretried(unretriedDisabled)
			} else {
				s.unretried(unretriedExhausted)
			}
			return err
		case r.label != "" && errors.As(err, new(recorded)):
			s.unretried(unretriedRecorded)
			return err
		}
		again, next := s.retryStatement(ctx, r, n+1, err)
		if !again {
			return next // it cannot run again (retryStatement counted why) or failed before its end
		}
		err = next
	}
}

// toIdle rolls back what an aborted attempt left open; it reports whether
// the backend is outside a transaction then (the attempt after it, or the
// read of ordo.autocommit_retries, needs that).
func (s *session) toIdle(ctx context.Context) bool {
	if s.be.TxStatus() != 'I' {
		s.rollback(ctx)
	}
	return s.be.TxStatus() == 'I'
}

// Why a conflict of an autocommit statement that could have been run
// again reached its client (ordo_session_autocommit_conflicts_unretried_total;
// the wire layer counts those it relayed at once,
// ordo_wire_conflicts_relayed_unheld_total).
const (
	unretriedRowsSent  = "rows_sent"         // the client read some of an attempt
	unretriedNotIdle   = "not_idle"          // what the attempt left open could not be rolled back
	unretriedChanged   = "statement_changed" // no longer one statement that may run again, or PostgreSQL no longer holds it
	unretriedResult    = "result_changed"    // an attempt ended otherwise than with one statement's completion
	unretriedRecorded  = "recorded"          // the order recorded a labelled attempt's abort
	unretriedExhausted = "exhausted"         // autocommit_retries attempts, each aborted
	unretriedDisabled  = "disabled"          // autocommit_retries 0
	unretriedCanceled  = "canceled"          // the client canceled the statement while it waited to run again
)

func (s *session) unretried(reason string) { s.h.m.unretried.WithLabelValues(reason).Inc() }

// retryStatement runs r again in a new wrapped transaction and ends it
// (finishWrapped), after attempt attempts were aborted, the last with
// last. It returns again false and last, untouched, if the statement
// cannot be run again (the transaction could not be started again, the
// statement is not the one it was); again is false too for an error
// that is not a conflict.
func (s *session) retryStatement(ctx context.Context, r *retryStmt, attempt int, last error) (again bool, err error) {
	if !s.toIdle(ctx) {
		s.unretried(unretriedNotIdle)
		return false, last
	}
	switch pause(ctx, s.retryCanceled, retryPause(attempt, rand.Int64N)) {
	case pauseEnded:
		return false, last // the session is ending
	case pauseCanceled:
		// As PostgreSQL would have canceled the attempt it ran then.
		s.unretried(unretriedCanceled)
		return false, pgErr(codeQueryCanceled, "canceling statement due to user request")
	}
	// A new transaction: an abort was the last attempt's.
	s.resetAborted()
	s.h.m.retries.Inc()
	s.h.cfg.Logger.Debug("session: an autocommit statement aborted by a replication conflict runs again", "attempt", attempt+1, "conflict", last)
	if err := s.beginWrapped(ctx); err != nil {
		return false, err
	}
	if err := s.awaitTold(ctx); err != nil {
		s.rollback(ctx)
		// Aborted while it waited (it holds nothing now): another
		// attempt, if any is left.
		return errors.Is(err, errBruteForce), err
	}
	if err := s.beforeSnapshot(ctx, true); err != nil {
		s.rollback(ctx)
		return false, err
	}
	// Analyzed again: a conflict with a schema change may have changed
	// what the statement's keys are.
	stmts := s.analyze(r.sql)
	if !retryKind(stmts) || r.extended && !s.holdsPrepared(r.name, r.sql) {
		s.rollback(ctx)
		s.unretried(unretriedChanged)
		return false, last
	}
	s.be.ReplaceHeld(nil) // the last attempt's result is not the client's
	var res *wire.Result
	if r.extended {
		s.track(stmts[0], s.declaredParams(r.name, boundParams(r.params, r.formats)), at{kind: wire.KindBind, first: true, sent: r.sql})
		res, err = s.be.ExecBound(ctx, r.name, r.formats, r.params, r.results)
	} else {
		s.track(stmts[0], nil, at{kind: wire.KindQuery, first: true, sent: r.sql})
		res, err = s.be.ExecAbortable(ctx, r.sql)
	}
	if err != nil {
		return false, err
	}
	if res.Err != nil || res.TxStatus != 'T' || len(res.Tags) != 1 || res.RowsOver {
		// It fails now (a row it inserts exists by now, say): that is
		// the statement's outcome, as PostgreSQL would have given it
		// had the client sent it again.
		s.rollback(ctx)
		if res.Err != nil {
			if s.bruteForced(res) {
				return true, errBruteForce
			}
			return true, res.Err
		}
		s.unretried(unretriedResult)
		return false, last
	}
	s.be.ReplaceHeld(res)
	// The attempts are one labelled operation: the label the first
	// attempt's PREPARE took out of PostgreSQL (resetLabel) is still its.
	s.label, s.labelPinned = r.label, true
	defer func() { s.labelPinned = false }()
	return true, s.finishWrapped(ctx)
}

// The pauses between attempts. Statements that contend for one row and
// all run again at once contend again, and a statement that is always a
// little late (its session a round trip longer, its node busier) can lose
// every time and spend its retries within one burst of contention, a
// fraction of a second: so from the second retry on each waits first,
// a while that doubles, from retryPauseFirst up to retryPauseMost, and of
// which half is random (equal jitter): the others' attempts spread out,
// and the retries of one statement cover a time that grows with their
// count (at least 0.45 s for 20 retries, 1.4 s for 50; the default 3
// add at most 3 ms) rather than with
// how fast the contention turns over. Nothing is held while it waits:
// the aborted attempt was rolled back.
const (
	retryPauseFirst = time.Millisecond
	retryPauseMost  = 64 * time.Millisecond
)

// retryPause is the pause before the retry-th run again of a statement
// (1 the first), drawn with n (rand.Int64N): none before the first, then
// between half and all of retryPauseFirst << (retry-2), at most
// retryPauseMost.
func retryPause(retry int, n func(int64) int64) time.Duration {
	if retry <= 1 {
		return 0
	}
	most := retryPauseMost
	if retry-2 < 7 && retryPauseFirst<<(retry-2) < most {
		most = retryPauseFirst << (retry - 2)
	}
	return most/2 + time.Duration(n(int64(most/2)+1))
}

// How a pause between attempts ended.
const (
	pauseDone     = iota // it lasted its while
	pauseEnded           // the session's context ended
	pauseCanceled        // the client sent a CancelRequest
)

// pause waits d, or until ctx ends or canceled is closed (the client's
// CancelRequest: nothing runs in PostgreSQL meanwhile for it to cancel).
func pause(ctx context.Context, canceled <-chan struct{}, d time.Duration) int {
	if ctx.Err() != nil {
		return pauseEnded
	}
	if d <= 0 {
		return pauseDone
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return pauseDone
	case <-ctx.Done():
		return pauseEnded
	case <-canceled:
		return pauseCanceled
	}
}

// holdsPrepared reports whether PostgreSQL holds sql as the client's
// prepared statement name ("" the unnamed one): what a retry binds again.
func (s *session) holdsPrepared(name, sql string) bool {
	if name == "" {
		held, ok := s.be.Unnamed()
		return ok && held == sql
	}
	held, exists, known := s.be.Named(name)
	return known && exists && held == sql
}

// autocommitRetriesSQL reads the session's ordo.autocommit_retries
// (NULL, or empty, where nothing set it).
const autocommitRetriesSQL = "SELECT current_setting('ordo.autocommit_retries', true)"

// autocommitRetries is how many times an autocommit statement may run
// again: the session's ordo.autocommit_retries, or the node's. PostgreSQL
// keeps the setting, as it keeps any custom one, and it is read only after
// a conflict, at a boundary: so it follows PostgreSQL's rules wherever it
// was set (SET, SET in a block rolled back or to a savepoint, RESET,
// DISCARD ALL, set_config, ALTER ROLE or DATABASE … SET, a connection's
// options), which a session noting the SETs it relays could not.
func (s *session) autocommitRetries(ctx context.Context) int {
	res, err := s.be.Exec(ctx, autocommitRetriesSQL)
	if err != nil || res.Err != nil || len(res.Rows) != 1 || len(res.Rows[0]) != 1 || res.Rows[0][0] == "" {
		return s.h.cfg.AutocommitRetries
	}
	n, err := strconv.Atoi(strings.TrimSpace(res.Rows[0][0]))
	if err != nil || n < 0 {
		// set_config, ALTER ROLE … SET or a connection's options: not
		// checked as a SET is (checkSetting).
		s.h.cfg.Logger.Warn("session: ordo.autocommit_retries is not a number from 0 up; the node's autocommit_retries applies", "value", res.Rows[0][0])
		return s.h.cfg.AutocommitRetries
	}
	return min(n, config.MaxAutocommitRetries)
}
