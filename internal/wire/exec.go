package wire

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgproto3"
)

// execState collects the replies to one Backend.Exec; the backend goroutine
// fills it and closes done at its ReadyForQuery.
type execState struct {
	res  Result
	done chan struct{}
	// abortable: a statement of the client's, run again (ExecAbortable):
	// Abort cancels it, as it cancels what the client sent, once it was
	// sent (sent).
	abortable bool
	sent      atomic.Bool
}

var _ Backend = (*session)(nil)

// keepRow keeps a row of the client's statement run again, up to
// maxHeldRows (beyond, Result.RowsOver).
func (ex *execState) keepRow(m pgproto3.BackendMessage) {
	if ex.res.RowsOver || len(ex.res.rows)+rowSize(m) > maxHeldRows {
		ex.res.RowsOver, ex.res.rows = true, nil
		return
	}
	ex.res.rows, _ = m.Encode(ex.res.rows)
}

// execName names the statement and portal of an Exec run with the
// extended protocol.
const execName = "ordo_exec"

// TxStatus implements Backend.
func (ss *session) TxStatus() byte { return byte(ss.txStatus.Load()) }

// Exec implements Backend. It runs on the session goroutine.
func (ss *session) Exec(ctx context.Context, sql string, more ...string) (*Result, error) {
	return ss.exec1(ctx, false, sql, more...)
}

// ExecAbortable implements Backend.
func (ss *session) ExecAbortable(ctx context.Context, sql string) (*Result, error) {
	return ss.exec1(ctx, true, sql)
}

// ExecBound implements Backend.
func (ss *session) ExecBound(ctx context.Context, name string, formats []int16, params [][]byte, resultFormats []int16) (*Result, error) {
	return ss.runExec(ctx, true, func() {
		ss.sendServer(&pgproto3.Close{ObjectType: 'P', Name: execName}) // (see exec1)
		ss.sendServer(&pgproto3.Bind{DestinationPortal: execName, PreparedStatement: name,
			ParameterFormatCodes: formats, Parameters: params, ResultFormatCodes: resultFormats})
		ss.sendServer(&pgproto3.Execute{Portal: execName})
		ss.sendServer(&pgproto3.Close{ObjectType: 'P', Name: execName})
		ss.sendServer(&pgproto3.Sync{})
	})
}

func (ss *session) exec1(ctx context.Context, abortable bool, sql string, more ...string) (*Result, error) {
	all := append([]string{sql}, more...)
	simple := false
	res, err := ss.runExec(ctx, abortable, func() {
		if ss.portals.unnamedLater && ss.txStatus.Load() == 'I' && !ss.batchOpen && ss.outstanding.Load() == 0 {
			ss.portals.unnamedLater = false // it ended with its transaction
		}
		switch p, _ := ss.unnamed.current(); {
		case !ss.portals.unnamedLater && (p == nil || (ss.stmt.Kind == KindParse && ss.stmt.Name == "")):
			// No unnamed statement the client may still bind (or it is
			// replacing it right now), and no unnamed portal it may
			// still execute (a Query drops both).
			simple = true
			ss.sendServer(&pgproto3.Query{String: strings.Join(all, "; ")})
		default:
			// One statement each: run under names of Ordo's, which leave
			// the client's unnamed statement and portal alone. (Parsing
			// the unnamed statement again after a Query fails if what it
			// names is gone, a table the transaction dropped, and that
			// would fail the client's transaction.) The first Closes drop
			// those an earlier error left behind (a failed ExecBound's
			// portal lives until the transaction ends); after an error
			// PostgreSQL skips the rest, as in a query string.
			ss.sendServer(&pgproto3.Close{ObjectType: 'P', Name: execName})
			ss.sendServer(&pgproto3.Close{ObjectType: 'S', Name: execName})
			for _, q := range all {
				ss.sendServer(&pgproto3.Parse{Name: execName, Query: q})
				ss.sendServer(&pgproto3.Bind{DestinationPortal: execName, PreparedStatement: execName})
				if abortable {
					// Its rows' description, as a Query would send it.
					ss.sendServer(&pgproto3.Describe{ObjectType: 'P', Name: execName})
				}
				ss.sendServer(&pgproto3.Execute{Portal: execName})
				ss.sendServer(&pgproto3.Close{ObjectType: 'P', Name: execName})
				ss.sendServer(&pgproto3.Close{ObjectType: 'S', Name: execName})
			}
			ss.sendServer(&pgproto3.Sync{})
		}
	})
	if simple && (err != nil || res != nil && res.Err != nil) && ss.txStatus.Load() != 'I' {
		ss.portals.failedQuery()
	}
	return res, err
}

// runExec is an Exec whose messages send queues for PostgreSQL, ending with
// a Query or a Sync.
func (ss *session) runExec(ctx context.Context, abortable bool, send func()) (*Result, error) {
	if ss.batchOpen || ss.copying || ss.inReadyForQuery {
		return nil, ErrNotAtBoundary
	}
	if err := ss.flushServer(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSessionClosed, err)
	}
	if err := ss.waitIdle(ctx); err != nil {
		return nil, err
	}
	ex := &execState{done: make(chan struct{}), abortable: abortable}
	ss.exec.Store(ex)
	send()
	if err := ss.flushServer(); err != nil {
		ss.exec.Store(nil)
		return nil, fmt.Errorf("%w: %w", ErrSessionClosed, err)
	}
	ex.sent.Store(true)
	select {
	case <-ex.done:
		return &ex.res, nil
	case <-ss.beDone:
		return nil, ErrSessionClosed
	case <-ctx.Done():
	}
	// Cancel the statement and wait for PostgreSQL to finish the reply so
	// the stream stays in step.
	_ = ss.cancelBackend()
	select {
	case <-ex.done:
		return &ex.res, ctx.Err()
	case <-ss.beDone:
		return nil, ErrSessionClosed
	}
}

// wakeWaiters wakes waitIdle and waitUntil callers to look again.
func (ss *session) wakeWaiters() {
	if ss.waiters.Load() > 0 {
		ss.mu.Lock()
		if ss.waitCh != nil {
			close(ss.waitCh)
			ss.waitCh = nil
		}
		ss.mu.Unlock()
	}
}

// waitIdle waits until every message sent for the client has its
// ReadyForQuery.
func (ss *session) waitIdle(ctx context.Context) error {
	return ss.waitUntil(ctx, func() bool { return ss.outstanding.Load() <= 0 })
}

// waitUntil waits until done() holds; the backend goroutine wakes it
// (waitCh) whenever the state it depends on changes.
func (ss *session) waitUntil(ctx context.Context, done func() bool) error {
	ss.waiters.Add(1)
	defer ss.waiters.Add(-1)
	for {
		ss.mu.Lock()
		if done() {
			ss.mu.Unlock()
			return nil
		}
		if ss.waitCh == nil {
			ss.waitCh = make(chan struct{})
		}
		ch := ss.waitCh
		ss.mu.Unlock()
		select {
		case <-ch:
		case <-ss.beDone:
			return ErrSessionClosed
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// execMessage handles msg while an Exec is running; it reports whether msg
// was consumed (false: relay it to the client).
func (ss *session) execMessage(ex *execState, msg pgproto3.BackendMessage) bool {
	switch m := msg.(type) {
	case *pgproto3.NotificationResponse, *pgproto3.ParameterStatus:
		return false
	case *pgproto3.NoticeResponse:
		if ex.abortable {
			// The client's statement, run again: its notices are the
			// client's, as the first run's were.
			return false
		}
		ex.res.Notices = append(ex.res.Notices, m.Message)
	case *pgproto3.RowDescription:
		if ex.abortable {
			ex.keepRow(m)
		}
	case *pgproto3.DataRow:
		if ex.abortable {
			ex.keepRow(m) // the client's rows (Backend.ReplaceHeld), not text
			return true
		}
		row := make([]string, len(m.Values))
		for i, v := range m.Values {
			row[i] = string(v) // nil becomes ""; see Result.Rows
		}
		ex.res.Rows = append(ex.res.Rows, row)
	case *pgproto3.CommandComplete:
		ex.res.Tags = append(ex.res.Tags, string(m.CommandTag))
		if ex.abortable {
			ss.txRows.Add(changedRows(string(m.CommandTag))) // the client's statement
		}
	case *pgproto3.ErrorResponse:
		if ex.res.Err == nil {
			ex.res.Err = pgError(m)
			ex.res.Aborted = ss.abortCanceled(m)
		}
	case *pgproto3.CopyInResponse:
		b, _ := (&pgproto3.CopyFail{Message: "ordo: COPY FROM STDIN is not supported in Exec"}).Encode(nil)
		_, _ = ss.server.Write(b)
	case *pgproto3.ReadyForQuery:
		ss.readyStatus(m.TxStatus) // (Ordo's ROLLBACK or COMMIT may end the transaction)
		ex.res.TxStatus = m.TxStatus
		ss.exec.Store(nil)
		// What the Exec relayed (ParameterStatus, notifications) reaches
		// the client before the session goroutine, woken next, can write
		// anything of its own (writeClient): a SET in NewSession must be
		// reported before the startup's ReadyForQuery.
		if err := ss.flushClient(); err != nil {
			ss.terminate(nil)
		}
		close(ex.done)
	}
	return true
}
