package wire

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// flushThreshold is how many pending bytes make a relay direction write
// without waiting for its reader to run dry, so huge results and COPY
// streams pass through in bounded memory.
const flushThreshold = 32 << 10

// keepBuf is the largest write buffer kept between flushes; bigger ones are
// dropped so an idle session holds little memory.
const keepBuf = 16 << 10

// session is one client connection and its PostgreSQL connection.
//
// Two goroutines run it. The session goroutine (run, clientLoop, hook calls,
// Exec) reads the client and owns sbuf, the bytes pending for PostgreSQL.
// The backend goroutine (backendLoop) reads PostgreSQL and owns cbuf, the
// bytes pending for the client. Each flushes its pending bytes just before
// it blocks reading, so a request or a reply leaves in as few writes as
// possible and nothing waits in a buffer while its reader sleeps.
type session struct {
	srv       *Server
	id        uint64
	rawClient net.Conn // the accepted TCP connection
	client    net.Conn // rawClient or its *tls.Conn
	server    net.Conn // PostgreSQL
	be        *pgproto3.Backend
	fe        *pgproto3.Frontend
	info      SessionInfo
	ctx       context.Context
	cancelCtx context.CancelFunc

	key           uint64 // our BackendKeyData: pid<<32 | secret
	backendPID    uint32
	backendSecret []byte

	cbuf []byte     // to the client; backend goroutine (session goroutine during startup)
	sbuf []byte     // to PostgreSQL; session goroutine
	cwMu sync.Mutex // serializes writes to client

	hooks  SessionHooks
	hookMu sync.Mutex // held while any SessionHooks method runs

	inReadyForQuery bool       // guarded by hookMu: Exec is refused inside ReadyForQuery
	evMu            sync.Mutex // guards events
	events          []byte     // ReadyForQuery statuses not yet delivered to hooks
	nev             atomic.Int32

	// nonStandardStrings: PostgreSQL reported standard_conforming_strings
	// off (ParameterStatus): a backslash in a plain string escapes.
	nonStandardStrings atomic.Bool

	txStatus    atomic.Uint32
	outstanding atomic.Int64 // Query/Sync/FunctionCall sent minus ReadyForQuery received
	waiters     atomic.Int32
	mu          sync.Mutex // guards waitCh, rejects
	waitCh      chan struct{}
	rejects     map[string]rejection
	nrejects    atomic.Int32
	exec        atomic.Pointer[execState]
	unnamed     unnamedTracker // the client's unnamed statement (Exec leaves it alone)
	// hold is set by HoldReady: the backend goroutine does not relay the
	// ReadyForQuery that brings outstanding to zero; the session goroutine
	// runs ReadyHolder.BeforeReady and sends it (finishHeld).
	hold    atomic.Bool
	copyIns atomic.Int64 // CopyInResponses received (finishHeld, awaitReplies)
	// holdTag: the held unit is a simple Query, whose last CommandComplete
	// is held too (heldTag): PostgreSQL ends a query's implicit
	// transaction before it reports the last statement's completion, so a
	// client sees either that CommandComplete or the commit's error.
	holdTag atomic.Bool
	heldTag atomic.Pointer[pgproto3.CommandComplete]
	// tagNeedsSync: the held unit is an extended-protocol one
	// (HoldConflicts). Its CommandComplete and conflict are held only
	// if the client's Sync was sent before they arrived: before it, the
	// client may be waiting for them (it sent a Flush), and they are
	// relayed (noteRows).
	tagNeedsSync atomic.Bool
	// holdRows: the rows of the held statement (a simple Query's
	// RowDescription and DataRows, an Execute's DataRows) are held too,
	// encoded in heldRows, up to maxHeldRows bytes (backend goroutine
	// until the unit's ReadyForQuery, then finishHeld's).
	holdRows atomic.Bool
	heldRows []byte
	rowsDone atomic.Pointer[[]byte] // heldRows, handed to finishHeld
	// retag, rerows, retagged (session goroutine): the result
	// BeforeReady put in place of the held one, nil for none
	// (ReplaceHeld).
	retag, rerows []byte
	retagged      bool
	// tagHeld (session goroutine): finishHeld holds the unit's last
	// CommandComplete (HeldComplete).
	tagHeld bool
	// holdErr: a conflict ending the held statement is held back
	// (HoldConflicts) in heldErr.
	holdErr atomic.Bool
	heldErr atomic.Pointer[pgproto3.ErrorResponse]
	// unitRows: rows or a COPY were relayed to the client since the unit
	// began (UnitSentRows).
	unitRows atomic.Bool
	// quietReady: the next ReadyForQuery ends a piece of a split query
	// other than the last, and is not relayed (runSplit); sawError: an
	// ErrorResponse was relayed since runSplit last cleared it.
	quietReady atomic.Bool
	sawError   atomic.Bool
	// clientCancel is closed at the client's next CancelRequest
	// (CancelRequested), under clientCancelMu.
	clientCancelMu sync.Mutex
	clientCancel   chan struct{}
	// positions: how PostgreSQL's error positions in the Query sent last
	// become the client's (positions.go), when it is not the client's
	// text; cleared at the next ReadyForQuery.
	positions atomic.Pointer[positions]
	// unitFailed: an ErrorResponse was relayed since the last
	// ReadyForQuery; lastFailed: the unit the last ReadyForQuery ended
	// had one (PostgreSQL skipped to its Sync). See SyncHere.
	unitFailed atomic.Bool
	lastFailed atomic.Bool
	// failedSinceUnit: an ErrorResponse was relayed since the unit the
	// hooks see began (startUnit), across the Syncs of Ordo's inside it
	// (refuseUnit, runSplit) and a client's Sync PostgreSQL may answer
	// (a stray COPY message): lastFailed tells only of the last of them.
	failedSinceUnit atomic.Bool
	begins          atomic.Int64 // the client's BEGINs executed (Backend.Begins)
	// txRows: rows the client's DML changed in the open transaction
	// (Backend.TxRowsChanged); zeroed at every ReadyForQuery 'I', COMMIT
	// and ROLLBACK, never more than the transaction's.
	txRows atomic.Int64
	// injectedBegins counts BeginHere's BEGINs executed.
	injectedBegins      atomic.Int64
	beginsSinceInjected atomic.Int64
	// injectedOpen: BeginHere sent a BEGIN since the last ReadyForQuery,
	// whose status (txStatus) does not show the block it opens yet.
	injectedOpen atomic.Bool
	// abortErr replaces the next ErrorResponse of the transaction (Abort);
	// interrupt asks the session goroutine, woken from its client read, to
	// roll back an idle transaction.
	abortErr  atomic.Pointer[pgproto3.ErrorResponse]
	interrupt atomic.Bool
	// lateCancels counts Abort's CancelRequests whose error has not shown
	// up yet: a cancel races with the end of the statement it targets and
	// may hit a later one, whose 57014 is then reported as lateErr.
	lateCancels atomic.Int32
	lateErr     atomic.Pointer[pgproto3.ErrorResponse]
	// abortedTxn: Abort hit the current transaction; any 57014 until it
	// ends is the abort's (reported as lateErr), however the cancels and
	// the statements interleaved.
	abortedTxn atomic.Bool
	// Abort's CancelRequests in flight. Nothing more is sent to PostgreSQL
	// until they are delivered, so a cancel never lands on a statement
	// sent after it: PostgreSQL ignores one that arrives while the backend
	// waits for the next statement.
	cancelMu        sync.Mutex
	cancelCond      *sync.Cond
	cancelsInFlight int
	cancelsPending  atomic.Int32 // cancelsInFlight, read without the lock
	draining        atomic.Bool
	clientLeft      atomic.Bool // client sent Terminate

	// Session goroutine state.
	established bool // startup done: idle timeouts apply
	batchOpen   bool // extended-protocol messages sent since the last Sync
	// onlyCloses: every message of the open batch is a Close, which runs
	// nothing (PostgreSQL starts no transaction for it): openBatch.
	onlyCloses   bool
	copying      bool // client is sending COPY data
	copyExtended bool // that COPY was started by an Execute
	// copyInsAtUnit: copyIns when the unit began; copyEnds: the COPYs
	// the client ended (CopyDone, CopyFail) since (finishHeld).
	copyInsAtUnit, copyEnds int64
	// unread is a client message read ahead (copyInPiece), which
	// clientLoop takes before reading another.
	unread pgproto3.FrontendMessage
	// lastExec: the tracker's number of the client's last Execute
	// (copyStarted).
	lastExec       uint64
	execSinceQuery bool          // an Execute was sent after the last Query
	portals        clientPortals // the client's (portals.go)
	skipping       bool          // a message of this batch was rejected
	// refused: the portals whose Bind the hooks refused, with their
	// error, raised at an Execute of the portal (PostgreSQL raises a
	// statement's errors there), in a later batch of the transaction too
	// (forgotten at the Sync, the refusal was passed by an Execute in the
	// next batch, which ran the statement unseen: review of e00642c),
	// until the transaction's end, or a Bind of the name the hooks accept
	// or a Close of it in a unit that did not fail (PostgreSQL may have
	// skipped or refused them, and a ROLLBACK TO then keeps the refused
	// portal: third review). unitReplaced: the names such a Bind or Close
	// replaced in this unit, whose Executes in the unit are not refused.
	refused        map[string]error
	unitReplaced   map[string]bool
	unit           uint64 // units begun (Statement.Unit)
	syncsSinceExec int
	rejectSeq      uint64
	// explain: Backend.Explain's error, until the next ReadyForQuery.
	explain atomic.Pointer[explanation]
	// showRewritten: a statement answering a SHOW (ShowMarker) was sent,
	// so the backend goroutine looks at rows for the marker from then on
	// (the relay's path stays as it was for a session that never did).
	showRewritten atomic.Bool
	// showTag (backend goroutine): the row just relayed answered a SHOW
	// (ShowMarker), so the next CommandComplete says SHOW.
	showTag bool
	inBytes int64
	inMsgs  int64
	stmt    Statement
	rewrite string // Statement.Rewrite of the last hook call
	// watch: Statement.WatchExecute of the last hook call; watched: the
	// portals whose Executes the hooks want to hear of (PortalWatcher),
	// nil for none, cleared when a unit begins outside a transaction.
	// Nothing else forgets one: PostgreSQL may skip the Bind, Close or
	// Query that would have dropped it (after an error in its batch) and
	// a ROLLBACK TO then keeps the portal (review of 5a09dec).
	watch   bool
	watched map[string]bool
	// replaced: Statement.Replaced of the last hook call
	replaced []Replaced

	// Backend goroutine state.
	backendFatal bool
	outMsgs      int64

	closeOnce sync.Once
	closed    chan struct{}
	beDone    chan struct{}
}

func newSession(srv *Server, raw, conn net.Conn, cr *clientReader, be *pgproto3.Backend) *session {
	ss := &session{
		srv:       srv,
		id:        srv.nextID.Add(1),
		rawClient: raw,
		client:    conn,
		closed:    make(chan struct{}),
		beDone:    make(chan struct{}),
	}
	ss.ctx, ss.cancelCtx = context.WithCancel(context.Background())
	cr.ss = ss
	ss.be = be
	ss.be.SetMaxBodyLen(srv.cfg.MaxMessageLen)
	return ss
}

func (ss *session) attachServer(sc net.Conn) {
	ss.server = sc
	ss.fe = pgproto3.NewFrontend(&serverReader{ss: ss}, nil)
}

// sendClient appends msg to the bytes pending for the client.
func (ss *session) sendClient(msg pgproto3.BackendMessage) {
	b, err := msg.Encode(ss.cbuf)
	if err != nil {
		ss.srv.log.Error("encode message for client", "session", ss.id, "err", err)
		return
	}
	ss.cbuf = b
	ss.outMsgs++
}

func (ss *session) flushClient() error {
	if len(ss.cbuf) == 0 {
		return nil
	}
	ss.cwMu.Lock()
	_, err := ss.client.Write(ss.cbuf)
	ss.cwMu.Unlock()
	ss.srv.m.bytesOut.Add(float64(len(ss.cbuf)))
	if ss.outMsgs > 0 {
		ss.srv.m.messagesOut.Add(float64(ss.outMsgs))
		ss.outMsgs = 0
	}
	if cap(ss.cbuf) > keepBuf {
		ss.cbuf = nil
	} else {
		ss.cbuf = ss.cbuf[:0]
	}
	return err
}

// startUnit runs before a client message is handled. A message that
// begins a unit (a Query, or an extended-protocol message after a Sync)
// while PostgreSQL has not answered earlier units waits for it, so that
// the hooks see every unit at a transaction boundary, with the
// ReadyForQuery of the one before reported (pipelining across Syncs
// through a replicating node is given up for that). It reports whether
// msg is at a boundary.
func (ss *session) startUnit(msg pgproto3.FrontendMessage) (bool, error) {
	if ss.hooks == nil || ss.batchOpen || ss.copying {
		return false, nil
	}
	switch msg.(type) {
	case *pgproto3.Query, *pgproto3.Parse, *pgproto3.Bind, *pgproto3.Close, *pgproto3.Describe,
		*pgproto3.Execute, *pgproto3.FunctionCall:
	default:
		return false, nil // Sync, Flush, Terminate, COPY data
	}
	if ss.outstanding.Load() > 0 {
		if err := ss.flushServer(); err != nil {
			return false, fmt.Errorf("%w: %w", errBackendLost, err)
		}
		if err := ss.waitIdle(ss.ctx); err != nil {
			return false, nil // the session is ending
		}
		ss.deliverEvents()
	}
	ss.portals.atUnit(ss.lastFailed.Load(), byte(ss.txStatus.Load()))
	if len(ss.unitReplaced) > 0 {
		if !ss.failedSinceUnit.Load() {
			for name := range ss.unitReplaced {
				delete(ss.refused, name)
			}
		}
		clear(ss.unitReplaced)
	}
	ss.failedSinceUnit.Store(false)
	if ss.txStatus.Load() == 'I' {
		// The portals ended with their transaction.
		clear(ss.watched)
		clear(ss.refused)
	}
	ss.unit++
	ss.unitRows.Store(false) // every earlier reply has arrived
	ss.copyInsAtUnit, ss.copyEnds = ss.copyIns.Load(), 0
	return true, nil
}

// errAborted is PostgreSQL's error for an Execute of a portal other than
// a COMMIT's or a ROLLBACK's in a failed block (clientPortals.dead).
var errAborted = &pgconn.PgError{Severity: "ERROR", Code: "25P02",
	Message: "current transaction is aborted, commands ignored until end of transaction block"}

// sendTracked is sendServer for a message sent in place of the client's:
// its reply goes to the client (unnamedTracker follows it).
// It returns the tracker's number of msg.
func (ss *session) sendTracked(msg pgproto3.FrontendMessage) uint64 {
	seq := ss.unnamed.sent(msg)
	ss.sendServer(msg)
	return seq
}

// sendServer appends msg to the bytes pending for PostgreSQL.
func (ss *session) sendServer(msg pgproto3.FrontendMessage) {
	b, err := msg.Encode(ss.sbuf)
	if err != nil {
		ss.srv.log.Error("encode message for PostgreSQL", "session", ss.id, "err", err)
		return
	}
	ss.sbuf = b
}

func (ss *session) flushServer() error {
	if len(ss.sbuf) == 0 {
		return nil
	}
	ss.waitCancels()
	_, err := ss.server.Write(ss.sbuf)
	if cap(ss.sbuf) > keepBuf {
		ss.sbuf = nil
	} else {
		ss.sbuf = ss.sbuf[:0]
	}
	return err
}

// clientReader is the session Backend's reader: before blocking on the
// client it flushes what is pending for PostgreSQL, and it enforces the idle
// timeouts.
type clientReader struct {
	ss *session
	r  io.Reader
}

func (cr *clientReader) Read(p []byte) (int, error) {
	ss := cr.ss
	if ss == nil {
		return cr.r.Read(p)
	}
	if ss.server != nil {
		if err := ss.flushServer(); err != nil {
			return 0, fmt.Errorf("%w: %w", errBackendLost, err)
		}
	}
	if ss.inMsgs > 0 {
		ss.srv.m.messagesIn.Add(float64(ss.inMsgs))
		ss.inMsgs = 0
	}
	for {
		timeout := ss.idleTimeout()
		if timeout > 0 {
			_ = ss.rawClient.SetReadDeadline(time.Now().Add(timeout))
		} else if ss.srv.idleTimeouts && ss.established {
			// The backend goroutine may have armed a deadline (see
			// armIdle); busy sessions have none. (Before the session is
			// established, the startup deadline stands.)
			_ = ss.rawClient.SetReadDeadline(time.Time{})
			if t2 := ss.idleTimeout(); t2 > 0 { // became idle meanwhile
				_ = ss.rawClient.SetReadDeadline(time.Now().Add(t2))
			}
		}
		n, err := cr.r.Read(p)
		ss.inBytes += int64(n)
		if n > 0 {
			ss.srv.m.bytesIn.Add(float64(n))
		}
		var ne net.Error
		if n == 0 && errors.As(err, &ne) && ne.Timeout() && ss.interrupt.Swap(false) && !ss.isClosed() {
			_ = ss.rawClient.SetReadDeadline(time.Time{})
			ss.abortIdle()
			continue
		}
		if n == 0 && ss.srv.idleTimeouts && ss.established && errors.As(err, &ne) && ne.Timeout() && !ss.isClosed() {
			if ss.idleTimeout() == 0 {
				continue // became busy (e.g. a long statement): not idle
			}
			if ss.txStatus.Load() == 'I' {
				return 0, &errIdle{codeIdleSessionTimeout, "terminating connection due to idle-session timeout"}
			}
			return 0, &errIdle{codeIdleInTxTimeout, "terminating connection due to idle-in-transaction timeout"}
		}
		return n, err
	}
}

// idleTimeout is the timeout that applies while waiting for the client now.
func (ss *session) idleTimeout() time.Duration {
	if !ss.established || ss.outstanding.Load() > 0 || ss.copying {
		return 0
	}
	if ss.txStatus.Load() == 'I' {
		return ss.srv.cfg.IdleTimeout
	}
	return ss.srv.cfg.IdleInTxTimeout
}

// armIdle starts the idle timeout when the last outstanding reply has
// been relayed: the session goroutine is then blocked reading the client
// with no deadline of its own.
func (ss *session) armIdle(txStatus byte) {
	timeout := ss.srv.cfg.IdleTimeout
	if txStatus != 'I' {
		timeout = ss.srv.cfg.IdleInTxTimeout
	}
	if timeout > 0 {
		_ = ss.rawClient.SetReadDeadline(time.Now().Add(timeout))
	}
}

var showMarker, showTag = []byte(ShowMarker), []byte("SHOW")

// explanation is Backend.Explain's.
type explanation struct{ code, raised, message, hint string }

// Explain implements Backend.
func (ss *session) Explain(code, raised, message, hint string) {
	ss.explain.Store(&explanation{code: code, raised: raised, message: message, hint: hint})
}

// afterAnswer, when set (by tests only), runs on the backend goroutine
// once the last outstanding answer is counted. (Atomic: a test's sessions
// may outlive the test that unsets it.)
var afterAnswer atomic.Pointer[func(*session)]

// errClientWrite marks a failed write to the client inside the backend
// goroutine's reads.
var errClientWrite = errors.New("wire: write to client failed")

// serverReader is the Frontend's reader: before blocking on PostgreSQL it
// flushes what is pending for the client.
type serverReader struct{ ss *session }

func (sr *serverReader) Read(p []byte) (int, error) {
	if err := sr.ss.flushClient(); err != nil {
		return 0, fmt.Errorf("%w: %w", errClientWrite, err)
	}
	return sr.ss.server.Read(p)
}

// run serves an established session until either side ends it.
func (ss *session) run() {
	defer ss.srv.release(ss)
	defer ss.terminate(nil)
	ss.srv.wg.Add(1)
	go ss.backendLoop()
	log := ss.srv.log.With("session", ss.id)
	log.Debug("session started", "remote", ss.info.RemoteAddr, "user", ss.info.User, "database", ss.info.Database, "tls", ss.info.TLS)

	if ss.srv.hooks != nil {
		ss.hookMu.Lock()
		h, err := ss.srv.hooks.NewSession(ss.ctx, ss.info, ss)
		ss.hooks = h // read under hookMu or on this goroutine only
		ss.hookMu.Unlock()
		if err != nil {
			ss.srv.m.errors.WithLabelValues("hook").Inc()
			e := errorResponse(err)
			e.Severity, e.SeverityUnlocalized = "FATAL", "FATAL"
			ss.terminate(e)
			<-ss.beDone
			return
		}
		defer func() {
			// The backend loop ends when the server connection closes:
			// close it first. A client that left without Terminate (a
			// crash, a killed process, a dropped network) sends PostgreSQL
			// nothing, so waiting for the loop alone kept the session and
			// its backend, with its locks, for good.
			ss.terminate(nil)
			<-ss.beDone
			ss.hookMu.Lock()
			ss.drainEventsLocked()
			if ss.hooks != nil {
				ss.hooks.Close()
			}
			ss.hookMu.Unlock()
		}()
	}
	ss.writeClient(&pgproto3.ReadyForQuery{TxStatus: byte(ss.txStatus.Load())})
	err := ss.clientLoop()
	var idle *errIdle
	switch {
	case err == nil, errors.Is(err, errClientLeft):
	case errors.As(err, &idle):
		ss.terminate(fatal(idle.code, "%s", idle.msg))
	case errors.Is(err, errBackendLost):
		// the backend goroutine reports it
		<-ss.beDone
	default:
		log.Debug("session ended", "err", err)
	}
}

// readyStatus notes the transaction status of a ReadyForQuery, relayed or
// Exec's: once the transaction ended, nothing of what Abort did to it
// (abortErr, abortedTxn) or of its rows stays.
func (ss *session) readyStatus(status byte) {
	ss.txStatus.Store(uint32(status))
	ss.injectedOpen.Store(false)
	if status == 'I' {
		ss.unnamed.transactionEnded() // (its portals ended with it)
		ss.txRows.Store(0)
		if ss.abortErr.Load() != nil {
			ss.abortErr.Store(nil) // the transaction ended without another error
		}
		ss.abortedTxn.Store(false)
	}
}

// abortCanceled reports whether ErrorResponse m, relayed or Exec's, is the
// query cancel of an Abort (counting off one late cancel), not one of
// PostgreSQL's own.
func (ss *session) abortCanceled(m *pgproto3.ErrorResponse) bool {
	if m.Code != codeQueryCanceled || ss.lateCancels.Load() <= 0 && !ss.abortedTxn.Load() {
		return false
	}
	if ss.lateCancels.Load() > 0 {
		ss.lateCancels.Add(-1)
	}
	return true
}

// writeCompleted writes a Completed's CommandCompletes to the client.
func (ss *session) writeCompleted(c *Completed) {
	for _, t := range c.Before {
		ss.writeClient(&pgproto3.CommandComplete{CommandTag: []byte(t)})
	}
	e := ss.unnamed.nextNotice
	ss.unnamed.nextNotice = nil
	if e != nil && e.add != nil {
		ss.writeClient(e.add) // (Backend.Warn)
	}
	ss.writeClient(&pgproto3.CommandComplete{CommandTag: []byte(c.Tag)})
}

// writeClient writes one message to the client directly (not through cbuf).
func (ss *session) writeClient(msg pgproto3.BackendMessage) {
	b, err := msg.Encode(nil)
	if err != nil {
		return
	}
	ss.cwMu.Lock()
	_, _ = ss.client.Write(b)
	ss.cwMu.Unlock()
}

// terminate ends the session once: e (if any) is sent to the client, both
// connections are closed and the session context is canceled.
func (ss *session) terminate(e *pgproto3.ErrorResponse) {
	ss.closeOnce.Do(func() {
		if e != nil {
			_ = ss.rawClient.SetWriteDeadline(time.Now().Add(time.Second))
			ss.writeClient(e)
		}
		close(ss.closed)
		ss.cancelCtx()
		ss.client.Close()
		if ss.server != nil {
			// Tell PostgreSQL we are leaving so it does not log an
			// unexpected EOF; best effort.
			_ = ss.server.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			_, _ = ss.server.Write([]byte{'X', 0, 0, 0, 4})
			ss.server.Close()
		}
	})
}

func (ss *session) isClosed() bool {
	select {
	case <-ss.closed:
		return true
	default:
		return false
	}
}

// closeIfIdle is called by Shutdown: an idle session outside a transaction
// ends now, the others when they next become idle.
func (ss *session) closeIfIdle() {
	ss.draining.Store(true)
	if ss.outstanding.Load() == 0 && ss.txStatus.Load() == 'I' {
		ss.terminate(fatal(codeAdminShutdown, "terminating connection due to administrator command (ordo shutting down)"))
	}
}

// backendLost reports a failed PostgreSQL connection during startup.
func (ss *session) backendLost(err error) error {
	ss.srv.m.errors.WithLabelValues("backend").Inc()
	ss.sendClient(fatal(codeConnectionFailure, "ordo: lost the connection to the local PostgreSQL server: %v", err))
	_ = ss.flushClient()
	return fmt.Errorf("%w: %w", errBackendLost, err)
}

// clientFailed classifies a client read error during startup, reporting
// protocol violations to the client.
func (ss *session) clientFailed(err error) error {
	if isProtocolError(err) {
		ss.srv.m.errors.WithLabelValues("protocol").Inc()
		ss.sendClient(fatal(codeProtocolViolation, "invalid frontend message: %v", err))
		_ = ss.flushClient()
	}
	return err
}

// isProtocolError tells a malformed message from a broken connection.
func isProtocolError(err error) bool {
	var ne net.Error
	var idle *errIdle
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.As(err, &ne), errors.Is(err, errBackendLost), errors.As(err, &idle):
		return false
	}
	return true
}

// readClient returns the client's next message: one read ahead
// (unread) first. ended: the session ends (the connection closed, or a
// message that breaks the protocol, which the client is told of); err:
// the read failed.
func (ss *session) readClient() (msg pgproto3.FrontendMessage, ended bool, err error) {
	if ss.unread != nil {
		msg, ss.unread = ss.unread, nil
		return msg, false, nil
	}
	msg, err = receive(ss.be)
	switch {
	case err == nil:
		ss.inMsgs++
		return msg, false, nil
	case ss.isClosed():
		return nil, true, nil
	case isProtocolError(err):
		ss.srv.m.errors.WithLabelValues("protocol").Inc()
		ss.terminate(fatal(codeProtocolViolation, "invalid frontend message: %v", err))
		return nil, true, nil
	}
	return nil, true, err
}

// clientLoop relays client messages to PostgreSQL until the client leaves
// (nil) or fails.
func (ss *session) clientLoop() error {
	for {
		msg, ended, err := ss.readClient()
		if err != nil || ended {
			return err
		}
		parsedAs := "" // the client's text of a Parse Ordo rewrote
		if inCopy, err := ss.duringCopy(msg); err != nil {
			return err // (the backend is lost)
		} else if inCopy {
			// PostgreSQL answers it with 08P01 and ends the session, as
			// it would without Ordo.
			ss.sendServer(msg)
			if err := ss.flushServer(); err != nil {
				return fmt.Errorf("%w: %w", errBackendLost, err)
			}
			continue
		}
		atBoundary, err := ss.startUnit(msg)
		if err != nil {
			return err
		}
		switch m := msg.(type) {
		case *pgproto3.Query:
			if atBoundary, err = ss.afterCloses(msg, atBoundary); err != nil {
				return err
			}
			if skip, ended := ss.skippedInBatch(m); ended {
				return nil
			} else if skip {
				continue
			} else if ss.inHeldBatch() {
				ss.refuseInHeldBatch()
				continue
			}
			ss.syncsSinceExec = 0
			ss.execSinceQuery = false
			if ss.hooks != nil {
				ss.portals.query()
			}
			midBatch := ss.batchOpen
			if ss.hooks != nil {
				ss.stmt = Statement{Kind: KindQuery, SQL: m.String, AtBoundary: atBoundary}
				err := ss.callStatement()
				if err == nil && ss.rewrite != "" {
					m.String = ss.rewrite
					ss.notePositions(0)
				}
				if err != nil {
					var sp *Split
					if errors.As(err, &sp) && len(sp.Pieces) > 0 {
						if err := ss.runSplit(sp, atBoundary); err != nil {
							return err
						}
						ss.endBatch() // (its pieces end with Syncs of Ordo's)
						continue
					}
					var c *Completed
					if errors.As(err, &c) {
						// Answered by the hooks: nothing reaches PostgreSQL
						// but the Closes of the unnamed statement and portal
						// any Query makes.
						// Their replies come now (Flush), before anything an
						// Exec of the hooks could take for its own.
						ss.closeUnnamed()
						if midBatch {
							// PostgreSQL would end the batch at this Query
							// (its implicit transaction too): a Sync of
							// Ordo's does the same, and its status is the
							// one to report.
							ss.syncInUnit()
							ss.sendQuietSync()
							ss.endBatch()
						} else {
							ss.sendServer(&pgproto3.Flush{})
						}
						if err := ss.flushServer(); err != nil {
							return fmt.Errorf("%w: %w", errBackendLost, err)
						}
						if err := ss.waitIdle(ss.ctx); err != nil {
							return nil
						}
						if err := ss.waitUntil(ss.ctx, ss.unnamed.answered); err != nil {
							return nil
						}
						ss.writeCompleted(c)
						ss.writeClient(&pgproto3.ReadyForQuery{TxStatus: byte(ss.txStatus.Load())})
						continue
					}
					ss.closeUnnamed() // as the refused Query would have
					if err := ss.refuseUnit(err); err != nil {
						return err
					}
					ss.endBatch() // (refuseUnit's Sync)
					continue
				}
			}
			ss.outstanding.Add(1)
			if midBatch {
				ss.endBatch() // (PostgreSQL's ReadyForQuery for the Query)
			}
		case *pgproto3.Parse:
			// The hook runs before batchOpen is set: as the first message
			// of a unit it may still Exec at the boundary.
			if ss.hooks != nil && !ss.skipping {
				ss.stmt = Statement{Kind: KindParse, SQL: m.Query, Name: m.Name, ParamOIDs: m.ParameterOIDs, AtBoundary: atBoundary}
				if ss.rejectExtended() {
					ss.openBatch(false)
					continue
				}
				if ss.rewrite != "" {
					parsedAs, m.Query = m.Query, ss.rewrite
				}
			}
			ss.openBatch(false)
		case *pgproto3.Bind:
			if ss.hooks != nil && !ss.skipping {
				ss.stmt = Statement{Kind: KindBind, Name: m.PreparedStatement, Portal: m.DestinationPortal,
					ParamFormats: m.ParameterFormatCodes, Params: m.Parameters, ResultFormats: m.ResultFormatCodes, AtBoundary: atBoundary}
				if err := ss.callStatement(); err != nil {
					// PostgreSQL raises an error of running a statement
					// at its Execute, after BindComplete (and the
					// portal's description): the refusal waits for the
					// portal's Execute, and is dropped if none comes
					// before the Sync (nothing ran).
					if ss.refused == nil {
						ss.refused = map[string]error{}
					}
					ss.refused[m.DestinationPortal] = err
					delete(ss.unitReplaced, m.DestinationPortal)
				} else if ss.replacesRefused(m.DestinationPortal); ss.watch {
					if ss.watched == nil {
						ss.watched = map[string]bool{}
					}
					ss.watched[m.DestinationPortal] = true
				}
			}
			ss.watch = false
			if m.DestinationPortal == "" {
				ss.portals.unnamedLater = false // (its Execute, or the Sync, tells)
			}
			if ss.hooks != nil {
				ss.portals.bound(m.DestinationPortal)
			}
			ss.openBatch(false)
		case *pgproto3.Close:
			ss.openBatch(true)
			if m.ObjectType == 'P' {
				if ss.hooks != nil {
					ss.portals.closed(m.Name)
				}
				if !ss.skipping {
					ss.replacesRefused(m.Name)
				}
			}
			if ss.hooks != nil && !ss.skipping && m.ObjectType == 'S' {
				ss.stmt = Statement{Kind: KindCloseStatement, Name: m.Name, AtBoundary: atBoundary}
				if ss.rejectExtended() {
					continue
				}
			}
		case *pgproto3.Execute:
			ss.openBatch(false)
			if ss.hooks != nil {
				ss.portals.executed(m.Portal)
			}
			if m.Portal == "" && m.MaxRows > 0 {
				ss.portals.unnamedLater = true // it may be suspended
			}
			ss.syncsSinceExec = 0
			ss.execSinceQuery = true
			refusal, ok := ss.refused[m.Portal]
			if ok && ss.unitReplaced[m.Portal] {
				refusal = nil
			}
			// (A refusal also while skipping: a Sync of Ordo's inside the
			// unit, a refused Query's, may have ended PostgreSQL's
			// skipping: fifth review.)
			if refusal == nil && !ss.skipping && ss.portals.dead(m.Portal) {
				refusal = errAborted
			}
			if refusal != nil {
				// Sent in the Execute's place: what becomes of the
				// Execute is what becomes of it (copyStarted). The
				// Bind's warning, if any, goes before the error.
				ss.unnamed.refusedExecute(m.Portal)
				ss.lastExec = ss.sendTracked(&pgproto3.Describe{ObjectType: 'P', Name: ss.newRejection(refusal)})
				ss.skipping = true
				continue
			}
			if ss.watched[m.Portal] && !ss.skipping {
				ss.portalExecuted(m.Portal)
			}
		case *pgproto3.Describe:
			ss.openBatch(false)
		case *pgproto3.Sync:
			if ss.copying {
				ss.syncInUnit() // (answered if the COPY never started)
			}
			ss.endBatch()
			if !ss.copying {
				// PostgreSQL ignores Sync during COPY FROM STDIN.
				ss.outstanding.Add(1)
				ss.syncsSinceExec++
			}
		case *pgproto3.Flush:
		case *pgproto3.FunctionCall:
			if atBoundary, err = ss.afterCloses(msg, atBoundary); err != nil {
				return err
			}
			if skip, ended := ss.skippedInBatch(m); ended {
				return nil
			} else if skip {
				continue
			} else if ss.inHeldBatch() {
				ss.refuseInHeldBatch()
				continue
			}
			if ss.hooks != nil {
				formats := make([]int16, len(m.ArgFormatCodes))
				for i, f := range m.ArgFormatCodes {
					formats[i] = int16(f)
				}
				ss.stmt = Statement{Kind: KindFunctionCall, Function: m.Function, ParamFormats: formats,
					Params: m.Arguments, AtBoundary: atBoundary}
				if err := ss.callStatement(); err != nil {
					// PostgreSQL fails at this point instead (a
					// transaction block becomes failed).
					if err := ss.refuseUnit(err); err != nil {
						return err
					}
					ss.endBatch() // (refuseUnit's Sync)
					continue
				}
			}
			ss.outstanding.Add(1)
			ss.endBatch() // (PostgreSQL's ReadyForQuery for the FunctionCall)
		case *pgproto3.CopyData, *pgproto3.CopyDone, *pgproto3.CopyFail:
			if !ss.copying {
				if ss.syncsSinceExec > 0 && ss.srv.hooks != nil {
					started, err := ss.copyStarted()
					if err != nil {
						return err
					}
					if !started {
						// PostgreSQL ignores COPY messages outside COPY
						// mode (they come from a client that sent them
						// before it saw its COPY fail).
						continue
					}
				}
				ss.copying = true
				// Syncs sent after the Execute that started this COPY
				// reached PostgreSQL in copy mode and were ignored.
				ss.outstanding.Add(-int64(ss.syncsSinceExec))
				ss.unnamed.ignoredSyncs(ss.syncsSinceExec)
				ss.syncsSinceExec = 0
				// Started by an Execute, PostgreSQL ends it at the Sync
				// that follows CopyDone or CopyFail, not at them: the
				// batch goes on to that Sync, even if one was sent after
				// the Execute (and ignored), so no message before it
				// begins a unit, where the hooks might run statements of
				// their own.
				ss.copyExtended = ss.execSinceQuery
				ss.batchOpen = ss.batchOpen || ss.copyExtended
			}
			switch msg.(type) {
			case *pgproto3.CopyDone, *pgproto3.CopyFail:
				ss.copying = false
				ss.copyEnds++
				ss.lastExec = 0 // (an Execute starts one COPY at most)
			}
		case *pgproto3.Terminate:
			ss.clientLeft.Store(true)
			ss.sendServer(m)
			_ = ss.flushServer()
			return nil
		default:
			ss.srv.m.errors.WithLabelValues("protocol").Inc()
			ss.terminate(fatal(codeProtocolViolation, "unexpected message type %T after startup", msg))
			return nil
		}
		if _, sync := msg.(*pgproto3.Sync); ss.srv.hooks != nil && (!sync || !ss.copying) {
			seq := ss.unnamed.sentAs(msg, parsedAs) // (only hooks Exec or inject: a plain relay need not follow replies)
			if _, ok := msg.(*pgproto3.Execute); ok {
				ss.lastExec = seq
			}
		}
		ss.sendServer(msg)
		if ss.hold.Load() {
			unitEnd := false
			switch msg.(type) {
			case *pgproto3.Query, *pgproto3.FunctionCall:
				unitEnd = true
			case *pgproto3.CopyDone, *pgproto3.CopyFail:
				unitEnd = !ss.copyExtended
			case *pgproto3.Sync:
				unitEnd = !ss.copying
			}
			if unitEnd {
				if err := ss.finishHeld(); err != nil {
					return err
				}
				continue
			}
		}
		if len(ss.sbuf) >= flushThreshold {
			if err := ss.flushServer(); err != nil {
				return fmt.Errorf("%w: %w", errBackendLost, err)
			}
		}
	}
}

// copyStarted tells, at the first COPY message of a client that sent
// Syncs after the COPY's Execute (syncsSinceExec of them), whether the
// COPY started. PostgreSQL ignores those Syncs in COPY mode, but when the
// COPY failed it answers them (the first ends the Execute's error), and
// then ignores the COPY messages. A client that waited for CopyInResponse
// before sending its data has the answer already; one that did not waits
// here for PostgreSQL's answer to the Execute (the tracker follows it).
// Only a session with hooks follows replies; a plain relay takes the COPY
// for started, which costs it no more than its count of Syncs awaiting
// an answer.
func (ss *session) copyStarted() (bool, error) {
	if err := ss.flushServer(); err != nil {
		return false, fmt.Errorf("%w: %w", errBackendLost, err)
	}
	var started bool
	if err := ss.waitUntil(ss.ctx, func() bool {
		var decided bool
		started, decided = ss.unnamed.copyFate(ss.lastExec)
		return decided
	}); err != nil {
		if errors.Is(err, ErrSessionClosed) || ss.ctx.Err() != nil {
			return false, nil // the session is ending
		}
		return false, err
	}
	return started, nil
}

// Abort implements Backend.
func (ss *session) Abort(err error) {
	if ss.idle() && !ss.running() {
		return
	}
	e := errorResponse(err)
	ss.lateErr.Store(e)
	ss.abortedTxn.Store(true)
	ss.abortErr.Store(e)
	if ss.running() {
		// A statement that blocks an apply waits on a lock, for long. If
		// the reply comes within abortGrace the backend was not running
		// one (a Parse, say, which a cancel would fail for nothing): roll
		// the transaction back as an idle one instead. Nothing more is
		// sent to PostgreSQL meanwhile (the cancel counts as in flight).
		ss.cancelStarted()
		go func() {
			defer ss.cancelDone()
			deadline := time.Now().Add(abortGrace)
			for ss.running() && time.Now().Before(deadline) {
				time.Sleep(abortGrace / 10)
			}
			if ss.running() {
				ss.cancelForAbort(e)
				return
			}
			ss.interrupt.Store(true)
			_ = ss.rawClient.SetReadDeadline(time.Now())
		}()
		return
	}
	// Idle in a transaction: wake the session goroutine from its read.
	ss.interrupt.Store(true)
	_ = ss.rawClient.SetReadDeadline(time.Now())
}

// maxHeldRows bounds the rows a held statement keeps back (holdRows):
// beyond it they go out, and the statement is not run again.
const maxHeldRows = 1 << 20

// holdRow holds back msg, a row of the held statement, and reports
// whether it did; else it sends what it held, to be followed by msg
// (backend goroutine). Nothing is held once the client may be waiting
// for it: an extended unit whose Sync was not sent yet (tagNeedsSync).
func (ss *session) holdRow(msg pgproto3.BackendMessage) bool {
	if (!ss.tagNeedsSync.Load() || ss.outstanding.Load() > 0) && len(ss.heldRows)+rowSize(msg) <= maxHeldRows {
		if b, err := msg.Encode(ss.heldRows); err == nil {
			ss.heldRows = b
			return true
		}
	}
	ss.releaseRows()
	return false
}

// rowSize is the encoded size of a DataRow (else a small figure).
func rowSize(msg pgproto3.BackendMessage) int {
	n := 1 + 4 + 2
	if r, ok := msg.(*pgproto3.DataRow); ok {
		for _, v := range r.Values {
			n += 4 + len(v)
		}
	}
	return n
}

// releaseRows sends the rows held back (holdRow), and holds no more of
// the unit's (backend goroutine).
func (ss *session) releaseRows() {
	ss.holdRows.Store(false)
	if len(ss.heldRows) > 0 {
		ss.cbuf = append(ss.cbuf, ss.heldRows...)
		ss.heldRows = nil
		ss.noteRows()
	}
}

// noteRows notes that the unit relayed rows or a COPY (UnitSentRows).
func (ss *session) noteRows() {
	if !ss.unitRows.Load() {
		ss.unitRows.Store(true)
	}
}

// running reports whether PostgreSQL is running something of the
// client's: what it sent, or a statement of its that the hooks run again
// (ExecAbortable).
func (ss *session) running() bool {
	if ss.outstanding.Load() > 0 {
		return true
	}
	ex := ss.exec.Load()
	return ex != nil && ex.abortable && ex.sent.Load()
}

// idle reports whether the session is outside a transaction block: the
// last ReadyForQuery said so, and no BEGIN of BeginHere's was sent since
// (a statement sent with it runs in a block, possibly waiting for a lock,
// while the client has not sent its Sync yet).
func (ss *session) idle() bool {
	return ss.txStatus.Load() == 'I' && !ss.injectedOpen.Load()
}

// abortGrace is how long Abort waits for a running statement to answer
// before cancelling it.
const abortGrace = 5 * time.Millisecond

// cancelStarted counts one cancel in flight.
func (ss *session) cancelStarted() {
	ss.cancelMu.Lock()
	ss.cancelsInFlight++
	ss.cancelsPending.Store(int32(ss.cancelsInFlight))
	ss.cancelMu.Unlock()
}

// cancelDone ends one cancel in flight.
func (ss *session) cancelDone() {
	ss.cancelMu.Lock()
	ss.cancelsInFlight--
	ss.cancelsPending.Store(int32(ss.cancelsInFlight))
	if ss.cancelsInFlight == 0 && ss.cancelCond != nil {
		ss.cancelCond.Broadcast()
	}
	ss.cancelMu.Unlock()
}

// cancelForAbort cancels the running statement for Abort; its 57014 error,
// whichever statement it hits, is reported as e.
func (ss *session) cancelForAbort(e *pgproto3.ErrorResponse) {
	ss.lateErr.Store(e)
	ss.lateCancels.Add(1)
	ss.srv.log.Debug("abort: cancel", "session", ss.id, "pid", ss.backendPID, "late", ss.lateCancels.Load())
	ss.cancelStarted()
	go func() {
		_ = ss.cancelBackend()
		ss.cancelDone()
	}()
}

// waitCancels waits until Abort's cancel requests are delivered (each is
// bounded by the dial timeout).
func (ss *session) waitCancels() {
	if ss.cancelsPending.Load() == 0 {
		return // the hot path: no abort in progress
	}
	ss.cancelMu.Lock()
	defer ss.cancelMu.Unlock()
	if ss.cancelCond == nil {
		ss.cancelCond = sync.NewCond(&ss.cancelMu)
	}
	for ss.cancelsInFlight > 0 {
		ss.cancelCond.Wait()
	}
}

// cancelsDelivered reports whether no cancel request of Abort is in
// flight.
func (ss *session) cancelsDelivered() bool { return ss.cancelsPending.Load() == 0 }

// abortIdle runs on the session goroutine when Abort interrupted its read:
// it rolls back the idle transaction, releasing its locks, and leaves a
// failed one in its place for the client to roll back.
func (ss *session) abortIdle() {
	if ss.idle() || ss.abortErr.Load() == nil {
		return
	}
	if ss.outstanding.Load() > 0 || ss.batchOpen || ss.copying {
		if e := ss.abortErr.Load(); e != nil {
			ss.cancelForAbort(e)
		}
		return
	}
	ctx, cancel := context.WithTimeout(ss.ctx, 10*time.Second)
	defer cancel()
	if _, err := ss.Exec(ctx, "ROLLBACK", "BEGIN", "SELECT 'ordo: transaction aborted'::int"); err != nil {
		ss.srv.log.Warn("abort of an idle transaction failed", "session", ss.id, "err", err)
	}
}

// Warn implements Backend.
func (ss *session) Warn(code, msg string) {
	ss.noticeEdit().add = &pgproto3.NoticeResponse{Severity: "WARNING", SeverityUnlocalized: "WARNING", Code: code, Message: msg}
}

// Unwarn implements Backend.
func (ss *session) Unwarn(code, msg string) {
	e := ss.noticeEdit()
	e.drop, e.dropMsg = code, msg
}

// noticeEdit is the edit Warn and Unwarn make to the replies of the
// statement being reported (the tracker takes it when it is sent).
// Session goroutine.
func (ss *session) noticeEdit() *noticeEdit {
	if ss.unnamed.nextNotice == nil {
		ss.unnamed.nextNotice = &noticeEdit{}
	}
	return ss.unnamed.nextNotice
}

// Notice implements Backend.
func (ss *session) Notice(msg string) {
	ss.writeClient(&pgproto3.NoticeResponse{Severity: "NOTICE", SeverityUnlocalized: "NOTICE", Code: "01000", Message: msg})
}

// HoldReady implements Backend.
func (ss *session) HoldReady() {
	ss.hold.Store(true)
	if ss.stmt.Kind == KindQuery {
		ss.holdTag.Store(true)
	}
}

// copyOpen reports whether a COPY FROM STDIN of the unit started
// (CopyInResponse) and the client has not ended it (CopyDone, CopyFail).
// Counted, not flagged: a client may send its data and CopyDone before
// the CopyInResponse arrives, and one unit may run several COPYs. Session
// goroutine.
func (ss *session) copyOpen() bool { return ss.copyIns.Load()-ss.copyInsAtUnit > ss.copyEnds }

// finishHeld completes a unit whose ReadyForQuery is held: it waits for
// PostgreSQL to answer the unit, runs ReadyHolder.BeforeReady and sends the
// error, if any, and the ReadyForQuery. If the unit started a COPY FROM
// STDIN, it returns at once and runs again after the client's CopyDone or
// CopyFail. It runs on the session goroutine.
func (ss *session) finishHeld() error {
	if err := ss.flushServer(); err != nil {
		return fmt.Errorf("%w: %w", errBackendLost, err)
	}
	// A COPY of the unit that the client has not ended (copyOpen) waits
	// for the client's data.
	if err := ss.waitUntil(ss.ctx, func() bool { return ss.outstanding.Load() <= 0 || ss.copyOpen() }); err != nil {
		if errors.Is(err, ErrSessionClosed) || ss.ctx.Err() != nil {
			return nil
		}
		return err
	}
	if ss.outstanding.Load() > 0 {
		return nil // COPY in progress: the client sends data next
	}
	ss.hold.Store(false)
	ss.holdTag.Store(false)
	ss.holdRows.Store(false)
	extended := ss.tagNeedsSync.Swap(false)
	tag := ss.heldTag.Swap(nil)
	var rows []byte
	if p := ss.rowsDone.Swap(nil); p != nil {
		rows = *p
	}
	ss.holdErr.Store(false)
	var herr error
	ss.tagHeld = tag != nil
	ss.hookMu.Lock()
	ss.drainEventsLocked()
	if rh, ok := ss.hooks.(ReadyHolder); ok {
		herr = rh.BeforeReady(ss.ctx)
	}
	ss.drainEventsLocked()
	ss.hookMu.Unlock()
	ss.deliverEvents()
	held := ss.heldErr.Swap(nil)
	if ss.retagged {
		// The statement ran again (held error or not), and its result,
		// if it completed, is the client's.
		tag, held, rows = nil, nil, ss.rerows
		if ss.retag != nil {
			tag = &pgproto3.CommandComplete{CommandTag: ss.retag}
		}
		ss.retag, ss.rerows, ss.retagged = nil, nil, false
	}
	if len(rows) > 0 {
		// Sent as PostgreSQL sent them, before the completion or the
		// error that ends the statement.
		ss.cwMu.Lock()
		_, _ = ss.client.Write(rows)
		ss.cwMu.Unlock()
	}
	switch {
	case herr != nil:
		ss.srv.m.errors.WithLabelValues("hook").Inc()
		if extended && tag != nil {
			// PostgreSQL's order: an Execute's completion, then the
			// error of the commit at its Sync.
			ss.writeClient(tag)
		}
		ss.writeClient(errorResponse(herr))
	case held != nil:
		ss.writeClient(held)
	case tag != nil:
		ss.writeClient(tag)
	}
	ss.writeClient(&pgproto3.ReadyForQuery{TxStatus: byte(ss.txStatus.Load())})
	if ss.lateCancels.Load() > 0 && ss.cancelsDelivered() {
		// As at a relayed ReadyForQuery that ends the last unit: every
		// cancel of Abort's was delivered before what it could hit was
		// sent (BeforeReady's statements, answered by now), so one that
		// missed was ignored by PostgreSQL.
		ss.lateCancels.Store(0)
	}
	if ss.srv.idleTimeouts {
		ss.armIdle(byte(ss.txStatus.Load()))
	}
	return nil
}

// callStatement runs SessionHooks.Statement for ss.stmt.
func (ss *session) callStatement() error {
	ss.stmt.Unit = ss.unit
	ss.unnamed.nextNotice = nil // (one the last statement's hooks asked for and did not use)
	ss.hookMu.Lock()
	ss.drainEventsLocked()
	err := ss.hooks.Statement(ss.ctx, &ss.stmt)
	ss.drainEventsLocked()
	ss.hookMu.Unlock()
	ss.rewrite, ss.replaced, ss.watch = ss.stmt.Rewrite, ss.stmt.Replaced, ss.stmt.WatchExecute
	if ss.rewrite != "" && !ss.showRewritten.Load() && strings.Contains(ss.rewrite, ShowMarkerSQL) {
		ss.showRewritten.Store(true)
	}
	ss.stmt = Statement{}
	ss.deliverEvents()
	if err != nil {
		ss.srv.m.errors.WithLabelValues("hook").Inc()
	}
	return err
}

// skippedInBatch reports whether PostgreSQL skips msg, a Query or a
// FunctionCall the client sent inside an extended-protocol batch (before
// its Sync): after an earlier error of the batch it does, with no reply
// and no ReadyForQuery (counting one hung the session, which then answered
// nothing more), and a COPY started and not ended takes msg for its
// failure, then skips to the Sync. Which, the replies so far tell (Failed:
// a round trip, for what drivers do not send). A skipped message does not
// reach the hooks either: a refusal of theirs, which ends with a Sync of
// Ordo's, would end PostgreSQL's skipping. ended: the session is ending.
func (ss *session) skippedInBatch(msg pgproto3.FrontendMessage) (skip, ended bool) {
	if ss.hooks == nil || !ss.batchOpen || ss.copying {
		return false, false
	}
	failed, err := ss.Failed(ss.ctx)
	switch {
	case errors.Is(err, ErrNotAtBoundary):
		ss.sendServer(msg) // (in COPY FROM STDIN PostgreSQL answers it with 08P01 and ends the session, as it would directly)
		return true, false
	case err != nil:
		return false, true
	}
	return failed, false
}

// afterCloses begins a unit at msg, a Query or a FunctionCall, if only
// Closes came before it in the batch (pgjdbc's extendedForPrepared mode
// sends those of dead statements and portals ahead of a simple Query,
// with no Sync): msg is where a Sync would leave it. A Sync of Ordo's,
// its ReadyForQuery unseen, ends the batch there, and msg begins a unit
// of its own, at a boundary, where the hooks may run statements of their
// own ahead of it (an autocommit update outside a block was refused,
// 0A000). It returns whether msg is at a boundary.
func (ss *session) afterCloses(msg pgproto3.FrontendMessage, atBoundary bool) (bool, error) {
	if ss.hooks == nil || !ss.batchOpen || !ss.onlyCloses || ss.skipping || ss.copying {
		return atBoundary, nil
	}
	ss.sendQuietSync()
	ss.endBatch()
	return ss.startUnit(msg)
}

// notCopyData reports whether msg is a message PostgreSQL refuses in
// COPY FROM STDIN mode (it takes COPY data, and ignores Flush and Sync).
func notCopyData(msg pgproto3.FrontendMessage) bool {
	switch msg.(type) {
	case *pgproto3.CopyData, *pgproto3.CopyDone, *pgproto3.CopyFail, *pgproto3.Flush, *pgproto3.Sync, *pgproto3.Terminate:
		return false
	}
	return true
}

// duringCopy reports whether msg, from the client, comes while
// PostgreSQL waits for the data of a COPY FROM STDIN (a protocol
// violation, which PostgreSQL answers with 08P01, ending the session):
// then msg must reach PostgreSQL as it came, with nothing of Ordo's
// before it. (The session hung: the unit msg begins waited for the COPY's
// ReadyForQuery, which never came, or the hooks' statements went ahead
// of msg.) In the middle of the client's COPY data it asks PostgreSQL for
// its replies so far: if the COPY failed, PostgreSQL ignores the data and
// runs msg as any message. Cheap for every other message.
func (ss *session) duringCopy(msg pgproto3.FrontendMessage) (bool, error) {
	if ss.hooks == nil || !ss.copying && (ss.batchOpen || ss.outstanding.Load() <= 0) || !notCopyData(msg) {
		return false, nil
	}
	var err error
	if ss.copying {
		err = ss.awaitReplies(ss.ctx) // ErrNotAtBoundary: the COPY is open
	} else if err = ss.flushServer(); err != nil {
		return false, fmt.Errorf("%w: %w", errBackendLost, err)
	} else if err = ss.waitUntil(ss.ctx, func() bool { return ss.outstanding.Load() <= 0 || ss.copyOpen() }); err == nil && ss.outstanding.Load() > 0 {
		return true, nil
	}
	return errors.Is(err, ErrNotAtBoundary), nil // (any other error: the session is ending)
}

// sendQuietSync sends a Sync of Ordo's whose ReadyForQuery the client
// does not see, ending PostgreSQL's batch there.
func (ss *session) sendQuietSync() {
	ss.quietReady.Store(true)
	ss.outstanding.Add(1)
	ss.sendTracked(&pgproto3.Sync{})
}

// openBatch notes a client's extended-protocol message: PostgreSQL's
// batch is open until its Sync. isClose: the message is a Close.
func (ss *session) openBatch(isClose bool) {
	ss.onlyCloses = isClose && (!ss.batchOpen || ss.onlyCloses)
	ss.batchOpen = true
}

// endBatch notes that PostgreSQL's extended-protocol batch ends here: at
// the client's Sync, at a Sync of Ordo's inside the client's batch
// (refuseUnit, runSplit, a Query the hooks answered), and at a Query or a
// FunctionCall PostgreSQL runs inside it, which it answers with a
// ReadyForQuery, after which it is where a Sync leaves it (its implicit
// transaction ended, skipping nothing, even after the message's own
// error). What the client sends next begins a unit of its own. (The batch
// taken for open after such a Query, an error of it made the next Query
// of the batch look skipped, dropped unanswered; pgjdbc's
// extendedForPrepared mode, which sends the Closes of dead portals and
// then BEGIN as a Query, had every later statement of the transaction
// refused as not at a boundary, and its COMMIT turned into a rollback.)
// An unnamed portal bound and not executed outlives the batch in a block
// (a Query drops it, a Sync or a FunctionCall does not): an Exec of the
// hooks at the next unit must not send a Query that would drop it
// (unnamedLater).
func (ss *session) endBatch() {
	ss.batchOpen, ss.skipping = false, false
	if ss.hooks != nil && ss.portals.pending("") {
		ss.portals.unnamedLater = true // bound, to be executed later
	}
}

// errCommitsHeldBatch refuses a Query or FunctionCall inside an
// extended-protocol batch whose statements so far run in a block the hooks
// opened for them (HoldReady: an update outside a transaction block).
// PostgreSQL commits the batch's implicit transaction at the end of such a
// message, and the hooks can end theirs only at the batch's end: the
// Query's ReadyForQuery reported their block as the client's ('T'), and
// the client's later statements ran in it, never committed.
var errCommitsHeldBatch = &pgconn.PgError{Severity: "ERROR", Code: codeFeatureNotSupported,
	Message: "ordo: a simple Query or function call inside an extended-protocol batch, after an update of the batch outside a transaction block, cannot be replicated: PostgreSQL would commit the batch so far at its end",
	Hint:    "Send a Sync before it, or open a transaction block with BEGIN."}

// inHeldBatch reports whether the batch so far runs in a block the hooks
// opened for it and will end at the batch's end (errCommitsHeldBatch).
func (ss *session) inHeldBatch() bool {
	return ss.hooks != nil && ss.batchOpen && ss.hold.Load()
}

// refuseInHeldBatch answers errCommitsHeldBatch in the message's place as
// a refused extended-protocol message is answered: PostgreSQL fails the
// block at this point and skips the rest of the batch, and at the batch's
// Sync the hooks roll their block back (a Sync of Ordo's here would end
// the unit where the hooks cannot run their ROLLBACK: the failed block
// stayed, the client's). PostgreSQL would answer a failed Query with a
// ReadyForQuery of its own and run the rest of the batch.
func (ss *session) refuseInHeldBatch() {
	ss.lastExec = ss.sendTracked(&pgproto3.Describe{ObjectType: 'P', Name: ss.newRejection(errCommitsHeldBatch)})
	ss.skipping = true
}

// syncInUnit notes a Sync of Ordo's sent inside the unit the hooks see, or
// a client's PostgreSQL may answer there: after it PostgreSQL stops
// skipping, and an Execute of a refused portal whose replacement it
// skipped would run what the hooks refused. The unit's replacements are
// not trusted from then on.
func (ss *session) syncInUnit() {
	clear(ss.unitReplaced)
}

// replacesRefused notes a Bind or Close of portal that may end a refusal of it
// (refused): for the rest of the unit, and after it if the unit did not
// fail.
func (ss *session) replacesRefused(portal string) {
	if _, ok := ss.refused[portal]; !ok {
		return
	}
	if ss.unitReplaced == nil {
		ss.unitReplaced = map[string]bool{}
	}
	ss.unitReplaced[portal] = true
}

// portalExecuted tells the hooks that the client's Execute of portal, which
// they watch, is being sent (PortalWatcher).
func (ss *session) portalExecuted(portal string) {
	w, ok := ss.hooks.(PortalWatcher)
	if !ok {
		return
	}
	ss.hookMu.Lock()
	ss.drainEventsLocked()
	kept := ss.unnamed.nextNotice
	ss.unnamed.nextNotice = nil
	w.Executed(portal)
	if e := ss.unnamed.nextNotice; e != nil {
		ss.unnamed.executeNotice(portal, e) // (a Warn or Unwarn of Executed's)
	}
	ss.unnamed.nextNotice = kept
	ss.hookMu.Unlock()
	ss.deliverEvents()
}

// closeUnnamed sends Closes of the unnamed statement and portal, whose
// replies the client does not see: PostgreSQL drops both at every Query,
// and this one does not reach it.
func (ss *session) closeUnnamed() {
	ss.unnamed.sentInjectedCloses()
	ss.sendServer(&pgproto3.Close{ObjectType: 'S'})
	ss.sendServer(&pgproto3.Close{ObjectType: 'P'})
}

// refuseUnit makes PostgreSQL fail the unit at this point with err (a
// Describe of a rejection portal) and ends it with a Sync of its own. If
// the hook held the ReadyForQuery before it refused (it opened a block for
// the statement), the unit ends here all the same.
func (ss *session) refuseUnit(err error) error {
	ss.syncInUnit()
	ss.outstanding.Add(1)
	ss.sendTracked(&pgproto3.Describe{ObjectType: 'P', Name: ss.newRejection(err)})
	ss.sendTracked(&pgproto3.Sync{})
	if ss.hold.Load() {
		return ss.finishHeld()
	}
	return nil
}

// rejectExtended runs the hook for an extended-protocol message and, if it
// refuses it, makes PostgreSQL fail in its place. It reports whether the
// message was rejected.
func (ss *session) rejectExtended() bool {
	err := ss.callStatement()
	if err == nil {
		return false
	}
	ss.sendTracked(&pgproto3.Describe{ObjectType: 'P', Name: ss.newRejection(err)})
	ss.skipping = true
	return true
}

// silentRejection stands for a rejection whose error the client does not
// see (newRejection(nil)): PostgreSQL skips to the Sync, and that is all.
var silentRejection = &pgproto3.ErrorResponse{}

// newRejection records err under a portal name that does not exist (nil:
// a silent rejection). A
// Describe of that portal makes PostgreSQL raise 34000 at exactly this
// point of the stream (failing the transaction, skipping to Sync); the
// backend goroutine recognizes our portal name in that error and sends err
// to the client instead.
func (ss *session) newRejection(err error) string {
	var warn *pgproto3.NoticeResponse
	if e := ss.unnamed.nextNotice; e != nil && err != nil {
		// The message refused: its warning (Backend.Warn) comes before
		// its error, as PostgreSQL's before a failed COMMIT's.
		warn = e.add
	}
	ss.unnamed.nextNotice = nil
	ss.rejectSeq++
	name := fmt.Sprintf("ordo_rejected_%d_%d", ss.id, ss.rejectSeq)
	ss.mu.Lock()
	if ss.rejects == nil {
		ss.rejects = make(map[string]rejection)
	}
	e := silentRejection
	if err != nil {
		e = errorResponse(err)
	}
	ss.rejects[name] = rejection{seq: ss.rejectSeq, err: e, warn: warn}
	if len(ss.rejects) > keptRejections {
		// PostgreSQL skipped the Describe of the oldest (an error came
		// before it in its batch), or it would have been answered long
		// ago: forget it.
		oldest, at := "", ss.rejectSeq
		for n, r := range ss.rejects {
			if r.seq < at {
				oldest, at = n, r.seq
			}
		}
		delete(ss.rejects, oldest)
	}
	ss.nrejects.Store(int32(len(ss.rejects)))
	ss.mu.Unlock()
	return name
}

// keptRejections bounds the rejections remembered. Each is forgotten when
// its 34000 comes back, or, if PostgreSQL skipped its Describe, once this
// many newer ones were made. Never when the session is idle: the backend
// goroutine cannot tell whether a rejection made while it counted the
// last answer precedes that answer or follows it (it used to forget them
// all then, and a client saw `34000 portal "ordo_rejected_…"`).
const keptRejections = 64

// rejection is a hook error waiting for PostgreSQL's 34000 for its portal
// (seq orders them).
type rejection struct {
	seq  uint64
	err  *pgproto3.ErrorResponse
	warn *pgproto3.NoticeResponse // to send before err
}

// takeRejection returns the hook error behind PostgreSQL's error m, if m is
// the answer to one of our rejection portals, and the warning to send
// before it, if any.
func (ss *session) takeRejection(m *pgproto3.ErrorResponse) (*pgproto3.ErrorResponse, *pgproto3.NoticeResponse) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for name, r := range ss.rejects {
		if strings.Contains(m.Message, `"`+name+`"`) {
			delete(ss.rejects, name)
			ss.nrejects.Store(int32(len(ss.rejects)))
			return r.err, r.warn
		}
	}
	return nil, nil
}

// deliverEvents delivers pending ReadyForQuery events unless another
// goroutine holds the hooks (it will deliver them).
func (ss *session) deliverEvents() {
	for ss.nev.Load() > 0 {
		if !ss.hookMu.TryLock() {
			return
		}
		ss.drainEventsLocked()
		ss.hookMu.Unlock()
	}
}

// drainEventsLocked calls ReadyForQuery for each pending event; hookMu is held.
func (ss *session) drainEventsLocked() {
	if ss.nev.Load() == 0 {
		return
	}
	ss.evMu.Lock()
	evs := ss.events
	ss.events = nil
	ss.nev.Store(0)
	ss.evMu.Unlock()
	if ss.hooks == nil {
		return // NewSession returned no hooks for this session
	}
	ss.inReadyForQuery = true
	for _, st := range evs {
		ss.hooks.ReadyForQuery(st)
	}
	ss.inReadyForQuery = false
}

// backendLoop relays PostgreSQL's messages to the client. It runs on the
// backend goroutine.
func (ss *session) backendLoop() {
	defer ss.srv.wg.Done()
	defer close(ss.beDone)
	defer func() {
		if r := recover(); r != nil {
			ss.srv.log.Error("panic in backend relay", "session", ss.id, "panic", r)
			ss.terminate(fatal(codeInternal, "ordo: internal error"))
		}
	}()
	for {
		msg, err := ss.fe.Receive()
		if err != nil {
			ss.backendFailed(err)
			return
		}
		if ps, ok := msg.(*pgproto3.ParameterStatus); ok {
			ss.noteParameter(ps)
		}
		var warn *pgproto3.NoticeResponse // (Backend.Warn) to send before msg
		if ex := ss.exec.Load(); ex != nil && ss.execMessage(ex, msg) {
			continue
		}
		if ss.srv.hooks == nil {
			// A plain relay: nothing of Ordo's among the replies.
		} else if _, ok := msg.(*pgproto3.NoticeResponse); ok && ss.unnamed.injectedFirst() {
			// Raised by a statement of Ordo's: "there is already a
			// transaction in progress", to SyncHere's BEGIN, or to
			// BeginHere's in a block still open.
			continue
		} else {
			if n, ok := msg.(*pgproto3.NoticeResponse); ok && ss.unnamed.dropNotice(n) {
				continue // raised as Ordo ran the statement (Backend.Unwarn)
			}
			var drop, began, show bool
			drop, began, show, warn = ss.unnamed.reply(msg)
			if m, ok := msg.(*pgproto3.CommandComplete); ok && show {
				m.CommandTag = showTag // (the rest of a rewritten SHOW's portal)
			}
			if _, failed := msg.(*pgproto3.ErrorResponse); failed && !drop {
				ss.unitFailed.Store(true) // (before the wake-up: see awaitReplies)
				ss.failedSinceUnit.Store(true)
			}
			if ss.waiters.Load() > 0 && (ss.unnamed.answered() || ss.unitFailed.Load()) {
				ss.wakeWaiters() // awaitReplies waits for the replies so far
			}
			if drop {
				if began {
					ss.beginsSinceInjected.Store(0)
					ss.injectedBegins.Add(1)
				}
				continue
			}
		}
		if m, ok := msg.(*pgproto3.CommandComplete); ok && ss.srv.hooks != nil {
			switch tag := string(m.CommandTag); {
			case tag == "BEGIN" || tag == "START TRANSACTION":
				ss.begins.Add(1)
				ss.beginsSinceInjected.Add(1)
			case tag == "COMMIT" || tag == "ROLLBACK":
				// The transaction ended, and the next of the batch
				// begins (a ROLLBACK TO SAVEPOINT says ROLLBACK too: the
				// rows before the savepoint are then left uncounted, and
				// a count too low only costs a logical message).
				ss.txRows.Store(0)
			default:
				ss.txRows.Add(changedRows(tag))
			}
		}
		if ss.showRewritten.Load() {
			// A rewritten SHOW (ShowMarker): its one row loses the
			// marker, and the CommandComplete right after it says SHOW.
			switch m := msg.(type) {
			case *pgproto3.DataRow:
				if len(m.Values) == 1 && bytes.HasSuffix(m.Values[0], showMarker) {
					m.Values[0] = m.Values[0][:len(m.Values[0])-len(showMarker)]
					ss.showTag = true
				}
			case *pgproto3.CommandComplete:
				if ss.showTag {
					ss.showTag = false
					m.CommandTag = showTag
				}
			default:
				ss.showTag = false
			}
		}
		described := false
		if ss.holdTag.Load() {
			// The last CommandComplete of a held query waits for
			// finishHeld; an earlier one goes out, after its rows,
			// before what follows it.
			if _, rfq := msg.(*pgproto3.ReadyForQuery); !rfq {
				if t := ss.heldTag.Swap(nil); t != nil {
					ss.releaseRows()
					ss.sendClient(t)
					ss.noteRows() // the client reads a result of the unit
				}
			}
		}
		if warn != nil {
			ss.sendClient(warn) // where PostgreSQL's own warning would go
		}
		if ss.holdRows.Load() {
			switch msg.(type) {
			case *pgproto3.RowDescription, *pgproto3.DataRow:
				_, described = msg.(*pgproto3.RowDescription)
				// An extended unit's RowDescription answers a
				// Describe, not the Execute: it goes out.
				described = described && ss.tagNeedsSync.Load()
				if !described && ss.holdRow(msg) {
					continue
				}
			}
		}
		if m, ok := msg.(*pgproto3.CommandComplete); ok && ss.holdTag.Load() {
			if !ss.tagNeedsSync.Load() || ss.outstanding.Load() > 0 {
				ss.heldTag.Store(&pgproto3.CommandComplete{CommandTag: append([]byte(nil), m.CommandTag...)})
				continue
			}
			ss.noteRows() // relayed: no Sync yet (tagNeedsSync)
		}
		if len(ss.heldRows) > 0 {
			switch msg.(type) {
			case *pgproto3.ReadyForQuery, *pgproto3.ErrorResponse, *pgproto3.NoticeResponse,
				*pgproto3.ParameterStatus, *pgproto3.NotificationResponse:
				// (held with them, or asynchronous; an error that is not
				// held releases them: sendError)
			default:
				ss.releaseRows() // they go out before what follows them
			}
		}
		switch m := msg.(type) {
		case *pgproto3.RowDescription, *pgproto3.DataRow, *pgproto3.CopyOutResponse, *pgproto3.CopyBothResponse:
			if !described {
				ss.noteRows()
			}
		case *pgproto3.ReadyForQuery:
			ss.positions.Store(nil)
			if ss.explain.Load() != nil {
				ss.explain.Store(nil)
			}
			ss.readyStatus(m.TxStatus)
			ss.lastFailed.Store(ss.unitFailed.Swap(false))
			quiet := ss.quietReady.Swap(false)
			if !quiet && ss.hold.Load() && ss.outstanding.Load() <= 1 && ss.holdRows.Swap(false) {
				// The held statement is answered: its rows are
				// finishHeld's from now on, and no more are held.
				// (Only a unit's last ReadyForQuery follows rows held:
				// the pieces of a split query hold none.)
				rows := ss.heldRows
				ss.heldRows = nil
				ss.rowsDone.Store(&rows)
			}
			if quiet || (ss.hold.Load() && ss.outstanding.Load() <= 1) {
				// The end of a piece of a split query that is not the
				// last, or of SyncHere's Sync, or held for the session
				// goroutine (finishHeld): everything before it must
				// reach the client first. (quietReady first: a held
				// unit's quiet Sync must not leave it set for the next.)
				if err := ss.flushClient(); err != nil {
					ss.terminate(nil)
					return
				}
			} else {
				ss.sendClient(m)
			}
			if ss.srv.hooks != nil {
				// Queue the hooks' event before waking waiters: a session
				// goroutine woken by the count (Exec, finishHeld) must see
				// this ReadyForQuery delivered first.
				ss.evMu.Lock()
				ss.events = append(ss.events, m.TxStatus)
				ss.nev.Store(int32(len(ss.events)))
				ss.evMu.Unlock()
			}
			if ss.outstanding.Load() <= 1 {
				// Everything relayed so far goes out before a session
				// goroutine that sees the count reach 0 (woken, or
				// looking) writes to the client itself (writeClient
				// bypasses cbuf). Nothing more is buffered from
				// PostgreSQL then, so the next read would have flushed
				// it anyway: no extra write.
				if err := ss.flushClient(); err != nil {
					ss.terminate(nil)
					return
				}
			}
			n := ss.outstanding.Add(-1)
			if n < 0 {
				ss.outstanding.Add(-n)
				n = 0
			}
			if f := afterAnswer.Load(); f != nil && n == 0 {
				(*f)(ss)
			}
			if n == 0 && ss.lateCancels.Load() > 0 && ss.cancelsDelivered() {
				// Every cancel was delivered before the statements it
				// could hit were sent, and all of them have answered: a
				// cancel that missed was ignored by PostgreSQL.
				ss.lateCancels.Store(0)
			}
			if n == 0 {
				if ss.waiters.Load() > 0 {
					ss.mu.Lock()
					if ss.waitCh != nil {
						close(ss.waitCh)
						ss.waitCh = nil
					}
					ss.mu.Unlock()
				}
			}
			if ss.srv.hooks != nil {
				ss.deliverEvents()
			}
			if n == 0 && ss.srv.idleTimeouts {
				ss.armIdle(m.TxStatus)
			}
			if n == 0 && m.TxStatus == 'I' && ss.draining.Load() && !quiet {
				_ = ss.flushClient()
				ss.terminate(fatal(codeAdminShutdown, "terminating connection due to administrator command (ordo shutting down)"))
				return
			}
			continue
		case *pgproto3.CopyInResponse:
			ss.noteRows()
			ss.copyIns.Add(1)
			ss.wakeWaiters()
			if ss.hold.Load() {
				ss.sendClient(m)
				if err := ss.flushClient(); err != nil {
					ss.terminate(nil)
					return
				}
				continue
			}
		case *pgproto3.ErrorResponse:
			if p := ss.positions.Load(); p != nil && m.Position > 0 {
				m.Position = p.client(m.Position)
			}
			ss.sawError.Store(true)
			ss.unitFailed.Store(true)
			ss.failedSinceUnit.Store(true)
			if ss.abortCanceled(m) {
				if e := ss.abortErr.Swap(nil); e != nil {
					ss.sendError(e)
				} else {
					ss.sendError(ss.lateErr.Load())
				}
				continue
			}
			if e := ss.abortErr.Swap(nil); e != nil {
				ss.sendError(e)
				continue
			}
			if m.Code == codeQueryCanceled {
				ss.srv.log.Info("a canceled statement is reported to the client", "session", ss.id, "pid", ss.backendPID, "message", m.Message)
			}
			if m.Code == "34000" && ss.nrejects.Load() > 0 {
				if e, warn := ss.takeRejection(m); e != nil {
					if e != silentRejection {
						ss.releaseRows()
						if warn != nil {
							ss.sendClient(warn)
						}
						ss.sendClient(e)
					}
					continue
				}
			}
			if m.Severity == "FATAL" || m.Severity == "PANIC" {
				ss.backendFatal = true
			} else if x := ss.explain.Load(); x != nil && m.Code == x.code && m.Message == x.raised && ss.explain.CompareAndSwap(x, nil) {
				m.Detail = strings.TrimSpace(m.Message + ". " + m.Detail)
				m.Message, m.Hint = x.message, x.hint
			}
			ss.sendError(m)
			continue
		}
		ss.sendClient(msg)
		if len(ss.cbuf) >= flushThreshold {
			if err := ss.flushClient(); err != nil {
				ss.terminate(nil)
				return
			}
		}
	}
}

// backendFailed ends the session after the PostgreSQL connection failed.
func (ss *session) backendFailed(err error) {
	if ss.isClosed() || ss.clientLeft.Load() {
		return
	}
	if errors.Is(err, errClientWrite) {
		ss.terminate(nil) // the client is gone; nobody to tell
		return
	}
	_ = ss.flushClient()
	if ss.backendFatal {
		ss.terminate(nil) // PostgreSQL's own FATAL was relayed
		return
	}
	ss.srv.m.errors.WithLabelValues("backend").Inc()
	ss.srv.log.Warn("lost PostgreSQL connection", "session", ss.id, "err", err)
	ss.terminate(fatal(codeConnectionFailure, "ordo: lost the connection to the local PostgreSQL server"))
}

// cancelBackend sends a CancelRequest for this session's backend.
func (ss *session) cancelBackend() error {
	b, err := (&pgproto3.CancelRequest{ProcessID: ss.backendPID, SecretKey: ss.backendSecret}).Encode(nil)
	if err != nil || len(ss.backendSecret) == 0 {
		return fmt.Errorf("no cancel key of PostgreSQL's for this session (%d bytes): %v", len(ss.backendSecret), err)
	}
	d := net.Dialer{Timeout: ss.srv.cfg.DialTimeout}
	c, err := d.Dial(ss.srv.cfg.BackendNetwork, ss.srv.cfg.BackendAddr)
	if err != nil {
		return fmt.Errorf("dial PostgreSQL: %w", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(ss.srv.cfg.DialTimeout))
	if _, err := c.Write(b); err != nil {
		return fmt.Errorf("send cancel: %w", err)
	}
	// PostgreSQL closes the connection after reading the request; wait for
	// that so the cancel is delivered before we return.
	_, _ = c.Read(make([]byte, 1))
	return nil
}
