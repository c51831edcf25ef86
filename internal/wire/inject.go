package wire

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"
)

// injectedName names the statement and portal of BeginHere's BEGIN (and
// SetHere's statement).
const injectedName = "ordo_begin"

// BeginHere implements Backend. It runs on the session goroutine, inside a
// Statement call: what it sends goes before the message being reported.
//
// The BEGIN (begin, a BEGIN statement) is parsed, bound, executed and
// closed under a name of its own (the client's unnamed statement and
// portal stay as they are). Its seven replies arrive in their place among the client's, unless an earlier
// message of the batch failed, and then none does (PostgreSQL skips to the
// Sync); unnamedTracker knows which replies are theirs and drops them.
func (ss *session) BeginHere(begin string) { ss.sendInjected(injectBegin, begin) }

// SetHere implements Backend: as BeginHere, for a statement run inside
// the client's open block (SET TRANSACTION), whose CommandComplete counts
// as no BEGIN.
func (ss *session) SetHere(sql string) { ss.sendInjected(injectSet, sql) }

// ParseHere implements Backend: the Parse goes before the message being
// reported, its ParseComplete dropped through unnamedTracker, which then
// holds sql as the unnamed statement.
func (ss *session) ParseHere(sql string, types []uint32) {
	p := &pgproto3.Parse{Query: sql, ParameterOIDs: types}
	ss.unnamed.sentInjectedParse(p)
	ss.sendServer(p)
}

// injectKind says what an injected statement is.
type injectKind int

const (
	injectBegin injectKind = iota // BeginHere's BEGIN
	injectQuiet                   // SyncHere's BEGIN: error and warning dropped too
	injectSet                     // SetHere's statement
)

// sendInjected sends an injected statement.
func (ss *session) sendInjected(kind injectKind, sql string) {
	ss.unnamed.sentInjected(kind == injectQuiet, kind == injectBegin)
	if kind == injectBegin {
		ss.injectedOpen.Store(true)
	}
	// The first Closes drop a statement and portal an error left behind
	// (the client's statement_timeout can fire at the Parse or the Bind,
	// and PostgreSQL skips the Closes after them): the Parse would fail.
	ss.sendServer(&pgproto3.Close{ObjectType: 'P', Name: injectedName})
	ss.sendServer(&pgproto3.Close{ObjectType: 'S', Name: injectedName})
	ss.sendServer(&pgproto3.Parse{Name: injectedName, Query: sql})
	ss.sendServer(&pgproto3.Bind{DestinationPortal: injectedName, PreparedStatement: injectedName})
	ss.sendServer(&pgproto3.Execute{Portal: injectedName})
	ss.sendServer(&pgproto3.Close{ObjectType: 'P', Name: injectedName})
	ss.sendServer(&pgproto3.Close{ObjectType: 'S', Name: injectedName})
}

// BeginsSinceInjected implements Backend.
func (ss *session) BeginsSinceInjected() int64 { return ss.beginsSinceInjected.Load() }

// changedRows is the count of rows a DML statement's CommandComplete tag
// reports ("INSERT 0 3", "UPDATE 2", "DELETE 0", "MERGE 1"); 0 for any
// other tag.
func changedRows(tag string) int64 {
	verb, rest, ok := strings.Cut(tag, " ")
	if !ok {
		return 0
	}
	switch verb {
	case "INSERT":
		_, rest, ok = strings.Cut(rest, " ") // the oid, always 0
		if !ok {
			return 0
		}
	case "UPDATE", "DELETE", "MERGE":
	default:
		return 0
	}
	n, err := strconv.ParseInt(rest, 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// TxRowsChanged implements Backend.
func (ss *session) TxRowsChanged() int64 { return ss.txRows.Load() }

// CancelRequested implements Backend.
func (ss *session) CancelRequested() <-chan struct{} {
	ss.clientCancelMu.Lock()
	defer ss.clientCancelMu.Unlock()
	if ss.clientCancel == nil {
		ss.clientCancel = make(chan struct{})
	}
	return ss.clientCancel
}

// clientCanceled wakes what waits on CancelRequested: the client sent a
// CancelRequest.
func (ss *session) clientCanceled() {
	ss.clientCancelMu.Lock()
	defer ss.clientCancelMu.Unlock()
	if ss.clientCancel != nil {
		close(ss.clientCancel)
		ss.clientCancel = nil
	}
}

// UnitSentRows implements Backend.
func (ss *session) UnitSentRows() bool { return ss.unitRows.Load() }

// ReplaceHeld implements Backend.
func (ss *session) ReplaceHeld(res *Result) {
	ss.retag, ss.rerows, ss.retagged = nil, nil, true
	if res != nil && len(res.Tags) > 0 {
		ss.retag = []byte(res.Tags[len(res.Tags)-1])
		ss.rerows = res.rows
	}
}

// HoldConflicts implements Backend.
func (ss *session) HoldConflicts() {
	if !ss.hold.Load() {
		return
	}
	if k := ss.stmt.Kind; k == KindParse || k == KindBind {
		ss.tagNeedsSync.Store(true)
		ss.holdTag.Store(true)
	}
	if ss.holdTag.Load() {
		ss.holdErr.Store(true)
		ss.holdRows.Store(true)
	}
}

// HeldComplete implements Backend.
func (ss *session) HeldComplete() bool { return ss.tagHeld }

// HeldConflict implements Backend.
func (ss *session) HeldConflict() error {
	if e := ss.heldErr.Load(); e != nil {
		return pgError(e)
	}
	return nil
}

// sendError relays an error to the client, or holds it back if it is a
// conflict HoldConflicts asked for (backend goroutine).
func (ss *session) sendError(e *pgproto3.ErrorResponse) {
	if e != nil && ss.holdErr.Load() && (e.Code == "40001" || e.Code == "40P01") && e.Severity == "ERROR" && !ss.unitRows.Load() {
		switch {
		case !ss.tagNeedsSync.Load():
		case ss.outstanding.Load() == 0:
			ss.srv.m.unheld.WithLabelValues("before_sync").Inc()
			ss.releaseRows()
			ss.noteRows() // relayed: no Sync yet
			ss.sendClient(e)
			return
		case !ss.unnamed.failedExecuteLast():
			// It answers the Bind, or PostgreSQL skipped messages after
			// the Execute: run again, the client would miss their
			// replies.
			ss.srv.m.unheld.WithLabelValues("not_last").Inc()
			ss.releaseRows()
			ss.sendClient(e)
			return
		}
		cp := *e
		ss.heldErr.Store(&cp)
		return
	}
	ss.releaseRows()
	ss.sendClient(e)
}

// InjectedBegins implements Backend.
func (ss *session) InjectedBegins() int64 { return ss.injectedBegins.Load() }

// Begins implements Backend.
func (ss *session) Begins() int64 { return ss.begins.Load() }

// Unnamed implements Backend.
func (ss *session) Unnamed() (string, bool) {
	if p, _ := ss.unnamed.current(); p != nil {
		return p.Query, true
	}
	return "", false
}

// UnnamedParsedAs implements Backend.
func (ss *session) UnnamedParsedAs() string {
	_, client := ss.unnamed.current()
	return client
}

// Named implements Backend.
func (ss *session) Named(name string) (sql string, exists, known bool) {
	return ss.unnamed.namedStatement(name)
}

// LastParsed implements Backend.
func (ss *session) LastParsed(name string) (string, bool) { return ss.unnamed.lastParsed(name) }

// PortalPending implements Backend. (The session goroutine's, as the
// hooks are.)
func (ss *session) PortalPending(portal string) bool { return ss.portals.pending(portal) }

// QueryFrees implements Backend.
func (ss *session) QueryFrees(sql string, names []string) { ss.unnamed.queryFrees(sql, names) }

// NamedKnown implements Backend.
func (ss *session) NamedKnown() bool { return ss.unnamed.namedKnown() }

// noteParameter follows the settings PostgreSQL reports that the
// session's reading of statements depends on.
func (ss *session) noteParameter(ps *pgproto3.ParameterStatus) {
	if ps.Name == "standard_conforming_strings" {
		ss.nonStandardStrings.Store(ps.Value == "off")
	}
}

// NonStandardStrings implements Backend.
func (ss *session) NonStandardStrings() bool { return ss.nonStandardStrings.Load() }

// Declared implements Backend.
func (ss *session) Declared(name string) (string, []uint32, bool) {
	return ss.unnamed.declaredTypes(name)
}

// LearnNamed implements Backend.
func (ss *session) LearnNamed(names, fromSQL map[string]string, types map[string][]uint32) {
	ss.unnamed.learnNamed(names, fromSQL, types)
}

// Failed implements Backend.
func (ss *session) Failed(ctx context.Context) (bool, error) {
	if !ss.batchOpen || ss.copying || ss.inReadyForQuery {
		return false, nil
	}
	if ss.skipping {
		return true, nil
	}
	if err := ss.awaitReplies(ctx); err != nil {
		return false, err
	}
	return ss.unitFailed.Load(), nil
}

// awaitReplies waits until PostgreSQL has answered every message sent so
// far (a Flush makes it answer), or has failed one (it then skips every
// message, a Flush too, up to the Sync: unitFailed), or has started a COPY
// FROM STDIN that the client has not ended, which waits for data and
// ignores a Flush: ErrNotAtBoundary then. A COPY the client ended
// (CopyDone or CopyFail already sent) is answered like any message: it
// was taken for one still waiting, and a SAVEPOINT after a COPY that
// failed was taken for one PostgreSQL ran (review).
func (ss *session) awaitReplies(ctx context.Context) error {
	ss.sendServer(&pgproto3.Flush{})
	if err := ss.flushServer(); err != nil {
		return fmt.Errorf("%w: %w", ErrSessionClosed, err)
	}
	if err := ss.waitUntil(ctx, func() bool { return ss.unnamed.answered() || ss.unitFailed.Load() || ss.copyOpen() }); err != nil {
		return err
	}
	if ss.copyOpen() {
		return ErrNotAtBoundary
	}
	return nil
}

// SyncHere implements Backend. It runs on the session goroutine, inside a
// Statement call (hookMu held).
//
// The BEGIN and the Sync are Ordo's: their replies are not relayed (the
// BEGIN's through unnamedTracker, its warning inside a block in
// backendLoop, the Sync's ReadyForQuery through quietReady), and the hooks'
// ReadyForQuery runs for the Sync before SyncHere returns. In a failed
// block the BEGIN fails, unseen, and the block stays failed. If a message
// before them failed, PostgreSQL skipped the rest of the batch up to that
// Sync and now runs messages again; a silent rejection (a Describe of a
// portal that does not exist, whose error the client does not see) makes
// it skip the rest of the client's batch, as it would have without the
// Sync.
func (ss *session) SyncHere(ctx context.Context) (failed bool, err error) {
	if !ss.batchOpen || ss.copying || ss.skipping || ss.inReadyForQuery || ss.stmt.AtBoundary {
		return false, ErrNotAtBoundary
	}
	if ss.outstanding.Load() != 0 || ss.quietReady.Load() {
		// A batch began once earlier units were answered (startUnit):
		// nothing else can be outstanding.
		return false, ErrNotAtBoundary
	}
	but := "\x00" // (no portal's name: any pending one counts)
	if ss.stmt.Kind == KindBind {
		but = ss.stmt.Portal // which this Bind replaces
	}
	if ss.portals.pendingBut(but) {
		return false, ErrNotAtBoundary
	}
	// The replies to the batch so far first: a COPY FROM STDIN among
	// them would swallow the Sync (PostgreSQL ignores Sync in that mode).
	if err := ss.awaitReplies(ctx); err != nil {
		return false, err
	}
	ss.quietReady.Store(true)
	ss.outstanding.Add(1)
	ss.sendInjected(injectQuiet, "BEGIN")
	ss.sendTracked(&pgproto3.Sync{})
	if err := ss.flushServer(); err != nil {
		return false, fmt.Errorf("%w: %w", ErrSessionClosed, err)
	}
	if err := ss.waitUntil(ctx, func() bool { return ss.outstanding.Load() <= 0 }); err != nil {
		return false, err
	}
	ss.drainEventsLocked()
	if ss.lastFailed.Load() {
		ss.sendTracked(&pgproto3.Describe{ObjectType: 'P', Name: ss.newRejection(nil)})
		ss.skipping = true
		return true, nil
	}
	// At a boundary: the hooks may Exec. The client's message, sent
	// after the hooks return, opens the batch again.
	ss.batchOpen = false
	ss.syncsSinceExec = 0
	return false, nil
}
