package session

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/ordo-db/ordo/internal/analysis"
	"github.com/ordo-db/ordo/internal/capture"
	"github.com/ordo-db/ordo/internal/catalog"
	"github.com/ordo-db/ordo/internal/termination"
	"github.com/ordo-db/ordo/internal/txn"
	"github.com/ordo-db/ordo/internal/wire"
	"github.com/ordo-db/ordo/pkg/config"
)

// session follows one client session. Its methods run on the session's wire
// goroutine, one at a time.
type session struct {
	h  *Hooks
	be wire.Backend
	// retryCanceled is closed by the client's CancelRequest since the
	// retries of the current autocommit statement began (retry.go).
	retryCanceled <-chan struct{}
	// canceled is closed by the client's CancelRequest since the unit of
	// the message being reported began (Statement takes it at the
	// unit's first message; the autocommit retries, at their start):
	// what the unit waits for inside Ordo ends there (untilCanceled).
	canceled <-chan struct{}
	info     wire.SessionInfo
	pid      uint32
	// serverVersion: PostgreSQL's server_version_num (150018, 180001…).
	serverVersion int

	// rc: the protocol is dbsm-rc; transactions run at the isolation
	// level the client asks.
	rc bool
	// serialOnDemand: the protocol is dbsm-si or dbsm-rc, which certify
	// the reads of a transaction only if it ran at SERIALIZABLE.
	serialOnDemand bool

	user       string
	searchPath string
	env        analysis.Env
	envStale   bool // a SET may have changed search_path
	// envGuessed: env was taken from a SET of search_path in this unit,
	// not read back (PostgreSQL may have skipped the SET after an error
	// earlier in the unit, and then the rest of the unit with it): it is
	// read back at the next unit.
	envGuessed bool
	// queryFrees: the names the DEALLOCATEs of the client's Query being
	// reported free, in order (Backend.QueryFrees).
	queryFrees []string
	// roleStale: a SET ROLE or SESSION AUTHORIZATION may have changed the
	// user "$user" in the search path names (user). namesPending,
	// rolePending: such a statement, or one on search_path, ran since the
	// session last stood outside any transaction; it may be undone (SET
	// LOCAL, a rollback), so they are read again once outside one.
	roleStale, namesPending, rolePending bool

	// stmts holds the analysis of prepared statements by name ("" is the
	// unnamed statement).
	stmts map[string][]*analysis.Statement
	// sent holds the text PostgreSQL runs each prepared statement as
	// (its Parse, or what Ordo rewrote it to).
	sent map[string]string
	// declared holds the parameter types the Parses of the current unit
	// declared, by name, with the text each sent (unknown: closed in the
	// unit). A Bind of a name parsed earlier in its unit runs only if
	// that Parse succeeded; for any other name the wire layer tells what
	// PostgreSQL holds (Backend.Declared), which the client's last Parse
	// of it may not be (refused, or skipped after an error).
	declared map[string]declaredTypes
	// fromSQL holds the statements SQL's PREPARE created (name to the
	// PREPARE's text), as readNamed last read them; namedEver: the client
	// parsed a named statement.
	fromSQL   map[string]string
	namedEver bool
	// funcs names the functions called through the fast-path interface,
	// by OID (functioncall.go).
	funcs map[uint32]function

	// The current transaction.
	tx txState
	// unit is the wire's Statement.Unit of the last Statement, and
	// unitNames the named statements parsed or closed in it (for the
	// others, what PostgreSQL holds is known: Backend.Named).
	unit      uint64
	unitNames map[string]bool
	// unitSQLNames: a statement of the unit may run SQL's PREPARE,
	// DEALLOCATE or DISCARD, whose effect on the names the wire layer
	// learns only when PostgreSQL answers it, after the unit is sent;
	// unitSQLPrepared: the names SQL's PREPAREs of the unit prepare.
	unitSQLNames    bool
	unitSQLPrepared map[string]bool
	// unitFreedAll, unitFreed: a DEALLOCATE ALL or DISCARD ALL, or a
	// DEALLOCATE of these names, bound earlier in the unit (noteFreed).
	unitFreedAll bool
	unitFreed    map[string]bool
	// aborted is set by Hooks.Abort (another goroutine): the transaction
	// was aborted for a replication conflict.
	aborted atomic.Bool
	// abortCh is the channel the waits inside Ordo of the session's
	// transaction end on (abortWait); Hooks.Abort closes it and takes it
	// away (wakeAborted). abortMu orders a wake after the reset of
	// aborted (resetAborted): a late wake never closes the channel of the
	// transaction after the one it aborted.
	abortMu sync.Mutex
	abortCh atomic.Pointer[chan struct{}]
	// inTxn: a transaction block is open or being opened (read by
	// Hooks.Abort on another goroutine).
	inTxn atomic.Bool
	// rejectNext: the next statement (Bind or Query) other than ROLLBACK
	// fails with the brute-force error (set when an aborted transaction
	// was ended early to let a Parse through).
	rejectNext bool
	// heldUnnamed is the NOTIFY, LISTEN or UNLISTEN held in place of the
	// unnamed prepared statement (see heldNoop).
	heldUnnamed string
	// unnamedSQL is the client's text of the unnamed statement, and
	// unnamedTypes the parameter types its Parse declared; if its Parse
	// was rewritten (rewriteIsolation), unnamedRewritten is the text
	// PostgreSQL received ("" if not), which sent[""] then holds unless
	// the client's was parsed again since (ParseHere).
	unnamedSQL, unnamedRewritten string
	unnamedTypes                 []uint32
	// aheadParse: the client's text of the unnamed statement, to be
	// parsed again just before the Bind being reported (sendAhead).
	aheadParse string
	// syncRead makes every transaction wait for the cluster's latest
	// commits before its snapshot (ordo.read_consistency = 'sync').
	syncRead bool
	// consistencyStale: a statement changed ordo.read_consistency or
	// default_transaction_isolation in a way only PostgreSQL knows the
	// outcome of (in a block that may roll back, a RESET to the role's
	// value): read them again at the next unit outside a block
	// (readConsistency).
	consistencyStale bool
	// defaultSerializable: the session's default_transaction_isolation
	// is serializable, as last read (readConsistency). Under dbsm-rc a
	// block that asks for no level runs at it, and its reads are
	// collected from its start (defaultLevel).
	defaultSerializable bool
	// defaultIsolation: that default_transaction_isolation, as last read.
	defaultIsolation string
	// unitStatus is the transaction status PostgreSQL will be in when it
	// reaches the message being reported, where it differs from the last
	// ReadyForQuery's: a ROLLBACK, COMMIT or BEGIN earlier in the batch
	// (0: as the last ReadyForQuery said).
	unitStatus byte
	// The blocks Ordo opened in the current unit, for BeforeReady to
	// tell a failed block of Ordo's (rolled back, as PostgreSQL rolls
	// back a failed implicit transaction) from the client's, even where
	// s.tx went by a statement PostgreSQL skipped after an error (a
	// ROLLBACK): wrapExec, one opened by Exec at the unit's start (it
	// surely ran); wrapInjected, one or more by beginHere (they ran if
	// Backend.InjectedBegins passed wrapInjectedAt); wrapBegins,
	// Backend.Begins when the first was opened.
	wrapExec, wrapInjected bool
	wrapInjectedAt         int64
	wrapBegins             int64
	// boundEnd: a COMMIT bound in this unit ended the implicit
	// transaction of Ordo's block at its Bind (txnControl), as if it
	// ran; if it was never executed, Ordo's block is still open at the
	// unit's end (BeforeReady), where PostgreSQL's Sync commits the
	// implicit transaction.
	boundEnd boundEnd
	// early: the status Executed left (unitStatus) following transaction
	// control bound into a portal (a ROLLBACK, a ROLLBACK TO in a failed
	// block), in case that was before the unit's first Statement (an
	// Execute of a portal bound in an earlier unit, first in its unit):
	// that Statement must not take PostgreSQL's status from before it
	// for the unit's.
	early byte
	// unitSnap is the applied prefix when the current batch began, and
	// unitReads the read keys of its autocommit statements so far (dbsm):
	// the snapshot_seqno and reads of its implicit transaction, should a
	// later statement of the batch update (beginHere).
	unitSnap uint64
	// unitSnapLater: the batch's implicit transaction ended at a COMMIT
	// (or ROLLBACK) in it, and unitSnap is to be read again at its next
	// statement, after that statement's wait for the commits told before
	// they were visible (awaitTold): read at the COMMIT, it could miss
	// the COMMIT's own transaction, which the next snapshot holds (a
	// self-conflict: the session fuzzer, seed 1796171387262507541).
	unitSnapLater bool
	unitReads     txn.ReadSet
	unitGran      granuleEpoch
	// unitTemp: a statement that creates a temporary table ran in the
	// batch's implicit transaction (txState.tempNamed, should it become
	// a block).
	unitTemp bool
	// unitFresh: no statement has run yet in the batch's current implicit
	// transaction (none since the batch began, or since a COMMIT or
	// ROLLBACK in it ended the previous one), so none took its snapshot.
	unitFresh bool
	// unitParsed: the batch's current implicit transaction parsed a
	// statement PostgreSQL may take a snapshot for (a Parse of anything
	// but transaction control or a setting), which fixes its isolation
	// level as a statement run would.
	unitParsed bool
	// unitBound: a statement of the batch was bound (it ran, or
	// PostgreSQL skipped it after an error): PostgreSQL 18 takes the
	// batch's implicit transaction for a block from then on.
	unitBound bool
	// unitCons: the cluster ran cons when the batch began.
	unitCons bool
	// label is the client's name for its current or next update
	// transaction (SET ordo.txn_label), recorded with its outcome.
	label      string
	labelLocal bool // set with SET LOCAL: forgotten when the transaction ends
	// labelPinned: the label is the retried statement's (retry.go), not
	// the one PostgreSQL has now (prepare reads it otherwise).
	labelPinned bool
	// labelResetPending: a used label (labelUsed) is to be reset in
	// PostgreSQL once the session is outside a transaction (labelFailed).
	labelResetPending bool
	labelUsed         string
	// labelUnseen: a statement may have set ordo.txn_label where Ordo
	// does not look (set_config): PostgreSQL has the last word, read by
	// the write probe, or by labelFailed when no probe ran.
	labelUnseen bool
	// probeApart: the session's transactions are probed in a round trip
	// of their own, not in their PREPARE's (prepareAtOnce): one was
	// refused by _ordo.prepare_check, or the session has a temporary
	// schema or changed large objects, which make it likely again.
	probeApart bool
	// tempSchema: a probe saw the session's temporary schema, which stays
	// the session's: its transactions get the full probe at once
	// (probeAlone).
	tempSchema bool
	// ahead is the BEGIN of a wrapped extended-protocol statement at the
	// start of its unit, not sent yet (wrapAhead): it goes ahead of the
	// client's message when Statement returns, or in a round trip of its
	// own if the hook runs a statement of Ordo's before that.
	ahead string
	// aheadSet is the SET TRANSACTION that gives the client's block the
	// level Ordo runs it at (fixIsolation), not sent yet: as ahead, it
	// goes ahead of the client's Parse or Bind when Statement returns, or
	// in a round trip of its own before a statement of Ordo's. setAheadOK
	// says whether it may go ahead of the message Statement is reporting:
	// a Bind, or the Parse of the unnamed statement.
	aheadSet   string
	setAheadOK bool
}

type txState struct {
	active bool // inside a transaction (explicit or wrapped)
	// atDefault: a block Ordo made of the batch's implicit transaction
	// (beginHere), which runs at the session's level, as PostgreSQL
	// began it: Ordo set none.
	atDefault bool
	// tempNamed: a statement that creates a temporary table ran in it
	// (analysis.Statement.TempNamespace).
	tempNamed bool
	wrapped   bool // we sent BEGIN for an autocommit statement
	// retry: the wrapped autocommit statement may be run again if a
	// conflict aborts it (retry.go).
	retry    *retryStmt
	snapshot bool // snapshot_seqno recorded
	// pgSnap: PostgreSQL surely took the block's snapshot (a read, a
	// write, a COPY or DDL of it went out; not a LOCK, which takes none):
	// its later statements need not wait in awaitTold.
	pgSnap  bool
	snapSeq uint64 // snapshot_seqno
	// batchSnap: the snapshot was taken by a statement earlier in the
	// batch, before the transaction was known to need a block.
	batchSnap bool
	reads     txn.ReadSet
	// locks are the keys of the rows SELECT … FOR UPDATE/SHARE locked
	// (or their tables): certified and recorded as writes (trackLocks);
	// lockSnap is the applied prefix before the first of those statements
	// ran (dbsm-rc certifies a transaction that locked rows from there).
	locks    []txn.Key
	lockSnap uint64
	// gran is the granule epoch of the analyses its keys came from.
	gran granuleEpoch
	// savepoints are its savepoints, innermost last (savepointOp).
	savepoints []savepoint
	ddl        []ddlStmt // DDL sent, joined with what ran at termination (ddl.go)
	// blocks counts, by the md5 of the query text, the runs of messages
	// holding statements that may run DDL inside them (DO, CALL,
	// functions): a DDL record no statement accounts for is replayed as
	// its top-level query only if that ran once, without parameters.
	blocks map[string]blockRuns
	// seqBefore: the sequences' positions before the first setval.
	seqBefore seqState
	// los: the state it left the large objects it changed in, read
	// before its PREPARE (largeobjects.go).
	los []capture.LargeObject
	// notify holds LISTEN, UNLISTEN and NOTIFY statements sent inside the
	// transaction: PostgreSQL refuses to PREPARE a transaction that ran
	// them, so they run in the transaction's final local commit instead
	// (PostgreSQL acts on them at commit anyway).
	notify []string
	// fixIsolation: a BEGIN asked for another isolation level; the session
	// resets it to REPEATABLE READ before the first statement. isolation
	// is the level it asked for ("" for the session's default): what SHOW
	// transaction_isolation reports (reportedIsolation).
	fixIsolation bool
	isolation    string
	done         bool // terminated; the client's COMMIT ends an empty txn
	// readsFromStart: its reads were collected from its first snapshot on
	// (tracksReads); serializable: it ran at PostgreSQL's SERIALIZABLE
	// (the probe says), under dbsm-si or dbsm-rc, and its reads are
	// certified: all of them (ReadAll) if they were not collected from
	// the start.
	readsFromStart, serializable bool

	// begins is Backend.Begins when Ordo opened a wrapped block: more at
	// its end means the client's own BEGIN ran in it, making it theirs;
	// clientBegan: one was bound in it.
	begins      int64
	clientBegan bool
	// bindUnit, bindPortal: the block was taken as begun at the Bind of
	// a BEGIN into bindPortal, in unit bindUnit (beginNotRun).
	bindUnit   uint64
	bindPortal string
	// injected: Ordo's block was opened by beginHere, and the client's
	// BEGINs after it are counted by Backend.BeginsSinceInjected.
	injected bool
	// bound is the log of the transaction control the client bound
	// into portals (ROLLBACK, SAVEPOINT, RELEASE, ROLLBACK TO), each
	// followed when its portal's Execute is sent (Executed), as
	// PostgreSQL runs it, not at its Bind; and of what ended such a
	// portal's wait (another Bind of it, its Execute). A log, as ddl is:
	// a Bind PostgreSQL skipped or failed may be followed by a ROLLBACK
	// TO a savepoint set before it, which drops the entries since
	// (savepoint.bound). A block Ordo opens in the transaction
	// (beginHere, wrap), or a BEGIN of the client's there, keeps it:
	// PostgreSQL's portals live until the transaction ends.
	bound []boundCtl
	// cons: its conflict classes (cons.go).
	cons consTx
}

// abortWait returns a channel Hooks.Abort closes when it aborts the
// session's transaction, closed already if it did. Without an abort it
// takes two atomic loads: every statement that may take a snapshot asks.
func (s *session) abortWait() <-chan struct{} {
	if !s.aborted.Load() {
		if p := s.abortCh.Load(); p != nil {
			return *p
		}
	}
	s.abortMu.Lock()
	defer s.abortMu.Unlock()
	if s.aborted.Load() && s.inTxn.Load() {
		return closedChan // aborted before the wait began
	}
	p := s.abortCh.Load()
	if p == nil {
		ch := make(chan struct{})
		p = &ch
		s.abortCh.Store(p)
	}
	return *p
}

// closedChan is a closed channel.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// wakeAborted ends the wait inside Ordo (abortWait) of the transaction
// Hooks.Abort aborted (it set aborted first; a transaction that ended
// since reset it, and the wait of the next one goes on).
func (s *session) wakeAborted() {
	s.abortMu.Lock()
	defer s.abortMu.Unlock()
	if !s.aborted.Load() {
		return
	}
	if p := s.abortCh.Swap(nil); p != nil {
		close(*p)
	}
}

// resetAborted forgets a brute-force abort: the transaction it was for
// is over.
func (s *session) resetAborted() {
	if !s.aborted.Load() {
		return // (ReadyForQuery's path: no lock)
	}
	s.abortMu.Lock()
	s.aborted.Store(false)
	s.abortMu.Unlock()
}

// awaitTold waits, before a statement that may take a snapshot, until the
// commits this node told before they were visible are (ToldAwaiter).
func (s *session) awaitTold(ctx context.Context) error {
	if s.h.told == nil {
		return nil
	}
	if err := s.h.told.AwaitTold(ctx, s.canceled, s.abortWait()); err != nil {
		if errors.Is(err, termination.ErrBruteForced) {
			return errBruteForce
		}
		if errors.Is(err, termination.ErrClientCanceled) {
			return pgErr(codeQueryCanceled, "ordo: %v (it waited for this node's latest commits to become visible)", err)
		}
		if errors.Is(err, termination.ErrReplaying) {
			return pgErr(codeCannotConnectNow, "ordo: %v; retry once it has, or connect to another node", err)
		}
		if errors.Is(err, termination.ErrStopped) {
			// A commit it told may not be visible here: nothing is read
			// without it.
			return pgErr(codeCannotConnectNow, "ordo: %v; connect to another node", err)
		}
		return pgErr(codeQueryCanceled, "ordo: canceled while waiting for this node's latest commits to become visible: %v", err)
	}
	return nil
}

// untilCanceled returns ctx, ended also by the client's CancelRequest
// since the unit began (s.canceled; its cause termination.ErrClientCanceled),
// for a wait inside Ordo: the wire layer forwards the cancel to
// PostgreSQL, which is running nothing of the session's to cancel. stop
// releases it.
func (s *session) untilCanceled(ctx context.Context) (wctx context.Context, stop func()) {
	wctx, cancel := context.WithCancelCause(ctx)
	canceled := s.canceled
	go func() {
		select {
		case <-canceled:
			cancel(termination.ErrClientCanceled)
		case <-wctx.Done():
		}
	}()
	return wctx, func() { cancel(nil) }
}

// wasCanceled reports whether the client sent a CancelRequest since the
// unit began (s.canceled).
func (s *session) wasCanceled() bool {
	select {
	case <-s.canceled:
		return true
	default:
		return false
	}
}

// stmtsOf is what the reported message runs or prepares: a Query's or
// Parse's statements, a Bind's prepared ones (nil for a function call).
func (s *session) stmtsOf(st *wire.Statement) []*analysis.Statement {
	switch st.Kind {
	case wire.KindQuery, wire.KindParse:
		return s.analyze(st.SQL)
	case wire.KindFunctionCall:
		return nil
	}
	return s.stmts[st.Name]
}

// refusedBeforeRun is what becomes of a statement whose wait inside Ordo,
// before PostgreSQL runs it, failed with err (the commits its node told
// were not shown in time, a sync read could not catch up, its client
// canceled the wait). What reads nothing needs nothing the wait was for,
// and goes ahead (nil): a ROLLBACK, a COMMIT of a block that took no
// snapshot (it wrote nothing) or of a failed one (PostgreSQL rolls it
// back) or outside a block, the Parse of a COMMIT (it runs nothing; its
// Bind waits). So a client is never kept in a block it cannot end.
// Anything else fails with err: a COMMIT of a block that did something
// (under dbsm-rc, where every statement waits) fails its block, which
// its ROLLBACK then ends.
func (s *session) refusedBeforeRun(st *wire.Statement, err error) error {
	switch txnOp(s.stmtsOf(st)) {
	case analysis.TxnRollback:
		return nil
	case analysis.TxnCommit:
		if st.Kind == wire.KindParse || !s.tx.pgSnap || s.txStatus() != 'T' || errors.Is(err, errBruteForce) {
			// (A brute-forced block's COMMIT rolls it back and records
			// its label: the commit path does that.)
			return nil
		}
	}
	return err
}

// beginOnly reports whether st surely runs nothing but a BEGIN (or START
// TRANSACTION), which PostgreSQL runs without a snapshot (a
// TransactionStmt: PlannedStmtRequiresSnapshot; bound without parameter
// values: exec_bind_message), in or out of a block. It
// need not wait for the commits this node told before they were visible
// (awaitTold): the block's first statement that takes a snapshot waits
// for them, after the client's round trip for the BEGIN, so more of the
// last commit's COMMIT PREPARED is behind it (docs/performance.md, "The
// commit's last flush"). Only where what st runs is certain: a text that
// begins with the keyword, or a statement name whose text the session and
// PostgreSQL agree on; anything else waits as before.
func (s *session) beginOnly(st *wire.Statement) bool {
	switch st.Kind {
	case wire.KindQuery, wire.KindParse:
		return beginsWithBegin(st.SQL) && onlyBegin(s.analyze(st.SQL))
	case wire.KindBind:
		if len(st.Params) > 0 || !onlyBegin(s.stmts[st.Name]) {
			// (A Bind with parameter values takes a snapshot, whatever
			// it binds: exec_bind_message. A BEGIN parsed with declared
			// parameter types is bound with values, and its block runs
			// in that snapshot.)
			return false
		}
		if st.Name == "" {
			// (Exact at the unit's first message; within the unit, as
			// its Parse left it, or PostgreSQL skips the Bind.)
			return s.heldUnnamed == ""
		}
		if s.unitSQLNames || s.unitFreedAll || s.unitFreed[st.Name] {
			return false
		}
		if s.unitNames[st.Name] {
			return true // parsed in this unit: that Parse, or the Bind is skipped
		}
		sql, exists, known := s.be.Named(st.Name)
		return known && exists && sql == s.sent[st.Name]
	}
	return false
}

// beginsWithBegin reports whether sql's first word is BEGIN or START (any
// case): a cheap test before the analysis, which every other text skips.
func beginsWithBegin(sql string) bool {
	sql = strings.TrimLeft(sql, " \t\r\n\f")
	for _, kw := range [...]string{"begin", "start"} {
		if len(sql) >= len(kw) && strings.EqualFold(sql[:len(kw)], kw) {
			return true
		}
	}
	return false
}

// heldNoop runs in place of a NOTIFY, LISTEN or UNLISTEN parsed as the
// unnamed statement inside a transaction; the statement itself runs in the
// transaction's final local commit.
const heldNoop = "DO $ordo$ BEGIN END $ordo$"

// Statement implements wire.SessionHooks.
func (s *session) Statement(ctx context.Context, st *wire.Statement) (err error) {
	defer func() {
		s.setAheadOK = false // (beforeSnapshot outside Statement: no message to go ahead of)
		s.sendAhead(err)
		if st.Kind == wire.KindQuery && err == nil && len(s.queryFrees) > 0 {
			// Last, just before the Query goes (any message of Ordo's
			// sent after it would cancel it).
			s.be.QueryFrees(sentText(st), s.queryFrees)
		}
		s.queryFrees = nil
	}()
	s.setAheadOK = st.Kind == wire.KindBind || st.Kind == wire.KindParse && st.Name == ""
	if st.Kind == wire.KindBind && len(s.tx.ddl) > 0 {
		s.rebound(st.Portal)
	}
	if (st.Kind == wire.KindBind || st.Kind == wire.KindQuery) && len(s.tx.bound) > 0 {
		s.unbind(st.Portal) // (an Execute runs what is bound now)
	}
	first := st.AtBoundary
	if first && s.be.TxStatus() == 'I' && s.aborted.Load() {
		// An abort that came while the session stood idle, outside any
		// transaction (a blocked DDL's, after the statement it was for
		// ended): nothing of it is left to abort, and the transaction
		// this unit begins must not inherit it.
		s.resetAborted()
	}
	if first || s.canceled == nil {
		s.canceled = s.be.CancelRequested()
	}
	// newUnit: the first Statement of a unit, AtBoundary or not (a unit
	// may begin with a message the hooks do not see, such as pgjdbc's
	// Close of a dead portal before a BEGIN sent as a Query).
	newUnit := st.Unit != s.unit
	if newUnit {
		s.unit = st.Unit
		if s.namesPending && s.be.TxStatus() == 'I' {
			// What the statements that moved the names left, now that
			// no transaction can undo it any more.
			s.settleNames()
		}
		if s.envGuessed {
			s.envStale, s.envGuessed = true, false
		}
		clear(s.unitNames)
		clear(s.declared)
		s.unitSQLNames, s.unitFreedAll = false, false
		clear(s.unitFreed)
		clear(s.unitSQLPrepared)
		if !(st.Kind == wire.KindParse && st.Name == "") {
			// What PostgreSQL holds as the unnamed statement, which is
			// not the last Parse this session saw if that one failed or
			// was skipped, or if a Query destroyed it: later messages
			// of the unit may bind it. Exact at the first message of a
			// unit the hooks see: the messages before it (Describe,
			// Execute, Close of a portal) do not change it. (One the
			// session cannot tell is bound as a statement it did not
			// see: the worst is assumed.)
			if sql, ok := s.be.Unnamed(); !ok {
				delete(s.stmts, "")
				delete(s.sent, "")
				s.unnamedSQL, s.unnamedRewritten = "", ""
			} else if sql != s.sent[""] {
				s.heldUnnamedText(sql)
			}
		}
	}
	if first && (s.namedEver || st.Kind == wire.KindBind && st.Name != "") && !s.be.NamedKnown() && s.namedReadable() {
		// SQL's PREPARE left the wire layer unsure of what PostgreSQL
		// holds under the client's names: read them now, while nothing
		// of the unit is sent, for any Bind of the unit. Not for a
		// client that never named a statement (it pays nothing), and not
		// in a failed block, nor in a block whose snapshot is still to
		// come (the read would take it before the block's first
		// statement). A Bind of a name not read is taken for a statement
		// that may do anything.
		s.readNamed(ctx)
	}
	if r := s.tx.retry; r != nil && r.extended {
		// The unit of an extended-protocol statement that may be run
		// again: its one Bind, and nothing else.
		if st.Kind == wire.KindBind && r.params == nil && st.Name == r.name && st.Unit == r.unit {
			r.bound(st)
		} else {
			s.tx.retry = nil
		}
	}
	noSnap := false
	if !s.tx.pgSnap || s.rc {
		// It may take a snapshot: after the commits this node told
		// before they were visible (termination.ToldAwaiter). A BEGIN
		// takes none, and the block's first statement that does waits.
		if noSnap = s.beginOnly(st); !noSnap {
			if err := s.awaitTold(ctx); err != nil {
				if err = s.refusedBeforeRun(st, err); err != nil {
					return err
				}
			}
		}
	}
	if first || newUnit || s.unitSnapLater {
		if noSnap {
			s.unitSnapLater = true // read after the next statement's wait
		} else {
			s.unitSnap, s.unitSnapLater = s.h.cfg.Replica.AppliedPrefix(), false
		}
	}
	if first || newUnit {
		// (Nothing of a unit ran before the first Statement the hooks
		// see: its messages before it, a Close, a Describe, an Execute
		// of a portal that died with the last transaction, run nothing.
		// Left as the last unit had them, a BEGIN after them was taken
		// for one after a statement of the batch, and its block ran at
		// PostgreSQL's default level: review of 5458fb1.)
		s.unitStatus = 0
		if s.unitReads.Len() > 0 || s.unitReads.All() {
			s.unitReads = txn.ReadSet{}
		}
		s.unitGran, s.unitTemp = granuleEpoch{}, false
		s.unitFresh, s.unitParsed, s.unitBound = true, false, false
		s.unitCons = s.h.cfg.Replica.Name() == termination.CONS
		switch s.early {
		case 'I':
			s.newImplicit()
		case 'T':
			s.unitStatus = 'T'
		}
	}
	s.early = 0
	if first && s.consistencyStale && s.txStatus() == 'I' {
		s.readConsistency(ctx)
	}
	if first && s.labelResetPending && s.txStatus() == 'I' {
		s.takeLabel(ctx)
	}
	if first && s.syncRead && !s.tx.snapshot && st.Kind != wire.KindCloseStatement {
		// Read-your-writes anywhere: before anything that may look at data
		// (PostgreSQL resolves names at Parse), catch up with the cluster.
		if err := s.sync(ctx); err != nil {
			if err = s.refusedBeforeRun(st, err); err != nil {
				return err
			}
		}
	}
	if s.rejectNext && (st.Kind == wire.KindQuery || st.Kind == wire.KindBind || st.Kind == wire.KindFunctionCall) {
		// The transaction was aborted by brute force and rolled back to
		// let a Parse through (see below): its client must learn it at
		// its next statement, unless that is its ROLLBACK.
		s.rejectNext = false
		switch txnOp(s.stmtsOf(st)) {
		case analysis.TxnRollback: // answered by PostgreSQL
		case analysis.TxnCommit:
			s.labelFailed(ctx, errBruteForce) // the commit asked for
			return errBruteForce
		default:
			return errBruteForce
		}
	}
	if first && st.Kind == wire.KindParse && s.aborted.Load() && s.txStatus() == 'E' {
		// Aborted by brute force while idle: the transaction is failed,
		// and PostgreSQL would refuse to parse anything in it (drivers
		// such as pgbench prepare lazily, mid-transaction). End it so the
		// Parse succeeds; the next statement fails instead.
		s.rollback(ctx)
		s.endTx()
		s.rejectNext = true
	}
	switch st.Kind {
	case wire.KindQuery:
		stmts := s.underSetPaths(s.analyze(st.SQL))
		s.noteSQLNames(stmts)
		for _, a := range stmts {
			if a.Deallocates != "" {
				s.queryFrees = append(s.queryFrees, a.Deallocates)
			}
		}
		if st.Pieces == 0 {
			if pieces, offsets := splitPieces(st.SQL, stmts); pieces != nil {
				if err := s.splittable(st, stmts); err != nil {
					return err
				}
				return &wire.Split{Pieces: pieces, Offsets: offsets}
			}
		} else if !s.midBatchOutsideBlock(st) {
			if err := s.piece(ctx, stmts); err != nil {
				return err
			}
		}
		// (Otherwise the first piece of a string sent inside an
		// extended-protocol batch, outside a block: it runs in the
		// batch's implicit transaction, where Ordo cannot open a block
		// of its own for the string's pieces, so as a Query of its own
		// would there: a read runs, an update is refused. PostgreSQL's
		// batch, with the piece's implicit transaction, ends at its
		// ReadyForQuery, as at the whole string's: what the string runs
		// after it begins at a boundary.)
		if err := s.rewrite(st, stmts); err != nil {
			return err
		}
		s.rewriteIsolation(st, stmts)
		if !st.AtBoundary && onlyBegin(stmts) && !s.tx.active && s.txStatus() == 'I' && (!s.unitFresh || s.unitParsed) {
			// A BEGIN sent as a Query inside an extended-protocol batch,
			// after a statement of the batch ran: as bound there (the
			// Query's ReadyForQuery then ends the batch, not the block).
			// Taken for one at a boundary, its level was set at the
			// next statement, where PostgreSQL refused it (25001).
			s.beginInBatch(stmts[0])
			return nil
		}
		return s.execute(ctx, stmts, nil, at{kind: wire.KindQuery, first: true, sent: sentText(st)})
	case wire.KindParse:
		s.noteName(st.Name)
		stmts := s.analyze(st.SQL)
		s.noteSQLNames(stmts)
		if err := s.rewrite(st, stmts); err != nil {
			return err
		}
		s.rewriteIsolation(st, stmts)
		for _, a := range stmts {
			if a.Kind != analysis.KindTxn && a.Kind != analysis.KindSession || showAnswered(a, st.Rewrite) || snapshotWhenRun(a) {
				s.unitParsed = true
			}
		}
		s.stmts[st.Name] = stmts
		s.sent[st.Name] = sentText(st)
		if st.Name == "" {
			s.unnamedSQL, s.unnamedRewritten = st.SQL, ""
			s.unnamedTypes = append(s.unnamedTypes[:0], st.ParamOIDs...)
			if sent := sentText(st); sent != st.SQL {
				s.unnamedRewritten = sent
			}
		}
		s.declare(st.Name, sentText(st), st.ParamOIDs)
		if st.Name == "" {
			s.heldUnnamed = ""
			if len(stmts) == 1 && stmts[0].Kind == analysis.KindNotify && (s.tx.active || s.txStatus() == 'T') {
				// PostgreSQL refuses to PREPARE a transaction that ran
				// NOTIFY, LISTEN or UNLISTEN: hold it, and let
				// PostgreSQL run a no-op in its place (the client sees
				// the tag DO).
				s.heldUnnamed = stmts[0].SQL
				st.Rewrite = heldNoop
				return nil
			}
		}
		// SET TRANSACTION acts when it is parsed as the first message of
		// a unit. BEGIN and COMMIT act when they are executed (bound):
		// a Parse runs nothing, and a COMMIT bound after other messages
		// of its batch gets a boundary of its own (SyncHere). Other
		// statements act at Bind.
		if first && isTxnControl(stmts) && !onlyBegin(stmts) && !hasTxn(stmts, analysis.TxnCommit) {
			return s.execute(ctx, stmts, nil, at{kind: wire.KindParse, first: true, sent: sentText(st)})
		}
		for _, a := range stmts {
			if a.Kind == analysis.KindRefused && !s.failedAnyway(stmts, first) {
				return s.refused(ctx, a, first)
			}
		}
		// An update statement parsed as the first message of a unit
		// outside a transaction block is wrapped now, at the boundary:
		// drivers send Parse/Bind/Execute/Sync in one unit (pgjdbc,
		// libpq's PQexecParams), so at Bind it would be too late. A unit
		// that only prepares the statement commits an empty transaction.
		// The BEGIN goes ahead of an unnamed statement's Parse, in its
		// round trip; ahead of a named one's, in a round trip of its own:
		// in the client's unit it would count toward the client's
		// statement_timeout, and a timeout just after the Parse (at its
		// Describe) would leave the named statement in PostgreSQL while
		// the client hears that its prepare failed, and fails its next
		// Parse of that name (42P05).
		if first && (updates(stmts) || notifyCalls(stmts)) && s.txStatus() == 'I' && !s.tx.active {
			if st.Name == "" {
				s.wrapAhead()
			} else if err := s.wrap(ctx); err != nil {
				return err
			}
			if s.tx.retry = s.retryable(stmts, nil, at{kind: wire.KindParse, first: true, sent: sentText(st), msg: st}); s.tx.retry != nil {
				s.be.HoldConflicts()
			}
			s.explainTermination(stmts)
		}
		if err := s.atParse(ctx, stmts, first, sentText(st)); err != nil {
			return err
		}
		if first && setsSequence(stmts) && s.txStatus() != 'E' {
			// Parse runs nothing: the positions now are those before the
			// statement executes, later in this unit.
			return s.noteSequences(ctx)
		}
		return nil
	case wire.KindBind:
		if st.Name == "" && s.heldUnnamed != "" {
			if !s.tx.active && s.txStatus() != 'T' {
				return pgErr(codeFeatureNotSupported,
					"ordo: a NOTIFY, LISTEN or UNLISTEN prepared inside a transaction cannot be executed outside it; send it again")
			}
			s.tx.notify = append(s.tx.notify, s.heldUnnamed)
			// The DO block PostgreSQL runs in its place takes the
			// block's snapshot, if none is taken yet (it was read at the
			// block's next statement, and a stale read committed under
			// dbsm).
			return s.utilitySnapshot(ctx, &analysis.Statement{Kind: analysis.KindLocal, SQL: heldNoop}, true, first)
		}
		stmts := s.stmts[st.Name]
		if st.Name != "" && !s.unitNames[st.Name] {
			// What PostgreSQL holds under the name, which is not what
			// the client last sent if that Parse was refused (the name
			// existed) or skipped, or a Close of it skipped.
			sql, exists, known := s.be.Named(st.Name)
			prepared, ok := s.fromSQL[st.Name]
			switch {
			case (s.unitFreedAll || s.unitFreed[st.Name]) && !s.unitSQLPrepared[st.Name] && s.txStatus() != 'E':
				// Freed earlier in the batch (or the batch failed
				// before that and PostgreSQL skips this Bind too):
				// PostgreSQL refuses it (26000). Taken for what the name
				// held, a COMMIT committed a batch that PostgreSQL then
				// rolled back (session fuzzer, seed 1796184680674965952).
				return nil
			case s.unitSQLNames && s.txStatus() != 'E' && (!known || !exists || s.unitSQLPrepared[st.Name]):
				// What a PREPARE, DEALLOCATE or DISCARD earlier in the
				// unit does to the name is still to come. A name
				// PostgreSQL held at the unit's start keeps its
				// statement unless a PREPARE of the unit names it (after
				// a DEALLOCATE or DISCARD of it): a PREPARE cannot
				// replace a name, and one freed is refused at Bind.
				stmts = []*analysis.Statement{opaque("a statement named after SQL's PREPARE, DEALLOCATE or DISCARD in the same batch")}
			case known && !exists:
				// Unless a DO block or a function prepared it (its
				// EXECUTE of a PREPARE): no tag told the wire layer.
				// Read what PostgreSQL holds where that is possible.
				if !first && s.unitCons && s.txStatus() == 'T' {
					// Under cons the stand-in below is refused (55000),
					// also where an earlier message of the batch failed
					// and PostgreSQL skips this Bind (the client saw
					// Ordo's refusal for PostgreSQL's error: session
					// fuzzer, seed 1796193344906985809). In a block a
					// Sync of Ordo's ends nothing, tells that, and
					// makes a boundary where the names can be read.
					failed, err := s.be.SyncHere(ctx)
					switch {
					case errors.Is(err, wire.ErrNotAtBoundary):
					case err != nil:
						return err
					case failed:
						return nil // PostgreSQL skips it
					default:
						first = true
					}
				}
				if !first || !s.namedReadable() {
					stmts = []*analysis.Statement{opaque("a statement name this session does not know of, bound where it cannot read the client's prepared statements")}
					break
				}
				if !s.readNamed(ctx) {
					stmts = []*analysis.Statement{opaque("a statement name this session does not know of, whose prepared statements it could not read")}
					break
				}
				if sql, exists, known = s.be.Named(st.Name); !exists && known {
					return nil // PostgreSQL reports that it does not exist
				}
				if prepared, ok := s.fromSQL[st.Name]; exists && ok && prepared == sql {
					stmts = []*analysis.Statement{opaque("a statement prepared with SQL PREPARE")}
				} else {
					stmts = []*analysis.Statement{opaque("a statement this session cannot tell")}
					if exists {
						stmts = s.analyze(sql)
						s.stmts[st.Name], s.sent[st.Name] = stmts, sql
					}
				}
			case exists && ok && prepared == sql:
				stmts = []*analysis.Statement{opaque("a statement prepared with SQL PREPARE")}
			case exists && sql != s.sent[st.Name]:
				stmts = s.analyze(sql)
				s.stmts[st.Name], s.sent[st.Name] = stmts, sql
			case !known && s.txStatus() != 'E':
				// SQL's PREPARE, DEALLOCATE or DISCARD ran since the
				// statements were last read, and reading them failed:
				// the client's last Parse of the name may have failed.
				stmts = []*analysis.Statement{opaque("a statement this session cannot tell after SQL's PREPARE, DEALLOCATE or DISCARD")}
				if last, ok := s.be.LastParsed(st.Name); ok {
					if prev := s.analyze(last); isTxnControl(prev) {
						// Run in a block of Ordo's, a COMMIT it may
						// still hold would commit that block here
						// alone (session fuzzer, seed
						// 1796187667502551099). Outside a block it ends
						// nothing either way (or PostgreSQL refuses the
						// Bind); inside one, whether it commits cannot
						// be told.
						if s.tx.active || s.txStatus() != 'I' {
							return pgErr(codeFeatureNotSupported,
								"ordo: the prepared statement %q held transaction control, and SQL's DEALLOCATE, DISCARD or PREPARE ran since in a way this session could not read back; bind it in a batch of its own", st.Name)
						}
						stmts = prev
					}
				}
			}
		}
		if st.Name == "" && first {
			// What PostgreSQL holds, which is not the last Parse this
			// session saw if that one failed or was skipped.
			sql, ok := s.be.Unnamed()
			if !ok {
				return nil // PostgreSQL reports that it does not exist
			}
			if sql != s.sent[""] {
				s.heldUnnamedText(sql)
				stmts = s.stmts[""]
			}
		}
		sent := s.sent[st.Name]
		if st.Name == "" && onlyBegin(stmts) && s.unnamedRewritten != "" && sent == s.unnamedRewritten && s.txStatus() != 'E' &&
			((!s.unitFresh || s.unitParsed) && (!s.tx.active && s.txStatus() == 'I' || s.tx.atDefault) || s.refusesLevel(stmts[0])) {
			// A BEGIN rewritten with Ordo's isolation level at its Parse,
			// where nothing had run (rewriteIsolation), bound after a
			// statement of the batch's implicit transaction ran (or
			// parsed, which takes a snapshot too): PostgreSQL would
			// refuse the level there (25001) where the client's BEGIN
			// makes that transaction its block. Parse the client's text
			// again (session fuzzer, seed 1796161711157417662): it runs
			// at the session's level, which PostgreSQL gave the
			// transaction as it does alone, and a level the client names
			// fails or not as it does alone. Not where Ordo set the
			// level (its block for an autocommit write, the client's
			// rewritten BEGIN), where the rewritten text asks for the
			// level already set and the client's might not (review);
			// not in a failed block: PostgreSQL refuses a Parse of BEGIN
			// there, and drops the statement the Bind would have been
			// refused with 25P02 for (seed 1796168281970492786). In a
			// block at Ordo's level whose snapshot is taken, where the
			// client's BEGIN names a level other than the block's as
			// the client knows it, which PostgreSQL alone refuses
			// (25001), the client's text fails as it would. Sent
			// last, just before the Bind (sendAhead): an Exec of the
			// hooks' in between would end the batch it is in.
			s.aheadParse, sent = s.unnamedSQL, s.unnamedSQL
		}
		if s.analyzedBefore(stmts) && len(stmts) == 1 {
			// PostgreSQL analyzes the statement again, under the
			// search path and catalog of now; and its granule keys
			// would be of the conflict classes' old granule columns.
			// From the text it was analyzed from (the client's: sent
			// may hold what Ordo rewrote it to, a NOTIFY call's no-op).
			stmts = s.analyze(stmts[0].SQL)
			s.stmts[st.Name] = stmts
		}
		if stmts == nil {
			// Never parsed through this session (PostgreSQL will report an
			// unknown statement): assume the worst.
			stmts = []*analysis.Statement{opaque("a statement this session did not see prepared")}
		}
		if st.Name != "" && s.unitNames[st.Name] && s.unitSQLPrepared[st.Name] && s.txStatus() != 'E' {
			// Parsed in the unit, then maybe deallocated and prepared
			// again by SQL's DEALLOCATE and PREPARE bound since.
			stmts = []*analysis.Statement{opaque("a statement named by SQL's PREPARE in the same batch")}
		}
		params := s.declaredParams(st.Name, boundParams(st.Params, st.ParamFormats))
		// What this Bind runs may change the names for later Binds of the
		// unit (an SQL PREPARE or DEALLOCATE parsed in an earlier unit).
		s.noteSQLNames(stmts)
		s.noteFreed(stmts)
		if !first && !s.unitBound && s.tx.wrapped && !s.tx.clientBegan && len(stmts) == 1 && stmts[0].NoBlock != "" {
			// The block is Ordo's, opened for an update the batch only
			// parsed: nothing of the batch ran yet, and PostgreSQL runs
			// this statement (DISCARD ALL, VACUUM…) outside any block.
			// End the empty block first (session fuzzer, seed 491).
			left, skipped, err := s.leaveEmptyBlock(ctx)
			if err != nil || skipped {
				return err
			}
			first = left
		}
		err := s.inImplicit(stmts, true)
		s.unitBound = true
		if err != nil {
			return err
		}
		if !first && onlyBegin(stmts) &&
			!s.tx.active && s.txStatus() == 'I' {
			ran := s.beginInBatch(stmts[0])
			s.beganAtBind(st)
			if !ran {
				// Only parsed before it (itself, a SET…): no snapshot
				// yet, and the level is Ordo's to set before the first
				// statement that takes one, if that begins a unit, as
				// after a BEGIN at a boundary (a named BEGIN parsed and
				// bound in one unit ran at the session's level: review).
				s.tx.fixIsolation = s.needsIsolationFix(stmts[0], at{sent: sent})
			}
			return nil
		}
		if isTxnControl(stmts) && !first && !onlyBegin(stmts) && !hasTxn(stmts, analysis.TxnCommit) && !hasTxn(stmts, analysis.TxnRollback) {
			// (A SET TRANSACTION is followed at its Parse, txnControl.)
			if s.txStatus() == 'E' && !hasTxn(stmts, analysis.TxnRollbackTo) {
				// Refused in a failed block (refusedWhenFailed: COMMIT
				// and ROLLBACK do not come here). The messages before it
				// in the unit may all have passed (a Describe, a Close),
				// so Failed would not tell.
				return nil
			}
			if skipped, err := s.skippedInBatch(ctx); err != nil || skipped {
				return err // PostgreSQL skips it, after the earlier error
			}
			for _, a := range stmts {
				if a.Kind == analysis.KindTxn {
					if err := s.boundSavepointOp(ctx, a.Txn, at{kind: wire.KindBind, first: first, msg: st}); err != nil {
						return err
					}
				}
			}
			return nil
		}
		return s.execute(ctx, stmts, params, at{kind: wire.KindBind, first: first, sent: sent, msg: st})
	case wire.KindFunctionCall:
		return s.fastPath(ctx, st)
	case wire.KindCloseStatement:
		s.noteName(st.Name)
		delete(s.stmts, st.Name)
		delete(s.sent, st.Name)
		s.declared[st.Name] = declaredTypes{unknown: true}
	}
	return nil
}

// declaredTypes are the parameter types a Parse declared (0: left to
// PostgreSQL), with the text it sent.
type declaredTypes struct {
	sql     string
	oids    []uint32
	unknown bool // the name was closed
}

// declare notes the types a Parse of the current unit declared for the
// parameters of the statement name.
func (s *session) declare(name, sql string, oids []uint32) {
	s.declared[name] = declaredTypes{sql: sql, oids: slices.Clone(oids)}
}

// declaredParams gives the parameters of a Bind of the statement prepared
// as name the types its Parse declared, that of the current unit if it
// parsed the name, else that of the statement PostgreSQL holds, while
// that is the text sent holds; otherwise analysis.TypeUnknown.
func (s *session) declaredParams(name string, params []analysis.Param) []analysis.Param {
	var (
		oids  []uint32
		known bool
	)
	if d, ok := s.declared[name]; ok {
		oids, known = d.oids, !d.unknown && d.sql == s.sent[name]
	} else {
		sql, types, ok := s.be.Declared(name)
		oids, known = types, ok && sql == s.sent[name]
	}
	for i := range params {
		switch {
		case !known:
			params[i].Declared = analysis.TypeUnknown
		case i < len(oids):
			params[i].Declared = oids[i]
		}
	}
	return params
}

// beginInBatch follows a BEGIN after other statements of the batch
// (bound, or sent as a Query inside it), which makes their implicit
// transaction the client's block (if it runs: an error before it leaves
// nothing open at the Sync). Its snapshot is no older than the unit's
// first statement. ran: a statement of the transaction already ran (or
// was parsed, which takes a snapshot too): the block stays at the level
// PostgreSQL gave it.
func (s *session) beginInBatch(a *analysis.Statement) (ran bool) {
	s.consBeginComment(a.SQL)
	s.inTxn.Store(true)
	ran = !s.unitFresh || s.unitParsed
	s.tx = txState{active: true, atDefault: ran, isolation: a.Txn.Isolation, snapshot: !s.unitFresh, pgSnap: !s.unitFresh, batchSnap: !s.unitFresh, snapSeq: s.unitSnap, reads: s.unitReads, gran: s.unitGran, tempNamed: s.unitTemp, bound: s.tx.bound}
	s.unitReads, s.unitGran, s.unitTemp = txn.ReadSet{}, granuleEpoch{}, false
	s.unitStatus = 'T'
	return ran
}

// leaveEmptyBlock ends the block Ordo opened for the current batch, in
// which nothing ran yet (an update only parsed), before a Bind that must
// run outside any block: the batch so far ends with a Sync of Ordo's,
// which ends nothing inside the block, and the block is rolled back
// (statements parsed in it stay prepared: PostgreSQL's prepared
// statements are not transactional). left: the Bind is now at a boundary,
// outside any block. skipped: PostgreSQL skips it, after an earlier error
// of the batch. Neither if the batch cannot end here (a portal bound and
// not executed, a refusal pending): the statement runs in the block, and
// PostgreSQL refuses it there.
func (s *session) leaveEmptyBlock(ctx context.Context) (left, skipped bool, err error) {
	failed, err := s.be.SyncHere(ctx)
	switch {
	case errors.Is(err, wire.ErrNotAtBoundary):
		return false, false, nil
	case err != nil || failed:
		return false, failed, err
	}
	s.rollback(ctx)
	if s.be.TxStatus() != 'I' {
		return false, false, pgErr(codeInternal, "ordo: could not end the empty transaction opened for this batch")
	}
	s.endTx()
	s.unitStatus = 'I'
	s.unitFresh = true
	return true, false, nil
}

// noteName notes a named statement parsed or closed in the current unit.
func (s *session) noteName(name string) {
	if name == "" {
		return
	}
	s.namedEver = true
	if s.unitNames == nil {
		s.unitNames = make(map[string]bool)
	}
	s.unitNames[name] = true
}

// rewrite runs a statement the analysis rewrote (CREATE/DROP INDEX
// CONCURRENTLY, which cannot run in the transaction Ordo replicates it in)
// as rewritten, and tells the client. Inside a transaction block
// PostgreSQL refuses the statement itself, as it would without Ordo.
//
// A rewrite that holds in a block too (an UNLOGGED table made logged) is
// run wherever the statement is; in a query string of several statements
// it cannot be, and the statement is refused rather than run as sent.
func (s *session) rewrite(st *wire.Statement, stmts []*analysis.Statement) error {
	if len(stmts) > 1 {
		for _, a := range stmts {
			if a.RewriteInBlock && a.NotifyCall == nil { // (a pg_notify call among others runs as sent)
				return pgErr(codeFeatureNotSupported, "ordo: send this statement on its own, not in a query string with others: Ordo runs it rewritten (%s)", strings.TrimPrefix(a.Notice, "ordo: "))
			}
		}
	}
	if len(stmts) != 1 || stmts[0].Rewrite == "" || (!stmts[0].RewriteInBlock && (s.txStatus() != 'I' || s.tx.active)) {
		return nil
	}
	st.Rewrite = stmts[0].Rewrite
	if stmts[0].Notice != "" {
		s.be.Notice(stmts[0].Notice)
	}
	return nil
}

// splittable refuses a query string splitPieces splits that its pieces
// cannot run as PostgreSQL runs the whole string: inside an
// extended-protocol batch, after a statement of it ran, outside a block,
// statements before the string's first transaction control, which
// PostgreSQL runs in the batch's implicit transaction with what that
// control does (a BEGIN makes it the block, so a SET LOCAL before it
// holds in it and a level it asks for fails; a ROLLBACK undoes a
// set_config before it), where the first piece ends that transaction at
// its own ReadyForQuery, and Ordo cannot open a block of its own for the
// string inside the batch. Only a plain COMMIT there ends the
// transaction as that ReadyForQuery does.
func (s *session) splittable(st *wire.Statement, stmts []*analysis.Statement) error {
	if !s.midBatchOutsideBlock(st) {
		return nil
	}
	if i := slices.IndexFunc(stmts, func(a *analysis.Statement) bool { return a.Kind != analysis.KindEmpty }); i < 0 || stmts[i].Kind == analysis.KindTxn {
		return nil // (transaction control first: it runs as PostgreSQL runs it)
	}
	for _, b := range stmts {
		if b.Kind != analysis.KindTxn {
			continue
		}
		if b.Txn.Op == analysis.TxnCommit && !b.Txn.Chain {
			return nil
		}
		err := pgErr(codeFeatureNotSupported, "ordo: this query string cannot be replicated where it stands in its batch: PostgreSQL would run its statements before its %s in the batch's implicit transaction, which Ordo cannot follow across the string's transaction control inside an extended-protocol batch", strings.ToUpper(strings.Fields(stripComments(b.SQL) + " x")[0]))
		err.Hint = "Send it after a Sync, or in a batch of its own."
		return err
	}
	return nil
}

// midBatchOutsideBlock reports whether st, a Query, comes inside an
// extended-protocol batch (not at a boundary) outside any block: there
// Ordo cannot open a block of its own.
func (s *session) midBatchOutsideBlock(st *wire.Statement) bool {
	return !st.AtBoundary && s.txStatus() == 'I' && !s.tx.active
}

// splitPieces returns the pieces a query string is run as when it holds
// transaction control among other statements (Rails, migrations, psql -c
// "BEGIN; …; COMMIT"): Ordo must act at a COMMIT, so each
// transaction-control statement is a piece of its own, and the statements
// between are grouped. nil: run the string whole. offsets are where the
// pieces begin in sql, in characters (PostgreSQL's error positions count
// characters).
func splitPieces(sql string, stmts []*analysis.Statement) (pieces []string, offsets []int) {
	n, control := 0, false
	for _, a := range stmts {
		if a.Kind != analysis.KindEmpty {
			n++
		}
		if a.Kind == analysis.KindTxn {
			control = true
		}
	}
	if n < 2 || !control {
		return nil, nil
	}
	add := func(lo, hi int) {
		pieces = append(pieces, sql[lo:hi])
		offsets = append(offsets, utf8.RuneCountInString(sql[:lo]))
	}
	start, end := -1, -1 // the open group of statements
	for _, a := range stmts {
		if a.Kind == analysis.KindEmpty {
			continue
		}
		lo, hi := a.Offset, a.Offset+len(a.SQL)
		if lo < 0 || hi > len(sql) || sql[lo:hi] != a.SQL || lo < end {
			return nil, nil // offsets not as expected: run it whole
		}
		if a.Kind == analysis.KindTxn {
			if start >= 0 {
				add(start, end)
				start = -1
			}
			add(lo, hi)
			end = hi
			continue
		}
		if start < 0 {
			start = lo
		}
		end = hi
	}
	if start >= 0 {
		add(start, end)
	}
	return pieces, offsets
}

// piece follows the transaction a piece of a split query runs in.
// PostgreSQL runs a string's statements in one implicit transaction; a
// BEGIN in the string makes it a transaction block (what ran before it
// included), and after a COMMIT or ROLLBACK the next statement starts
// another. Ordo opens the implicit transaction itself, as for a wrapped
// autocommit statement, and a BEGIN in it only makes it the client's.
func (s *session) piece(ctx context.Context, stmts []*analysis.Statement) error {
	var ctl *analysis.TxnControl
	if len(stmts) == 1 && stmts[0].Kind == analysis.KindTxn {
		ctl = stmts[0].Txn
	}
	if ctl != nil && ctl.Op == analysis.TxnBegin && s.tx.wrapped && s.txStatus() == 'T' {
		// The client's BEGIN makes Ordo's block its own; PostgreSQL
		// never sees it, but its options must act as in PostgreSQL's
		// implicit transaction: set, or refused (25001) where a
		// snapshot was taken and the level would change.
		if s.refusesLevel(stmts[0]) {
			// (From the level the client's transaction has, which the
			// SET below need not change: under dbsm Ordo's block runs at
			// REPEATABLE READ whatever was asked, and "select 1; begin
			// isolation level serializable; …" ran where PostgreSQL
			// refuses it: a review.)
			return pgErr("25001", "SET TRANSACTION ISOLATION LEVEL must be called before any query")
		}
		if set := s.beginOptions(ctl); set != "" {
			if err := s.execSet(ctx, set); err != nil {
				return err
			}
		}
		s.tx.wrapped = false
		if ctl.Isolation != "" {
			// The level the client's block asked for (it runs at
			// Ordo's, which reports this one).
			s.tx.isolation = ctl.Isolation
		}
		s.wrapExec, s.wrapInjected = false, false // the client's block now
		tag := "BEGIN"
		if strings.HasPrefix(strings.ToUpper(stripComments(stmts[0].SQL)), "START") {
			tag = "START TRANSACTION"
		}
		return &wire.Completed{Tag: tag}
	}
	if err := s.inImplicit(stmts, false); err != nil {
		return err
	}
	if ctl != nil && ctl.Op != analysis.TxnSetTransaction {
		return nil // PostgreSQL answers transaction control outside a block itself
	}
	if s.txStatus() == 'I' && !s.tx.active && onlyShows(stmts) {
		// Nothing to undo and no snapshot: a SHOW first in the string
		// runs outside Ordo's block, as PostgreSQL's own (answered in
		// the block, a SHOW of the level takes a snapshot, and a BEGIN
		// ISOLATION LEVEL after it could not set its level).
		return nil
	}
	if s.txStatus() == 'I' && !s.tx.active {
		if err := s.wrap(ctx); err != nil {
			return err
		}
		// Under cons, the block's classes come before its snapshot: those
		// of its first statement that takes one (a SET or SHOW before it
		// takes none, and gave it none).
		first := &analysis.Statement{Kind: analysis.KindRead}
		for _, a := range stmts {
			if takesSnapshot(a) {
				first = a
				break
			}
		}
		if _, err := s.consTake(ctx, first, nil, true); err != nil {
			return err
		}
		return s.beforeSnapshot(ctx, true)
	}
	return nil
}

// onlyShows reports whether stmts are all SHOW statements.
func onlyShows(stmts []*analysis.Statement) bool {
	for _, a := range stmts {
		if a.Kind != analysis.KindSession || a.Setting == nil || !a.Setting.Show {
			return false
		}
	}
	return len(stmts) > 0
}

// beginOptions is the SET TRANSACTION that gives the block Ordo opened
// the options of the client's BEGIN ct made its own (piece), "" if it
// names none: the level it runs at for the level asked for (runLevel;
// under dbsm-rc the level asked for), READ ONLY or WRITE, DEFERRABLE or
// not.
func (s *session) beginOptions(ct *analysis.TxnControl) string {
	var b strings.Builder
	if ct.Isolation != "" {
		b.WriteString(" ISOLATION LEVEL " + strings.ToUpper(s.runLevel(ct.Isolation)))
	}
	switch ct.ReadOnly {
	case 1:
		b.WriteString(" READ ONLY")
	case -1:
		b.WriteString(" READ WRITE")
	}
	switch ct.Deferrable {
	case 1:
		b.WriteString(" DEFERRABLE")
	case -1:
		b.WriteString(" NOT DEFERRABLE")
	}
	if b.Len() == 0 {
		return ""
	}
	return "SET TRANSACTION" + b.String()
}

// inImplicit makes transaction control executed in an implicit
// transaction that Ordo runs as a block (a wrapped statement, a batch, a
// split string) behave as in PostgreSQL's implicit transaction: a BEGIN
// makes it the client's block, and savepoints, LOCK TABLE and DECLARE
// CURSOR (in an extended batch: extended) are refused as PostgreSQL
// refuses them there.
func (s *session) inImplicit(stmts []*analysis.Statement, extended bool) error {
	if extended && (s.serverVersion < 180000 || !s.unitBound) && s.tx.wrapped && !s.tx.clientBegan && len(stmts) == 1 && stmts[0].BlockOnly != "" {
		// Before PostgreSQL 18 the implicit transaction of an
		// extended-protocol batch is no block (that of a query string
		// of several statements is); 18 takes it for one once a
		// statement of the batch was bound (both checked:
		// compatibility.md).
		return pgErr("25P01", "%s can only be used in transaction blocks", stmts[0].BlockOnly)
	}
	if extended && (s.serverVersion < 180000 || !s.unitBound) && s.tx.wrapped && !s.tx.clientBegan && len(stmts) == 1 && stmts[0].WarnsOutsideBlock != "" {
		// Where it would refuse a BlockOnly statement, PostgreSQL warns
		// of this one, which runs in Ordo's block without a warning.
		s.be.Warn("25P01", stmts[0].WarnsOutsideBlock+" can only be used in transaction blocks")
	}
	if extended && s.serverVersion < 180000 && s.unitBound && s.tx.wrapped && !s.tx.clientBegan && len(stmts) == 1 && stmts[0].NoBlock != "" {
		// Before PostgreSQL 18, after a statement of the batch ran,
		// PostgreSQL refuses it as run within a pipeline; in Ordo's
		// block it would say "inside a transaction block", which is
		// what 18 says (it takes the batch for a block by then).
		return pgErr("25001", "%s cannot be executed within a pipeline", stmts[0].NoBlock)
	}
	if !s.tx.wrapped || s.tx.clientBegan || len(stmts) != 1 || stmts[0].Kind != analysis.KindTxn {
		// (After a BEGIN of the client's in the block, savepoints are
		// theirs: it ran, or an error before it skips them too.)
		return nil
	}
	name := ""
	switch stmts[0].Txn.Op {
	case analysis.TxnBegin:
		// The block is the client's from now on, if it runs:
		// BeforeReady tells by the BEGINs executed. PostgreSQL warns
		// that a transaction is in progress (it is Ordo's block), which
		// it does not in an implicit transaction.
		s.tx.clientBegan = true
		s.be.Unwarn("25001", "there is already a transaction in progress")
	case analysis.TxnSavepoint:
		name = "SAVEPOINT"
	case analysis.TxnRelease:
		name = "RELEASE SAVEPOINT"
	case analysis.TxnRollbackTo:
		name = "ROLLBACK TO SAVEPOINT"
	case analysis.TxnCommit, analysis.TxnRollback:
		// PostgreSQL ends the implicit transaction with a plain COMMIT
		// or ROLLBACK, warning that no transaction is in progress (Ordo's
		// block ends without one), and refuses to chain one.
		if stmts[0].Txn.Chain {
			name = "COMMIT AND CHAIN"
			if stmts[0].Txn.Op == analysis.TxnRollback {
				name = "ROLLBACK AND CHAIN"
			}
		} else if !extended || stmts[0].Txn.Op == analysis.TxnCommit {
			s.be.Warn("25P01", "there is no transaction in progress")
		}
		// (A ROLLBACK bound acts at its Execute, and warns there:
		// boundRan.)
	}
	if name != "" {
		return pgErr("25P01", "%s can only be used in transaction blocks", name)
	}
	return nil
}

// endTx forgets the transaction that ended part-way through a batch,
// releasing its conflict classes (cons) unless its TxnEntry does.
func (s *session) endTx() {
	s.consEnd()
	s.tx = txState{}
}

// txStatus is the transaction status PostgreSQL will be in when it
// reaches the message being reported (see unitStatus).
func (s *session) txStatus() byte {
	if s.unitStatus != 0 {
		return s.unitStatus
	}
	return s.be.TxStatus()
}

// reportedIsolation is an SQL expression of the isolation level to report
// for a transaction that asked for level ("" for the session's default,
// default_transaction_isolation, which PostgreSQL holds as the client set
// it): the level asked for, as PostgreSQL reports READ UNCOMMITTED though
// it gives READ COMMITTED, unless the cluster gives less. It does for a
// block under dbsm-si that did not ask for a level in its BEGIN while the
// session's default is SERIALIZABLE without Ordo knowing it
// (defaultLevel: a set_config inside a function): it runs at REPEATABLE
// READ, snapshot isolation.
func (s *session) reportedIsolation(level string) string {
	expr := "pg_catalog.current_setting('default_transaction_isolation')"
	if level != "" {
		expr = "'" + level + "'::text"
	}
	if level != "" || !s.downgradesDefault() {
		return expr
	}
	return "CASE " + expr + " WHEN 'serializable' THEN 'repeatable read' ELSE " + expr + " END"
}

// downgradesDefault reports whether a block that asks for no level runs
// at less than a session default of SERIALIZABLE (reportedIsolation):
// under dbsm-si. (dbsm, pgr and cons serialize every transaction; dbsm-rc
// runs the session's default as it is.)
func (s *session) downgradesDefault() bool {
	return s.serialOnDemand && !s.rc
}

// rewriteIsolation keeps a BEGIN or SET TRANSACTION from changing the
// REPEATABLE READ every transaction runs at (rewritten, the client still
// sees PostgreSQL's own reply), and answers SHOW transaction_isolation
// with the level the transaction asked for (reportedIsolation).
func (s *session) rewriteIsolation(st *wire.Statement, stmts []*analysis.Statement) {
	if st.Rewrite != "" || s.rc {
		return
	}
	// The level asked for by the transaction open when each statement
	// runs: the one open now, then as BEGIN, SET TRANSACTION, COMMIT and
	// ROLLBACK in the text change it.
	level, open := s.tx.isolation, s.tx.active || s.txStatus() != 'I'
	if !open && st.Kind == wire.KindQuery && (updates(stmts) || notifyCalls(stmts)) {
		// A query string that writes runs whole in the block Ordo
		// opens for it (execute, wrap).
		open = true
	}
	// ran: a statement already ran in the batch's implicit transaction
	// when this one runs. A BEGIN there (or in an open block) only makes
	// the transaction the client's: its level is set, and asking for
	// another would fail (25001) where the client's BEGIN succeeds.
	ran := !s.unitFresh || s.unitParsed
	if st.Kind == wire.KindParse && st.Name != "" {
		// A named statement runs whenever the client binds it, perhaps
		// after others in an implicit transaction: not rewritten, its
		// level is fixed before the block's first statement if that is
		// sent at a boundary (fixIsolation).
		ran = true
	}
	text, out, at := st.SQL, "", 0
	var replaced []wire.Replaced
	for _, a := range stmts {
		r := ""
		if !(a.Kind == analysis.KindTxn && a.Txn.Op == analysis.TxnBegin && (open || ran)) {
			r = s.isolationRewrite(a, level, open, st.Kind == wire.KindQuery)
		}
		if a.Kind == analysis.KindTxn {
			switch a.Txn.Op {
			case analysis.TxnBegin:
				level, open = a.Txn.Isolation, true
				if level == "" {
					level = s.defaultLevel()
				}
			case analysis.TxnSetTransaction:
				if a.Txn.Isolation != "" {
					level = a.Txn.Isolation
				}
			case analysis.TxnCommit, analysis.TxnRollback:
				level, open, ran = "", a.Txn.Chain, false
			}
		} else {
			ran = true
		}
		if r == "" || a.Offset < at || a.Offset+len(a.SQL) > len(text) || text[a.Offset:a.Offset+len(a.SQL)] != a.SQL {
			continue
		}
		out += text[at:a.Offset] + r
		at = a.Offset + len(a.SQL)
		if st.Kind == wire.KindQuery {
			replaced = append(replaced, wire.Replaced{At: utf8.RuneCountInString(text[:a.Offset]),
				Was: utf8.RuneCountInString(a.SQL), Now: utf8.RuneCountInString(r)})
		}
	}
	if at > 0 {
		st.Rewrite, st.Replaced = out+text[at:], replaced
	}
}

// isolationRewrite is what rewriteIsolation puts in a's place ("" for
// nothing); level is what the transaction open when a runs asked for, if
// one is open.
func (s *session) isolationRewrite(a *analysis.Statement, level string, open, query bool) string {
	switch {
	case !open && query && (showsIsolation(a, "transaction_isolation") || showsIsolation(a, "default_transaction_isolation")):
		// A query runs now, and outside a block PostgreSQL's own answer
		// is the session's default, while a SELECT in its place would
		// take a snapshot (a BEGIN after it in the string could not set
		// its level). A prepared SHOW may run anywhere later: it is
		// answered by a SELECT, which execute counts as a statement
		// that took a snapshot.
		return ""
	case showsIsolation(a, "transaction_isolation"):
		return "SELECT " + s.reportedIsolation(level) + " || " + wire.ShowMarkerSQL + " AS transaction_isolation"
	case a.Kind == analysis.KindTxn && s.fixesIsolation(a.Txn):
		var b strings.Builder
		switch {
		case a.Txn.Op == analysis.TxnSetTransaction:
			b.WriteString("SET TRANSACTION")
		case strings.HasPrefix(strings.ToUpper(stripComments(a.SQL)), "START"):
			b.WriteString("START TRANSACTION")
		default:
			b.WriteString("BEGIN")
		}
		b.WriteString(" ISOLATION LEVEL " + strings.ToUpper(s.runLevel(a.Txn.Isolation)))
		switch a.Txn.ReadOnly {
		case 1:
			b.WriteString(" READ ONLY")
		case -1:
			b.WriteString(" READ WRITE")
		}
		switch a.Txn.Deferrable {
		case 1:
			b.WriteString(" DEFERRABLE")
		case -1:
			b.WriteString(" NOT DEFERRABLE")
		}
		return b.String()
	}
	return ""
}

// showsIsolation reports whether a is SHOW name.
func showsIsolation(a *analysis.Statement, name string) bool {
	return a.Kind == analysis.KindSession && a.Setting != nil && a.Setting.Show && a.Setting.Name == name
}

// showAnswered reports whether a is a SHOW that rewriteIsolation turned
// into a SELECT in sent (the text PostgreSQL received), which takes a
// snapshot.
func showAnswered(a *analysis.Statement, sent string) bool {
	return (showsIsolation(a, "transaction_isolation") || showsIsolation(a, "default_transaction_isolation")) &&
		strings.Contains(sent, wire.ShowMarkerSQL)
}

// stripComments drops the leading comments of a statement's text.
func stripComments(sql string) string {
	for {
		sql = strings.TrimSpace(sql)
		switch {
		case strings.HasPrefix(sql, "--"):
			i := strings.IndexByte(sql, '\n')
			if i < 0 {
				return ""
			}
			sql = sql[i+1:]
		case strings.HasPrefix(sql, "/*"):
			i := strings.Index(sql, "*/")
			if i < 0 {
				return ""
			}
			sql = sql[i+2:]
		default:
			return sql
		}
	}
}

// boundParams are the parameters of a Bind (or FunctionCall) as the
// analysis takes them.
func boundParams(values [][]byte, formats []int16) []analysis.Param {
	params := make([]analysis.Param, len(values))
	for i, v := range values {
		params[i] = analysis.Param{Value: v, Binary: paramBinary(formats, i)}
	}
	return params
}

func paramBinary(formats []int16, i int) bool {
	switch len(formats) {
	case 0:
		return false
	case 1:
		return formats[0] == 1
	}
	return i < len(formats) && formats[i] == 1
}

// analyze analyzes sql. Text the analyzer cannot analyze (PostgreSQL will
// most likely reject it) is treated as a statement that may read and write
// anything, so nothing it does can escape replication.
func (s *session) analyze(sql string) []*analysis.Statement {
	stmts, err := s.analyzeText(sql)
	if err != nil {
		a := opaque(err.Error())
		a.Unparsed = errors.Is(err, analysis.ErrSyntax)
		return []*analysis.Statement{a}
	}
	return stmts
}

// utilitySnapshot notes the snapshot PostgreSQL takes when it runs a
// statement of the session's or the node's own (snapshotWhenRun, or
// answered, the SELECT that answers a SHOW): in an implicit transaction,
// a BEGIN after it can no longer set its level; as the first statement
// of a block to take one, it takes the block's snapshot, and the
// snapshot's seqno (certification's) is the applied prefix before it,
// not before a later statement.
func (s *session) utilitySnapshot(ctx context.Context, a *analysis.Statement, answered, atBoundary bool) error {
	if !answered && !snapshotWhenRun(a) || s.txStatus() == 'E' {
		return nil
	}
	if !s.tx.active && s.txStatus() == 'I' {
		s.unitFresh = false
		return nil
	}
	if s.tx.snapshot {
		return nil
	}
	read := &analysis.Statement{Kind: analysis.KindRead, SQL: a.SQL}
	if err := s.consBegin(ctx, read, nil, atBoundary, false); err != nil {
		return err
	}
	return s.beforeSnapshot(ctx, atBoundary)
}

// snapshotWhenRun reports whether PostgreSQL takes the transaction's
// snapshot when it runs a, a statement of the session's (PREPARE,
// DEALLOCATE, DISCARD, CLOSE) or the node's own (ANALYZE, CLUSTER, a
// temporary table): every utility statement but transaction control,
// LOCK, SET, SHOW, SET CONSTRAINTS, FETCH, LISTEN, NOTIFY, UNLISTEN and
// CHECKPOINT (PostgreSQL's PlannedStmtRequiresSnapshot).
func snapshotWhenRun(a *analysis.Statement) bool {
	if a.Kind != analysis.KindSession && a.Kind != analysis.KindLocal {
		return false
	}
	switch a.Tag {
	case "VariableSetStmt", "VariableShowStmt", "ConstraintsSetStmt", "FetchStmt", "CheckPointStmt":
		return false
	}
	return true
}

// noteFreed notes the names a DEALLOCATE or DISCARD ALL bound in the
// unit frees, for the Binds after it in the unit (which the wire layer,
// following PostgreSQL's replies, cannot know of yet).
func (s *session) noteFreed(stmts []*analysis.Statement) {
	for _, a := range stmts {
		switch {
		case a.FreesAll:
			s.unitFreedAll = true
		case a.Deallocates != "":
			if s.unitFreed == nil {
				s.unitFreed = map[string]bool{}
			}
			s.unitFreed[a.Deallocates] = true
		}
	}
}

// noteSQLNames notes a statement of the unit that may change the names
// of prepared statements (unitSQLNames). A Bind of a named statement
// after it in the unit is taken for a statement that may do anything.
func (s *session) noteSQLNames(stmts []*analysis.Statement) {
	for _, a := range stmts {
		switch a.Tag {
		case "PrepareStmt", "DeallocateStmt", "DiscardStmt":
			s.unitSQLNames = true
		}
		if a.Prepared != nil {
			if s.unitSQLPrepared == nil {
				s.unitSQLPrepared = map[string]bool{}
			}
			s.unitSQLPrepared[a.PreparedName] = true
		}
	}
}

// namedReadable reports whether readNamed may run now: outside a block,
// or in one whose snapshot is taken (before it, the read would take the
// block's snapshot ahead of its first statement); not in a failed one.
func (s *session) namedReadable() bool {
	return s.txStatus() == 'I' && !s.tx.active || s.txStatus() == 'T' && s.tx.snapshot
}

// readNamed reads the client's named prepared statements from
// PostgreSQL and tells the wire layer (Backend.LearnNamed), which stopped
// knowing them after SQL's PREPARE, DEALLOCATE or DISCARD (or a DO block
// or a procedure). Only at the first message of a unit. It reports
// whether it could.
func (s *session) readNamed(ctx context.Context) bool {
	res, err := s.be.Exec(ctx, "SELECT name, statement, from_sql, parameter_types::pg_catalog.oid[] FROM pg_catalog.pg_prepared_statements")
	if err != nil || res.Err != nil {
		return false
	}
	names := make(map[string]string, len(res.Rows))
	types := make(map[string][]uint32, len(res.Rows))
	s.fromSQL = map[string]string{}
	for _, r := range res.Rows {
		if len(r) != 4 {
			return false
		}
		names[r[0]] = r[1]
		if r[2] == "t" {
			s.fromSQL[r[0]] = r[1]
		}
		if oids, ok := oidArray(r[3]); ok {
			types[r[0]] = oids
		}
	}
	s.be.LearnNamed(names, s.fromSQL, types)
	return true
}

func opaque(why string) *analysis.Statement {
	return &analysis.Statement{Kind: analysis.KindOpaque, Executes: true, ReadsAll: true, WritesAll: true,
		Reason: "not analyzable: " + why}
}

func (s *session) analyzeText(sql string) ([]*analysis.Statement, error) {
	s.freshEnv()
	return s.h.cfg.Analyzer.Analyze(sql, s.env)
}

// freshEnv reads the search path again if it may have changed, and the
// user that "$user" in it names.
func (s *session) freshEnv() {
	if s.roleStale {
		// SET ROLE names the current user ("none" when unset), else
		// SET SESSION AUTHORIZATION does (the login user by default).
		role, rok := s.showSetting("role")
		auth, aok := s.showSetting("session_authorization")
		if !rok || !aok {
			return // still stale: execute reads its statements as reading anything
		}
		s.roleStale, s.envStale = false, true
		if role != "none" {
			s.user = role
		} else {
			s.user = auth
		}
	}
	if s.envStale {
		// SHOW, not a SELECT: it takes no snapshot, so in a block before
		// its first query the snapshot stays the first query's (whose
		// seqno certification uses, and before which Ordo may still set
		// the block's level).
		if path, ok := s.showSetting("search_path"); ok {
			s.envStale = false
			s.searchPath = path
			s.env = analysis.NewEnv(catalog.SearchPath(s.searchPath, s.user))
		}
	}
}

// showSetting returns a setting's value as SHOW gives it; false if it
// could not be read (not at a boundary of the client's messages, in a
// failed block). SHOW takes no snapshot.
func (s *session) showSetting(name string) (string, bool) {
	res, err := s.be.Exec(context.Background(), "SHOW "+name)
	if err != nil || res.Err != nil || len(res.Rows) != 1 || len(res.Rows[0]) != 1 {
		return "", false
	}
	return res.Rows[0][0], true
}

// analyzedBefore reports whether stmts, the analysis of a prepared
// statement (made by the analyzer, not a stand-in of the session's), was
// made under another catalog, search path or granule epoch than now's.
func (s *session) analyzedBefore(stmts []*analysis.Statement) bool {
	cat := s.h.cfg.Catalog.Current()
	if cat == nil || len(stmts) == 0 || stmts[0].CatalogVersion == 0 {
		return false
	}
	if stmts[0].CatalogVersion != cat.Version() || stmts[0].GranuleSeqno != cat.GranuleSeqno() {
		return true
	}
	s.freshEnv()
	return stmts[0].Env != s.env.Key()
}

func notifyTag(parseNode string) string {
	switch parseNode {
	case "ListenStmt":
		return "LISTEN"
	case "UnlistenStmt":
		return "UNLISTEN"
	}
	return "NOTIFY"
}

// notifyCalls reports whether stmts are a SELECT pg_notify(…) run as
// its rewrite (heldCall).
func notifyCalls(stmts []*analysis.Statement) bool {
	return len(stmts) == 1 && heldCall(stmts[0], stmts)
}

// heldCall reports whether a, one of stmts, is a SELECT pg_notify(…)
// whose notification the session holds until the commit: one sent on
// its own, which runs as its rewrite (session.rewrite). Among other
// statements of a query string it runs as sent: PostgreSQL sends its
// notification (on this node only), and a transaction that also writes
// cannot be prepared.
func heldCall(a *analysis.Statement, stmts []*analysis.Statement) bool {
	return a.NotifyCall != nil && len(stmts) == 1
}

func updates(stmts []*analysis.Statement) bool {
	for _, a := range stmts {
		if a.Updates() {
			return true
		}
	}
	return false
}

func setsSequence(stmts []*analysis.Statement) bool {
	for _, a := range stmts {
		if a.SetsSequence {
			return true
		}
	}
	return false
}

func isTxnControl(stmts []*analysis.Statement) bool {
	for _, a := range stmts {
		if a.Kind == analysis.KindTxn {
			return true
		}
	}
	return false
}

// rolledBackTo follows a ROLLBACK TO executed in a failed block: it
// restores the block if the savepoint exists, so what follows in the
// batch runs, and is followed as such (if it does not, PostgreSQL skips
// it, and following it costs nothing).
// savepoint is a savepoint of the transaction and how many DDL statements
// it had when the savepoint was set.
type savepoint struct {
	name string
	ddl  int
	// notify is how many notifications were held when it was set: a
	// ROLLBACK TO drops those held after it, as PostgreSQL drops the
	// notifications of a subtransaction rolled back.
	notify int
	// bound is how long txState.bound was when it was set: a ROLLBACK
	// TO drops what was bound after it, as PostgreSQL drops the portals
	// of a subtransaction rolled back.
	bound int
}

// savepointOp follows SAVEPOINT, RELEASE and ROLLBACK TO, to drop the DDL
// statements no event trigger sees (roles, databases, TRUNCATE) that a
// ROLLBACK TO undoes: nothing in the write set proves they ran, so they
// are replayed as sent, and one rolled back to a savepoint must not be
// (nor one that failed: the transaction could only go on after a ROLLBACK
// TO a savepoint set before it). The statements event triggers see are
// proved by their records (joinDDL). It follows each where PostgreSQL
// runs it: a Query's at once, a bound one at its portal's Execute
// (Executed). (txnControl sets the block's level, if that is still to be
// done, before its first SAVEPOINT: PostgreSQL sets none in the
// subtransaction it opens, 25001, and the block ran at the session's.)
func (s *session) savepointOp(t *analysis.TxnControl) {
	find := func() int {
		for i := len(s.tx.savepoints) - 1; i >= 0; i-- {
			if s.tx.savepoints[i].name == t.Savepoint {
				return i
			}
		}
		return -1
	}
	switch t.Op {
	case analysis.TxnSavepoint:
		s.tx.savepoints = append(s.tx.savepoints, savepoint{name: t.Savepoint, ddl: len(s.tx.ddl), notify: len(s.tx.notify), bound: len(s.tx.bound)})
	case analysis.TxnRelease:
		if i := find(); i >= 0 {
			s.tx.savepoints = s.tx.savepoints[:i] // it and those after it; their statements stay
			if i == 0 {
				s.settleBound()
			}
			// A savepoint set after this has an index a refused
			// statement's may have had (a RELEASE, then a SAVEPOINT,
			// then a ROLLBACK TO it forgot the refusal: review).
			s.tx.cons.refusedAt = min(s.tx.cons.refusedAt, i)
		}
	case analysis.TxnRollbackTo:
		s.rolledBackTo()
		i := find()
		if i < 0 {
			return // PostgreSQL refuses it
		}
		if s.tx.cons.refused != nil && i < s.tx.cons.refusedAt {
			// Back to before the statement cons refused, which never
			// ran: the transaction goes on, as on PostgreSQL (every
			// statement after it was refused with its error: session
			// fuzzer, seed 1796192813111737214).
			s.tx.cons.refused = nil
		}
		mark := s.tx.savepoints[i].ddl
		kept := s.tx.ddl[:mark:mark]
		for _, d := range s.tx.ddl[mark:] {
			if d.seen {
				kept = append(kept, d)
			}
		}
		s.tx.ddl = kept
		s.tx.notify = s.tx.notify[:min(len(s.tx.notify), s.tx.savepoints[i].notify)]
		s.tx.bound = s.tx.bound[:min(len(s.tx.bound), s.tx.savepoints[i].bound)]
		s.tx.savepoints = s.tx.savepoints[:i+1] // it stays; those after it go
	}
}

// boundSavepointOp follows a SAVEPOINT, RELEASE or ROLLBACK TO that
// PostgreSQL runs at m: a Query's at once, a Bind's when its portal's
// Execute is sent (as ROLLBACK, txnControl). Followed at the Bind, one
// bound and never executed, or executed after statements bound later,
// moved the session's savepoints where PostgreSQL's were not: a role's
// statement was then replicated, or not, unlike the origin. The block's
// level goes before its first SAVEPOINT, at the Bind, while PostgreSQL
// can still set it.
func (s *session) boundSavepointOp(ctx context.Context, t *analysis.TxnControl, m at) error {
	if t.Op == analysis.TxnSavepoint && len(s.tx.savepoints) == 0 && s.txStatus() != 'E' {
		if err := s.setLevel(ctx, m.first); err != nil {
			return err
		}
	}
	if m.kind == wire.KindBind {
		s.bindCtl(m, t)
		return nil
	}
	s.savepointOp(t)
	return nil
}

// skippedInBatch reports whether PostgreSQL skips the message being
// reported, one after others of its batch, because one of them failed
// (or the batch began in a failed block that none of them ended): it
// runs nothing up to the batch's Sync. It waits for PostgreSQL's answers
// to the batch so far (Backend.Failed); during a COPY, which cannot be
// waited for, it reports false.
func (s *session) skippedInBatch(ctx context.Context) (bool, error) {
	failed, err := s.be.Failed(ctx)
	if errors.Is(err, wire.ErrNotAtBoundary) {
		return false, nil
	}
	return failed, err
}

func (s *session) rolledBackTo() {
	if s.txStatus() == 'E' {
		s.unitStatus = 'T'
	}
	if s.namesPending {
		s.undoneNames() // the rollback may undo a SET
	}
}

// hasTxn reports whether stmts hold a transaction-control statement op.
func hasTxn(stmts []*analysis.Statement, op analysis.TxnOp) bool {
	for _, a := range stmts {
		if a.Kind == analysis.KindTxn && a.Txn.Op == op {
			return true
		}
	}
	return false
}

// onlyBegin reports whether stmts is one BEGIN: it acts when it is
// executed (bound), not when it is parsed, which starts no transaction.
func onlyBegin(stmts []*analysis.Statement) bool { return txnOp(stmts) == analysis.TxnBegin }

// txnOp is the operation of stmts if they are one transaction-control
// statement, else 0.
func txnOp(stmts []*analysis.Statement) analysis.TxnOp {
	if len(stmts) == 1 && stmts[0].Kind == analysis.KindTxn {
		return stmts[0].Txn.Op
	}
	return 0
}

// at says which client message statements arrive with, and whether it is
// the first of its unit: the backend has then answered everything before
// it, so the session may run its own statements first.
type at struct {
	kind  wire.StatementKind // KindQuery, KindParse or KindBind
	first bool
	sent  string // the query text PostgreSQL runs it in
	// msg is the Parse or Bind reported (valid during the call only).
	msg *wire.Statement
}

// sentText is the text PostgreSQL receives for st.
// refused is the error for a statement the analyzer refused. PostgreSQL's
// PREPARE TRANSACTION ends the transaction block whether it succeeds or
// fails, so a refused one rolls the block back (where the session is at a
// boundary and can), rather than leaving the client in an aborted block
// that a following BEGIN would find.
func (s *session) refused(ctx context.Context, a *analysis.Statement, atBoundary bool) error {
	if a.Txn != nil && a.Txn.Op == analysis.TxnPrepare && atBoundary && s.txStatus() != 'I' {
		s.rollback(ctx)
		s.endTx()
		return pgErr(codeFeatureNotSupported, "%s; the transaction was rolled back", a.Reason)
	}
	code := codeFeatureNotSupported
	if a.RefusedCode != "" {
		code = a.RefusedCode
	}
	return pgErr(code, "%s", a.Reason)
}

// failedAnyway reports whether PostgreSQL refuses stmts itself: one
// statement, not transaction control, at the start of a unit in a failed
// transaction block, which PostgreSQL answers with 25P02 without running
// it. Ordo's own refusals then give way, so the client gets what
// PostgreSQL says. (Several statements may hold a ROLLBACK that ends the
// failed block and lets the next one run; a client's PREPARE TRANSACTION
// would roll the block back without an error.)
func (s *session) failedAnyway(stmts []*analysis.Statement, atBoundary bool) bool {
	return atBoundary && s.txStatus() == 'E' && len(stmts) == 1 && stmts[0].Txn == nil
}

// kept reports whether stmts, none empty, all recreate objects of Ordo's
// that the node keeps (Statement.KeptTag).
func kept(stmts []*analysis.Statement) bool {
	for _, a := range stmts {
		if a.KeptTag == "" {
			return false
		}
	}
	return len(stmts) > 0
}

func sentText(st *wire.Statement) string {
	if st.Rewrite != "" {
		return st.Rewrite
	}
	return st.SQL
}

// execute handles statements about to run (or, for a Parse, about to be
// prepared).
func (s *session) execute(ctx context.Context, stmts []*analysis.Statement, params []analysis.Param, m at) error {
	atBoundary := m.first
	updates, control := false, 0
	if kept(stmts) && m.kind == wire.KindQuery && s.txStatus() != 'E' {
		// Ordo's own objects, in a restore of a dump taken through a
		// node: the node keeps its own (in a failed transaction,
		// PostgreSQL's refusal stands).
		c := &wire.Completed{}
		for i, a := range stmts {
			s.be.Notice(a.KeptNotice)
			if i < len(stmts)-1 {
				c.Before = append(c.Before, a.KeptTag)
			}
		}
		c.Tag = stmts[len(stmts)-1].KeptTag
		return c
	}
	for _, a := range stmts {
		if a.Kind == analysis.KindRefused && !s.failedAnyway(stmts, atBoundary) {
			return s.refused(ctx, a, atBoundary)
		}
		if a.Updates() {
			updates = true
		}
		if a.Kind == analysis.KindTxn {
			control++
		}
	}
	if control > 0 && len(stmts) > 1 && updates {
		return pgErr(codeFeatureNotSupported,
			"ordo: a query string that both controls the transaction (BEGIN/COMMIT/ROLLBACK) and writes must be sent as separate statements")
	}

	for _, a := range stmts {
		if a.Cursor != "" && len(s.tx.ddl) > 0 && m.kind != wire.KindParse {
			// A cursor is a portal: an Execute of its name runs it, not
			// a statement bound into that name before (review of e00642c).
			s.rebound(a.Cursor)
		}
		if !a.ReadsAll && a.Kind != analysis.KindTxn && a.Kind != analysis.KindSession && a.Kind != analysis.KindEmpty && a.Kind != analysis.KindNotify {
			switch {
			case s.envStale || s.roleStale:
				// Analyzed under a search path that may not be
				// PostgreSQL's when it runs: after a change of it earlier
				// in the same string, or one the session could not read
				// back yet. It reads anything (and keeps all else). Taken
				// for one that may write too, every read after a SET of
				// search_path or a DISCARD ALL in its batch ran in a block
				// of Ordo's (under cons, refused), so one whose name now
				// resolves to a view that writes is still a read.
				a = readsAnything(a, "a statement after a change of search_path or role the session has not read back")
			case s.be.NonStandardStrings() && strings.Contains(a.SQL, `\`):
				// The analysis reads strings as standard_conforming_strings
				// on does: with it off, a backslash may end one elsewhere.
				a = readsAnything(a, "a statement with a backslash while standard_conforming_strings is off")
			}
		}
		if a.SetsSearchPath && s.txStatus() != 'E' {
			s.namesMoved(true) // a set_config call (a SET is noted by setting)
		}
		if a.TempNamespace && m.kind != wire.KindParse {
			// Even if it does nothing (IF NOT EXISTS): the probe sees
			// no trace of such a statement, PostgreSQL's PREPARE does.
			if s.tx.active {
				s.tx.tempNamed = true
			} else {
				s.unitTemp = true // the batch's implicit transaction
			}
		}
		if a.SetsOrdoConfig {
			// set_config('ordo.read_consistency', …): read again once
			// the transaction is over, as after a SET; and a label it
			// may have set is PostgreSQL's to tell.
			s.consistencyStale, s.labelUnseen = true, true
		}
		switch a.Kind {
		case analysis.KindTxn:
			if s.namesPending && (a.Txn.Op == analysis.TxnCommit || a.Txn.Op == analysis.TxnRollback) {
				// Its end may undo a SET LOCAL or, rolled back, a SET
				// (AND CHAIN too: the next block starts from what is left).
				s.undoneNames()
			}
			if err := s.txnControl(ctx, a, m); err != nil {
				return err
			}
			continue
		case analysis.KindSession:
			// A SHOW answered by a SELECT (rewriteIsolation) takes a
			// snapshot too.
			if err := s.utilitySnapshot(ctx, a, showAnswered(a, m.sent), atBoundary); err != nil {
				return err
			}
			if err := checkSetting(a); err != nil {
				return err
			}
			was := s.syncRead
			s.setting(a, m.kind == wire.KindQuery)
			if !was && s.syncRead && m.first && m.kind == wire.KindQuery && len(stmts) > 1 && !s.tx.snapshot {
				// `SET ordo.read_consistency = 'sync'; SELECT …` in one
				// query string (psql -c): nothing of it has run yet, so
				// catch up now, before the statements after the SET.
				if err := s.sync(ctx); err != nil {
					return err
				}
			}
			continue
		case analysis.KindNotify:
			if s.txStatus() == 'T' && m.first && len(stmts) == 1 && m.kind == wire.KindQuery {
				s.tx.notify = append(s.tx.notify, a.SQL)
				return &wire.Completed{Tag: notifyTag(a.Tag)}
			}
			if a.Notify != nil && s.txStatus() == 'I' && !s.tx.active && len(stmts) == 1 &&
				(m.kind == wire.KindQuery && m.first || m.kind == wire.KindBind && s.unitFresh) {
				// An autocommit NOTIFY: ordered for the other nodes'
				// listeners, then sent here by PostgreSQL as usual.
				if err := s.orderNotify(ctx, []capture.Notification{{Channel: a.Notify.Channel, Payload: a.Notify.Payload}}); err != nil {
					return err
				}
			}
			continue
		case analysis.KindLocal:
			if err := s.utilitySnapshot(ctx, a, false, atBoundary); err != nil {
				return err
			}
			continue
		case analysis.KindEmpty:
			continue
		}
		if (a.Updates() || heldCall(a, stmts)) && s.beginNotRun() {
			// PostgreSQL runs it in the batch's implicit transaction,
			// which the Sync commits (review: it committed on this node
			// alone). Bound into the unnamed portal where the BEGIN is,
			// the BEGIN never runs: the transaction is the implicit
			// one again, and made a block here (beginHere). In another,
			// the BEGIN may still run after it, which no block of
			// Ordo's can stand for.
			if s.tx.bindPortal != "" || m.msg == nil || m.msg.Portal != "" {
				return pgErr(codeFeatureNotSupported,
					"ordo: this batch bound a BEGIN into a portal it has not executed before this update: PostgreSQL would run the update outside any block, which Ordo cannot replicate; execute the BEGIN before the update, or send the update in a batch of its own")
			}
			s.unitReads, s.unitGran, s.unitTemp = s.tx.reads, s.tx.gran, s.tx.tempNamed
			s.tx = txState{bound: s.tx.bound}
			s.unitStatus = 'I'
			s.inTxn.Store(false)
		}
		status := s.txStatus()
		if status == 'E' {
			continue // PostgreSQL rejects it: the transaction already failed
		}
		if status == 'I' && !s.tx.active {
			if a.Updates() || heldCall(a, stmts) {
				if !atBoundary {
					if m.kind == wire.KindQuery {
						return pgErr(codeFeatureNotSupported,
							"ordo: an update statement pipelined after other statements without a transaction block cannot be replicated; wrap it in BEGIN … COMMIT")
					}
					// Pipelined after other statements of the batch
					// (pgx SendBatch, JDBC executeBatch, libpq
					// pipelines): PostgreSQL already runs them in an
					// implicit transaction; make it a block, to be
					// terminated at the batch's Sync.
					s.beginHere()
				} else {
					if m.kind == wire.KindParse || m.kind == wire.KindBind {
						s.wrapAhead()
					} else if err := s.wrap(ctx); err != nil {
						return err
					}
					if s.tx.retry = s.retryable(stmts, params, m); s.tx.retry != nil {
						s.be.HoldConflicts()
					}
				}
				s.explainTermination(stmts)
			} else {
				// An autocommit read runs on the local snapshot. Under
				// a protocol that certifies reads, its keys are kept
				// until the batch ends, should a later statement of the
				// batch make its implicit transaction an update.
				if s.h.cfg.Replica.CertifiesReads() {
					s.trackReads(&s.unitReads, a, params)
					s.unitGran.note(a.GranuleSeqno)
				}
				if a.Kind != analysis.KindLock {
					// (LOCK takes no snapshot: PostgreSQL 18 runs it in a
					// batch's implicit transaction once a statement of
					// the batch ran, and under cons an update after it
					// was refused as one after a read: the session
					// fuzzer, seed 1796171111273905241.)
					s.unitFresh = false
				}
				continue
			}
		}
		if !s.tx.active {
			s.tx.active = true // inside a block the proxy saw begin in another unit
		}
		if heldCall(a, stmts) {
			// A no-op runs in its place (its Rewrite); the notification
			// is sent at the commit, here and on every node.
			sql, err := notifyCallSQL(a.NotifyCall, params)
			if err != nil {
				return err
			}
			s.tx.notify = append(s.tx.notify, sql)
			s.unitFresh = false
			continue
		}
		if err := s.consBegin(ctx, a, params, atBoundary, len(stmts) == 1); err != nil {
			return err
		}
		if err := s.beforeSnapshot(ctx, atBoundary); err != nil {
			return err
		}
		if a.SetsSequence && s.tx.seqBefore == nil {
			if !atBoundary {
				return pgErr(codeFeatureNotSupported,
					"ordo: setval pipelined after other statements in one batch cannot be replicated; send it after a Sync")
			}
			if err := s.noteSequences(ctx); err != nil {
				return err
			}
		}
		s.track(a, params, m)
		s.unitFresh = false
		switch a.Kind {
		case analysis.KindRead, analysis.KindWrite, analysis.KindDDL, analysis.KindCopyFrom, analysis.KindCopyTo:
			s.tx.pgSnap = true
		}
	}
	return nil
}

// txnControl follows BEGIN / COMMIT / ROLLBACK.
func (s *session) txnControl(ctx context.Context, a *analysis.Statement, m at) error {
	atBoundary, atParse := m.first, m.kind == wire.KindParse
	if s.txStatus() == 'E' && refusedWhenFailed(a.Txn.Op) {
		return nil
	}
	switch a.Txn.Op {
	case analysis.TxnBegin:
		s.inTxn.Store(true)
		if s.txStatus() == 'I' && !s.tx.active {
			s.tx = txState{active: true, isolation: a.Txn.Isolation, bound: s.tx.bound}
			s.beganAtBind(m.msg)
			if s.tx.isolation == "" {
				s.tx.isolation = s.defaultLevel()
			}
			s.tx.fixIsolation = s.needsIsolationFix(a, m)
			s.consBeginComment(a.SQL)
		}
	case analysis.TxnCommit:
		if !atBoundary && !atParse && !s.tx.done && (s.tx.active || s.txStatus() != 'I') {
			// A COMMIT after other statements of its batch (psycopg's
			// pipeline, pgjdbc's batches): end the batch so far with a
			// Sync of Ordo's, which ends nothing inside a block, and
			// terminate the transaction at that boundary, as for a
			// COMMIT that begins its batch.
			// The Sync also tells the block's real status, which a
			// ROLLBACK TO earlier in the batch may have restored.
			failed, err := s.be.SyncHere(ctx)
			if errors.Is(err, wire.ErrNotAtBoundary) {
				return pgErr(codeFeatureNotSupported,
					"ordo: this COMMIT cannot be replicated where it stands in its batch (after a portal bound and not yet executed, a refused statement, or a COPY); send it after a Sync")
			}
			if err != nil {
				return err
			}
			if failed {
				return nil // PostgreSQL skips it, after the earlier error
			}
			atBoundary = true
		}
		if s.aborted.Load() && s.txStatus() != 'I' && atBoundary {
			// Chosen as a brute-force victim: whether or not the cancel
			// reached a statement (it races with the statement's end), the
			// transaction must not commit, and the client must learn why.
			// Its label, if it has one, is recorded as aborted.
			s.rollback(ctx)
			s.labelFailed(ctx, errBruteForce)
			return errBruteForce
		}
		if s.tx.done || !s.tx.active || s.txStatus() != 'T' {
			// Nothing to replicate: PostgreSQL answers as usual, and
			// what follows in the batch is a new transaction: a new
			// block after COMMIT AND CHAIN, which PostgreSQL chains
			// after a failed block too (answering ROLLBACK).
			if !atParse {
				if s.txStatus() == 'E' {
					// PostgreSQL answers ROLLBACK: the labelled
					// transaction whose commit was asked for failed.
					s.labelFailed(ctx, errStatementFailed)
				}
				chain := a.Txn.Chain && (s.tx.active || s.txStatus() != 'I')
				prev, failed := s.tx, s.txStatus() == 'E'
				s.endTx()
				if chain {
					s.chained(prev, failed)
				} else {
					s.unitStatus = 'I'
				}
			}
			return nil
		}
		if atParse || !atBoundary {
			// A Parse runs nothing (COMMIT acts when it is bound), and
			// SyncHere made a boundary for a COMMIT bound mid-batch.
			return nil
		}
		if a.Txn.Chain {
			// The client's COMMIT AND CHAIN ends the empty transaction
			// commitExplicit leaves and starts the next one.
			level := s.tx.isolation
			if err := s.commitExplicit(ctx, true); err != nil {
				return err
			}
			s.endTx()
			s.tx = txState{active: true, isolation: level}
			return nil
		}
		// (A BEGIN of the client's bound and not executed in Ordo's
		// block leaves it theirs only once it runs: the Sync above
		// waited for every reply so far, so the counts are exact.)
		implicit := s.tx.wrapped && !s.clientBeganIn()
		if err := s.commitExplicit(ctx, false); err != nil {
			return err
		}
		// The client's COMMIT ends the empty transaction left open:
		// what follows in the batch is a new transaction, whose snapshot
		// includes this one (it would conflict with it otherwise).
		s.endTx()
		s.newImplicit()
		if implicit && m.kind == wire.KindBind {
			s.boundEnd = boundEnd{unit: s.unit, begins: s.be.Begins()}
		}
		return nil
	case analysis.TxnRollback:
		// PostgreSQL rolls back. What follows in the same batch runs in
		// a new implicit transaction (or, for ROLLBACK AND CHAIN, a new
		// block): an update there must be wrapped anew, not taken for
		// part of the transaction that ended.
		if m.kind != wire.KindParse {
			if !m.first && (s.tx.active || s.txStatus() != 'I') {
				// After an error earlier in the batch PostgreSQL skips
				// it: the transaction is still there (a ROLLBACK TO in a
				// later batch may restore it), and so is what the session
				// knows of it (its snapshot, its reads).
				if skipped, err := s.skippedInBatch(ctx); err != nil || skipped {
					return err
				}
			}
			if m.kind == wire.KindBind {
				// PostgreSQL rolls back at the portal's Execute, not at
				// its Bind: bound and never executed, it rolls back
				// nothing, and the batch's Sync commits its implicit
				// transaction, or the client's block stays open.
				// Forgotten at the Bind, that transaction was left open
				// in PostgreSQL (lost, or committed by a COMMIT after it
				// on this node alone); followed at a Bind outside any
				// transaction, the block Ordo opened for an update
				// before its Execute was taken for open past it.
				s.bindCtl(m, a.Txn)
				return nil
			}
			s.rolledBack(a.Txn.Chain && (s.tx.active || s.txStatus() != 'I'))
		}
	case analysis.TxnSavepoint, analysis.TxnRelease, analysis.TxnRollbackTo:
		if m.kind != wire.KindParse {
			return s.boundSavepointOp(ctx, a.Txn, m)
		}
	case analysis.TxnSetTransaction:
		if a.Txn.Isolation != "" {
			s.tx.isolation = a.Txn.Isolation
		}
		if s.needsIsolationFix(a, m) {
			s.tx.fixIsolation = true
		}
	}
	return nil
}

// boundCtl is an entry of txState.bound: transaction control txn bound
// into portal, or (txn nil) a Bind of something else there. done: it ran
// (its Execute was sent), or the portal is gone (the unnamed one, bound
// again or dropped by a Query); a ROLLBACK TO, which cuts the log back,
// brings neither back, as PostgreSQL never runs a portal twice.
type boundCtl struct {
	portal string
	txn    *analysis.TxnControl
	done   bool
}

// bindCtl notes transaction control t bound at m, to follow when its
// portal's Execute is sent (Executed).
func (s *session) bindCtl(m at, t *analysis.TxnControl) {
	c := *t
	s.logBound(boundCtl{portal: m.msg.Portal, txn: &c})
	m.msg.WatchExecute = true
}

// logBound appends b to txState.bound, and with no savepoint settles
// the log (settleBound), so that a transaction of many statements does
// not grow it (pgjdbc's autosave sets and releases a savepoint around
// every statement, each bound into the unnamed portal).
func (s *session) logBound(b boundCtl) {
	s.tx.bound = append(s.tx.bound, b)
	if len(s.tx.savepoints) == 0 {
		s.settleBound()
	}
}

// boundInto is the transaction control waiting for an Execute of
// portal, or nil.
func (s *session) boundInto(portal string) *analysis.TxnControl {
	if i := s.lastBound(portal); i >= 0 && !s.tx.bound[i].done {
		return s.tx.bound[i].txn
	}
	return nil
}

// lastBound is the index of portal's last entry in txState.bound, or -1.
func (s *session) lastBound(portal string) int {
	for i := len(s.tx.bound) - 1; i >= 0; i-- {
		if s.tx.bound[i].portal == portal {
			return i
		}
	}
	return -1
}

// unbind notes a Bind of portal, or a Query (portal ""): what waited
// there for an Execute no longer runs at one. The unnamed portal is gone
// for good (a Bind or a Query drops it); a Bind of a named one that
// exists fails, and a ROLLBACK TO a savepoint set before it brings the
// portal's wait back (the log is cut).
func (s *session) unbind(portal string) {
	if s.boundInto(portal) == nil {
		return
	}
	if portal == "" {
		s.tx.bound[s.lastBound(portal)].done = true
		return
	}
	s.logBound(boundCtl{portal: portal})
}

// settleBound drops from txState.bound what no ROLLBACK TO can bring
// back once the transaction has no savepoint: all but the last entry of
// each portal, and the last if it waits for nothing.
func (s *session) settleBound() {
	last := map[string]int{}
	for i, b := range s.tx.bound {
		last[b.portal] = i
	}
	kept := s.tx.bound[:0]
	for i, b := range s.tx.bound {
		if b.txn != nil && !b.done && last[b.portal] == i {
			kept = append(kept, b)
		}
	}
	s.tx.bound = kept
}

// boundRan follows transaction control bound into a portal whose
// Execute is being sent (Executed).
func (s *session) boundRan(t *analysis.TxnControl) {
	switch t.Op {
	case analysis.TxnRollback:
		if !t.Chain && s.tx.wrapped && !s.tx.clientBegan {
			// It ends Ordo's block where PostgreSQL would end the
			// implicit transaction, warning (inImplicit).
			s.be.Warn("25P01", "there is no transaction in progress")
		}
		s.rolledBack(t.Chain && (s.tx.active || s.txStatus() != 'I'))
	default:
		s.savepointOp(t)
	}
	s.early = s.unitStatus
}

// rolledBack follows a ROLLBACK (AND CHAIN, if chain) that PostgreSQL
// runs: what follows in the same batch runs in a new implicit
// transaction, or, chained, a new block.
func (s *session) rolledBack(chain bool) {
	prev, failed := s.tx, s.txStatus() == 'E'
	s.endTx()
	if chain {
		s.chained(prev, failed)
	} else {
		s.newImplicit()
	}
}

// refusedWhenFailed reports whether PostgreSQL refuses transaction
// control op in a failed block (25P02), so that it changes nothing: all
// but the statements that end the block or go back to a savepoint
// (PostgreSQL's IsTransactionExitStmt). Followed as if it ran, a
// SAVEPOINT was found by a later ROLLBACK TO, and a SET TRANSACTION gave
// the block its level.
func refusedWhenFailed(op analysis.TxnOp) bool {
	switch op {
	case analysis.TxnCommit, analysis.TxnRollback, analysis.TxnRollbackTo:
		return false
	}
	return true
}

// chained follows the block a COMMIT AND CHAIN or ROLLBACK AND CHAIN
// that PostgreSQL runs itself begins (not one Ordo commits: commitExplicit
// begins that one) from the block prev it ends, failed if that block was.
// PostgreSQL chains at the level of the block it ends, unless that block
// failed outside any savepoint: its level went with the abort of the whole
// transaction, and the chain runs at the session's default, which Ordo
// then sets before the block's first snapshot, as after a BEGIN that asks
// for none. (An error inside a savepoint aborts only the subtransaction:
// the level stays.) A level Ordo had still to set in the block it ends is
// still to set in the chain. (Under dbsm-si a chain of a failed block ran
// at READ COMMITTED; and the session recorded no level for a ROLLBACK AND
// CHAIN's.)
func (s *session) chained(prev txState, failed bool) {
	failedAtTop := failed && len(prev.savepoints) == 0
	s.tx = txState{active: true, isolation: prev.isolation, fixIsolation: prev.fixIsolation}
	if failedAtTop {
		s.tx.isolation = s.defaultLevel()
		s.tx.fixIsolation = s.fixesIsolation(&analysis.TxnControl{Op: analysis.TxnBegin})
	}
	s.unitStatus = 'T'
}

// needsIsolationFix reports whether BEGIN or SET TRANSACTION a asks for an
// isolation level Ordo runs at another (runLevel) and was not rewritten to
// it (rewriteIsolation): the session then sets it before the first query.
func (s *session) needsIsolationFix(a *analysis.Statement, m at) bool {
	return s.fixesIsolation(a.Txn) && !strings.Contains(m.sent, "ISOLATION LEVEL "+strings.ToUpper(s.runLevel(a.Txn.Isolation)))
}

// fixesIsolation reports whether BEGIN or SET TRANSACTION t must be made
// REPEATABLE READ (or, for a BEGIN asking for none, whatever runLevel
// says): a BEGIN asking for any other level, or for none (the session's
// default is the client's, READ COMMITTED unless it set another), and a
// SET TRANSACTION asking for another level. Under dbsm-si one asking for
// SERIALIZABLE runs at it (tracksReads), and under dbsm-rc every level
// runs as asked.
func (s *session) fixesIsolation(t *analysis.TxnControl) bool {
	if t.Op != analysis.TxnBegin && t.Op != analysis.TxnSetTransaction {
		return false
	}
	if s.rc {
		return false
	}
	if t.Op == analysis.TxnSetTransaction && t.Isolation == "" {
		return false // READ ONLY and the like: the level stays
	}
	if t.Isolation == "serializable" && s.serialOnDemand {
		return false
	}
	return t.Isolation != "repeatable read"
}

// defaultLevel is the level a block that asks for none runs at, as far
// as tracksReads and reportedIsolation are concerned: under dbsm-si and
// dbsm-rc the session's default if it is SERIALIZABLE as far as Ordo knows
// (defaultSerializable: dbsm-rc leaves such a block at PostgreSQL's
// default, and if Ordo is wrong the probe tells at the commit; dbsm-si
// makes it SERIALIZABLE, runLevel), else "" (REPEATABLE READ under all but
// dbsm-rc).
func (s *session) defaultLevel() string {
	if s.serialOnDemand && s.defaultSerializable {
		return "serializable"
	}
	return ""
}

// tracksReads reports whether the open transaction's read keys are
// collected for certification: every transaction's under dbsm and pgr;
// under dbsm-si and dbsm-rc those of one that asked for SERIALIZABLE,
// which runs at PostgreSQL's SERIALIZABLE and is certified as under dbsm
// (its entry says so: termination.Txn.Serializable).
func (s *session) tracksReads() bool {
	return s.h.cfg.Replica.CertifiesReads() || (s.serialOnDemand && s.tx.isolation == "serializable")
}

// checkSetting refuses a value of a setting Ordo interprets that it
// could not use.
func checkSetting(a *analysis.Statement) error {
	st := a.Setting
	if st == nil || st.Show || st.Reset {
		return nil
	}
	if st.Name == "ordo.read_consistency" {
		if v := strings.TrimSpace(strings.Trim(st.Value, "'")); !strings.EqualFold(v, "sync") && !strings.EqualFold(v, "local") {
			return pgErr(codeInvalidParameterValue, "ordo: invalid value for parameter \"ordo.read_consistency\": %q (sync: each statement waits until this node has applied what the cluster committed before it; local: it reads what this node has applied)", st.Value)
		}
		return nil
	}
	if st.Name != "ordo.autocommit_retries" {
		return nil
	}
	if n, err := strconv.Atoi(strings.Trim(st.Value, "'")); err != nil || n < 0 || n > config.MaxAutocommitRetries {
		return pgErr(codeInvalidParameterValue, "ordo: invalid value for parameter \"ordo.autocommit_retries\": %q (an integer from 0 to %d: how many times an autocommit statement aborted by a replication conflict runs again)", st.Value, config.MaxAutocommitRetries)
	}
	return nil
}

// setting notes session settings Ordo interprets. In a failed block
// PostgreSQL refuses the statement, and nothing changes (noted anyway, a
// change of names there made the statements after the block's ROLLBACK in
// the same batch read anything, which under cons fails those outside the
// classes declared: session fuzzer, seed 1796180004375575397). inQuery:
// a's statement runs in a query string, whose statements run in order (a
// SET of search_path bound in a batch may not be executed).
func (s *session) setting(a *analysis.Statement, inQuery bool) {
	if s.txStatus() == 'E' || a.DiscardsAll && s.txStatus() == 'T' {
		return // (PostgreSQL refuses DISCARD ALL in a block too)
	}
	st := a.Setting
	if a.DiscardsAll {
		s.consistencyStale = true // DISCARD ALL resets every setting
	}
	if path, role := changesNames(a); path || role {
		s.namesMoved(role)
		if inQuery && s.guessable(a) {
			// The path it sets is the statements' after it in its unit
			// (a schema per tenant: "SET search_path = t1, public;
			// SELECT …"), which the session cannot read back before
			// they run: taken for reading anything, a read whose name
			// resolved to a view that writes was still a read.
			s.searchPath = pathText(st.Values)
			s.env = analysis.NewEnv(s.schemas(st.Values))
			s.envStale, s.envGuessed = false, true
		}
	}
	if st == nil {
		return
	}
	switch {
	case st.Name == "search_path" || st.Name == "all":
		if st.Name == "all" {
			s.consistencyStale = true
		}
	case (st.Name == "default_transaction_isolation" || st.Name == "session characteristics") && !st.Show:
		s.consistencyStale = true // read with ordo.read_consistency
	case st.Name == "ordo.read_consistency" && !st.Show:
		// At once, for the statements after it (in its query string too);
		// PostgreSQL has the last word once the block ends.
		s.syncRead = !st.Reset && syncConsistency(st.Value)
		s.consistencyStale = true
	case (st.Name == "ordo.conflict_classes" || st.Name == "ordo.profile") && !st.Show:
		s.consSetting(st.Name, st.Value)
	case st.Name == "ordo.txn_label" && !st.Show:
		// Names the current update transaction, or the next one: it is
		// used by one termination, then forgotten. A reset still
		// pending would undo this SET (it runs after it).
		s.label, s.labelLocal = strings.Trim(st.Value, "'"), st.Local
		if st.Reset {
			s.label = ""
		}
		s.labelResetPending = false
	}
}

// changesNames reports whether a statement may change how the names of
// the statements after it resolve: path, a SET or RESET of search_path,
// RESET ALL, DISCARD ALL, or a set_config call that may set it; role, one
// of role or session_authorization (which "$user" in the path follows),
// DISCARD ALL, or such a set_config call.
func changesNames(a *analysis.Statement) (path, role bool) {
	if a.SetsSearchPath {
		return true, true
	}
	if a.DiscardsAll {
		return true, true
	}
	if st := a.Setting; st != nil && !st.Show {
		switch st.Name {
		case "search_path", "all":
			return true, false
		case "role", "session_authorization":
			return true, true
		}
	}
	return false, false
}

// namesMoved notes a statement that may change how names resolve
// (changesNames): the search path, and the user if role, are read again
// before the next analysis, and again once the session is outside any
// transaction (which may have undone the change).
func (s *session) namesMoved(role bool) {
	s.envStale, s.namesPending = true, true
	if role {
		s.roleStale, s.rolePending = true, true
	}
}

// undoneNames notes that a rollback, or the end of a transaction, may
// have undone the changes namesMoved noted: they are read again.
func (s *session) undoneNames() {
	s.envStale = true
	if s.rolePending {
		s.roleStale = true
	}
}

// settleNames reads the names again outside any transaction, where what
// namesMoved noted is settled.
func (s *session) settleNames() {
	s.undoneNames()
	s.namesPending, s.rolePending = false, false
}

// guessable reports whether a is a SET of search_path to a list of
// schemas whose path the session can take for PostgreSQL's (envGuessed):
// not to its default, not in a failed block, and with the user "$user"
// names known.
func (s *session) guessable(a *analysis.Statement) bool {
	st := a.Setting
	return st != nil && st.Name == "search_path" && !st.Reset && !st.Show && len(st.Values) > 0 &&
		!s.roleStale && s.txStatus() != 'E'
}

// schemas are the schemas a SET's list items name ("$user" the user).
func (s *session) schemas(items []string) []string {
	out := make([]string, 0, len(items))
	for _, it := range items {
		if it == "$user" {
			it = s.user
		}
		if it != "" {
			out = append(out, it)
		}
	}
	return out
}

// pathText is the search path a SET's list items give, as SHOW says it.
func pathText(items []string) string {
	quoted := make([]string, len(items))
	for i, it := range items {
		quoted[i] = quoteIdent(it)
	}
	return strings.Join(quoted, ", ")
}

// underSetPaths returns stmts, the analysis of a query string, with the
// statements after a SET of search_path in it analyzed under the path it
// sets (which execute then takes for the session's: guessable), not the
// session's.
func (s *session) underSetPaths(stmts []*analysis.Statement) []*analysis.Statement {
	var out []*analysis.Statement
	env := s.env
	for i, a := range stmts {
		if out != nil {
			if a.CatalogVersion != 0 && a.Env != env.Key() {
				if fresh, err := s.h.cfg.Analyzer.Analyze(a.SQL, env); err == nil && len(fresh) == 1 {
					c := *fresh[0]
					c.Offset = a.Offset
					a = &c
				}
			}
			out = append(out, a)
		}
		if i < len(stmts)-1 && s.guessable(a) {
			if out == nil {
				out = append(make([]*analysis.Statement, 0, len(stmts)), stmts[:i+1]...)
			}
			env = analysis.NewEnv(s.schemas(a.Setting.Values))
		}
	}
	if out == nil {
		return stmts
	}
	return out
}

// quoteIdent quotes a schema name as SHOW search_path does, where it is
// not a plain lower-case name ("$user" is quoted too).
func quoteIdent(name string) string {
	plain := name != ""
	for i, r := range name {
		if !(r >= 'a' && r <= 'z' || r == '_' || i > 0 && (r >= '0' && r <= '9' || r == '$')) {
			plain = false
		}
	}
	if plain {
		return name
	}
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}

// readsAnything returns a copy of a that reads anything, for why.
func readsAnything(a *analysis.Statement, why string) *analysis.Statement {
	c := *a
	c.ReadsAll = true
	if c.Reason == "" {
		c.Reason = why
	}
	return &c
}

// readConsistencySQL reads the session's ordo.read_consistency, as
// PostgreSQL keeps it (empty if nothing set it), and its
// default_transaction_isolation (defaultSerializable).
const readConsistencySQL = "SELECT coalesce(current_setting('ordo.read_consistency', true), ''), current_setting('default_transaction_isolation')"

// syncConsistency reports whether an ordo.read_consistency value asks for
// sync reads.
func syncConsistency(v string) bool {
	return strings.EqualFold(strings.TrimSpace(strings.Trim(v, "'")), "sync")
}

// readConsistency reads ordo.read_consistency from PostgreSQL, which
// applies its own rules to it: a SET in a block that rolled back is
// undone, RESET goes back to the role's or database's value.
func (s *session) readConsistency(ctx context.Context) {
	res, err := s.be.Exec(ctx, readConsistencySQL)
	if err != nil || res.Err != nil || len(res.Rows) != 1 || len(res.Rows[0]) != 2 {
		return // (stale still: read at the next unit)
	}
	s.syncRead, s.consistencyStale = syncConsistency(res.Rows[0][0]), false
	s.defaultSerializable, s.defaultIsolation = res.Rows[0][1] == "serializable", res.Rows[0][1]
}

// wrap starts a transaction block for an autocommit update statement and
// holds the unit's ReadyForQuery until it is terminated.
func (s *session) wrap(ctx context.Context) error {
	if err := s.beginWrapped(ctx); err != nil {
		return err
	}
	// A query string runs whole in the block: a statement of it before
	// this one that named a temporary table is the block's (lost, the
	// probe saw no temporary object where an existing temporary table
	// was created IF NOT EXISTS, and the PREPARE failed: session fuzzer,
	// seed 1796181126423773066 on PostgreSQL 18).
	s.tx.tempNamed = s.unitTemp
	s.noteWrap(false)
	s.unitStatus = 0 // Exec brought the status up to date
	s.inTxn.Store(true)
	s.be.HoldReady()
	return nil
}

// wrapAhead is wrap for an update statement sent with the extended
// protocol (Parse or Bind) as the first message of its unit: its BEGIN
// goes to PostgreSQL ahead of the client's message, in the same round
// trip, rather than in one of its own before it (wire.Backend.BeginHere).
// If that BEGIN fails (a late cancel), PostgreSQL skips the client's
// messages up to their Sync and the client gets the error: the statement
// never runs outside the block. The BEGIN waits in s.ahead until
// Statement returns (sendAhead); a statement of Ordo's run before then
// (aheadBackend) sends it first, in a round trip of its own as wrap does,
// so that it runs in the block as it would after wrap.
func (s *session) wrapAhead() {
	s.ahead = s.wrapBegin()
	s.tx = txState{active: true, wrapped: true, isolation: s.defaultLevel(), bound: s.tx.bound}
	s.unitStatus = 'T'
	s.inTxn.Store(true)
	s.be.HoldReady()
}

// sendAhead sends the BEGIN wrapAhead queued, if it is still to be sent,
// and the Parse of aheadParse ahead of the message being reported.
func (s *session) sendAhead(failed error) {
	if set := s.aheadSet; set != "" {
		s.aheadSet = ""
		if failed != nil {
			// The message is refused, not sent: nothing of the block ran
			// (a statement of Ordo's would have sent the SET first), and
			// the level is set before the next one that runs.
			s.tx.fixIsolation, s.tx.snapshot = true, false
		} else {
			s.be.SetHere(set)
		}
	}
	if begin := s.takeAhead(); begin != "" {
		s.noteWrap(true)
		s.tx.injected = true
		s.be.BeginHere(begin)
	}
	if sql := s.aheadParse; sql != "" {
		s.aheadParse = ""
		if failed == nil {
			s.be.ParseHere(sql, s.unnamedTypes)
			s.sent[""] = sql
		}
	}
}

// beganAtBind notes a BEGIN taken as opening the block at its Bind (st).
func (s *session) beganAtBind(st *wire.Statement) {
	if st != nil && st.Kind == wire.KindBind {
		s.tx.bindUnit, s.tx.bindPortal = s.unit, st.Portal
	}
}

// beginNotRun reports whether the block was taken as begun at the Bind
// of a BEGIN earlier in this batch whose portal is not executed yet: an
// update now would run in PostgreSQL's implicit transaction, which the
// Sync commits here alone (review: the insert after a BEGIN bound and
// never executed was not replicated).
func (s *session) beginNotRun() bool {
	return s.tx.bindUnit != 0 && s.tx.bindUnit == s.unit && s.be.PortalPending(s.tx.bindPortal)
}

// refusesLevel reports whether PostgreSQL alone would refuse BEGIN a
// inside the open block (25001): its snapshot is surely taken (pgSnap:
// not after a LOCK alone, where the client's text would set a level
// below Ordo's: review), in this batch or an earlier one, and a names a
// level, not the one the block runs at as the client knows it.
func (s *session) refusesLevel(a *analysis.Statement) bool {
	if !s.tx.active || !s.tx.pgSnap || a.Txn.Isolation == "" {
		return false
	}
	level := s.tx.isolation
	if level == "" {
		// The session's default, if it is known.
		if s.consistencyStale || s.defaultIsolation == "" {
			return false
		}
		level = s.defaultIsolation
	}
	return a.Txn.Isolation != level
}

// heldUnnamedText follows sql, the text PostgreSQL holds as the unnamed
// statement, where it is not sent[""]: the client's Parse failed or was
// skipped, or a Query destroyed it, or ParseHere's Parse was skipped (an
// error earlier in its batch) and PostgreSQL still holds what the
// client's Parse was rewritten to.
func (s *session) heldUnnamedText(sql string) {
	if sql == s.unnamedRewritten {
		s.sent[""] = sql
		return
	}
	client := s.be.UnnamedParsedAs()
	if client == "" {
		client = sql
	}
	// From the client's text: Ordo's may say another isolation level
	// than the client asked for (session fuzzer, seed
	// 1796173496328532457).
	s.stmts[""], s.sent[""] = s.analyze(client), sql
	s.unnamedSQL, s.unnamedRewritten = client, ""
	if client != sql {
		s.unnamedRewritten = sql
	}
	s.unnamedTypes = s.unnamedTypes[:0]
	if _, types, ok := s.be.Declared(""); ok {
		s.unnamedTypes = append(s.unnamedTypes, types...)
	}
}

// takeAhead returns the BEGIN wrapAhead queued and forgets it: "" if
// there is none, or if the hook ended the block it was for since.
func (s *session) takeAhead() string {
	begin := s.ahead
	s.ahead = ""
	if !s.tx.active || !s.tx.wrapped {
		return ""
	}
	return begin
}

// execSet runs a SET TRANSACTION in a round trip of its own.
func (s *session) execSet(ctx context.Context, set string) error {
	res, err := s.be.Exec(ctx, set)
	if err != nil {
		return err
	}
	if res.Err != nil {
		if s.bruteForced(res) {
			return errBruteForce
		}
		return res.Err
	}
	return nil
}

// setAhead runs the SET TRANSACTION beforeSnapshot queued (aheadSet) in
// a round trip of its own, before a statement of Ordo's.
func (s *session) setAhead(ctx context.Context) error {
	set := s.aheadSet
	if set == "" {
		return nil
	}
	s.aheadSet = ""
	return s.execSet(ctx, set) // (s.aheadSet is empty: no recursion)
}

// beginAhead runs the BEGIN wrapAhead queued in a round trip of its own,
// before a statement of Ordo's that must run in its block.
func (s *session) beginAhead(ctx context.Context) error {
	begin := s.takeAhead()
	if begin == "" {
		return nil
	}
	res, err := s.be.Exec(ctx, begin) // (s.ahead is empty: no recursion)
	if err == nil && res.Err != nil {
		err = res.Err
		if s.bruteForced(res) {
			err = errBruteForce // a late cancel of an aborted transaction
		}
	}
	if err != nil {
		// (Under cons the block's classes may be granted by now: released
		// with it, or nothing would ever release them.)
		s.endTx()
		s.unitStatus = 0
		s.inTxn.Store(false)
		return err
	}
	s.tx.begins = s.be.Begins()
	s.noteWrap(false)
	s.unitStatus = 0 // Exec brought the status up to date
	return nil
}

// aheadBackend is the session's wire.Backend: a BEGIN that wrapAhead
// queued is sent before any statement of Ordo's.
type aheadBackend struct {
	wire.Backend
	s *session
}

func (b aheadBackend) Exec(ctx context.Context, sql string, more ...string) (*wire.Result, error) {
	if err := b.s.beginAhead(ctx); err != nil {
		return nil, err
	}
	if err := b.s.setAhead(ctx); err != nil {
		return nil, err
	}
	return b.Backend.Exec(ctx, sql, more...)
}

func (b aheadBackend) ExecAbortable(ctx context.Context, sql string) (*wire.Result, error) {
	if err := b.s.beginAhead(ctx); err != nil {
		return nil, err
	}
	if err := b.s.setAhead(ctx); err != nil {
		return nil, err
	}
	return b.Backend.ExecAbortable(ctx, sql)
}

func (b aheadBackend) ExecBound(ctx context.Context, name string, formats []int16, params [][]byte, resultFormats []int16) (*wire.Result, error) {
	if err := b.s.beginAhead(ctx); err != nil {
		return nil, err
	}
	if err := b.s.setAhead(ctx); err != nil {
		return nil, err
	}
	return b.Backend.ExecBound(ctx, name, formats, params, resultFormats)
}

// wrapBegin is the BEGIN of a wrapped autocommit statement.
func (s *session) wrapBegin() string {
	if s.rc {
		return "BEGIN" // at the session's own level
	}
	if s.runLevel("") == "serializable" {
		return "BEGIN ISOLATION LEVEL SERIALIZABLE"
	}
	return "BEGIN ISOLATION LEVEL REPEATABLE READ" // (a constant: once per autocommit write)
}

// runLevel is the level a block that asked for level ("" for none) runs
// at: REPEATABLE READ, but under dbsm-si SERIALIZABLE for one that asks
// for it, or asks for nothing at a session default of SERIALIZABLE
// (defaultLevel), and under dbsm-rc the level asked for (nothing Ordo
// sets for one that asks for none there: wrapBegin).
func (s *session) runLevel(level string) string {
	if s.rc && level != "" {
		return level
	}
	if level == "" {
		level = s.defaultLevel()
	}
	if level == "serializable" && s.serialOnDemand {
		return level
	}
	return "repeatable read"
}

// beginWrapped opens the block of a wrapped autocommit statement (wrap,
// and each retry of it).
func (s *session) beginWrapped(ctx context.Context) error {
	res, err := s.be.Exec(ctx, s.wrapBegin())
	if err != nil {
		return err
	}
	if res.Err != nil {
		if s.bruteForced(res) {
			return errBruteForce // a late cancel of an aborted transaction
		}
		return res.Err
	}
	// A transaction before it (a retried attempt's) is over: classes it
	// took under cons are released (nothing if its TxnEntry was proposed).
	s.consEnd()
	s.tx = txState{active: true, wrapped: true, begins: s.be.Begins(), isolation: s.defaultLevel(), bound: s.tx.bound}
	return nil
}

// explainTermination, for a CALL or DO that Ordo runs in a block of its
// own, replaces PostgreSQL's "invalid transaction termination" (2D000:
// the procedure or block ran COMMIT or ROLLBACK, which PostgreSQL allows
// only outside a block) with what happened and what to do.
func (s *session) explainTermination(stmts []*analysis.Statement) {
	for _, a := range stmts {
		if a.Tag == "CallStmt" || a.Tag == "DoStmt" {
			what := "procedure"
			if a.Tag == "DoStmt" {
				what = "DO block"
			}
			s.be.Explain("2D000", "invalid transaction termination",
				"ordo: a "+what+" that commits or rolls back inside cannot be replicated",
				"Ordo replicates a statement sent outside a transaction block as one transaction, and a transaction the "+what+
					" ended inside PostgreSQL would commit on this node only. Run its steps as transactions of their own (the "+what+
					" without COMMIT or ROLLBACK inside, or several statements).")
			return
		}
	}
}

// beforeSnapshot records snapshot_seqno before the transaction's first
// snapshot-taking statement.
func (s *session) beforeSnapshot(ctx context.Context, atBoundary bool) error {
	if s.tx.snapshot {
		return nil
	}
	s.tx.snapshot = true
	if err := s.setLevel(ctx, atBoundary); err != nil {
		return err
	}
	s.tx.snapSeq = s.h.cfg.Replica.AppliedPrefix()
	s.tx.readsFromStart = s.tracksReads()
	return nil
}

// setLevel sets the level Ordo runs the block at, if the client's BEGIN
// or SET TRANSACTION asked for another and was not rewritten
// (fixIsolation): before the block's first snapshot, or its first
// SAVEPOINT.
func (s *session) setLevel(ctx context.Context, atBoundary bool) error {
	if s.tx.fixIsolation && len(s.tx.savepoints) > 0 {
		// PostgreSQL sets no level in a subtransaction (25001, which
		// would fail the block): it keeps the one it began at.
		s.tx.fixIsolation = false
	}
	if s.tx.fixIsolation {
		s.tx.fixIsolation = false
		set := "SET TRANSACTION ISOLATION LEVEL " + strings.ToUpper(s.runLevel(s.tx.isolation))
		if s.setAheadOK || !atBoundary {
			// In the client's round trip, just before its message
			// (sendAhead): a named BEGIN (pgbench -M prepared, drivers
			// that prepare what they repeat) cost a round trip more.
			// At a boundary not ahead of a named statement's Parse,
			// for the reason the BEGIN of a wrapped statement is not
			// (Statement,
			// TestNamedPrepareKeepsOrdosBeginOutOfTheClientsUnit);
			// inside a batch (its BEGIN bound earlier in it), where a
			// round trip of Ordo's would end the batch, ahead of any.
			s.aheadSet = set
		} else if err := s.execSet(ctx, set); err != nil {
			return err
		}
	}
	return nil
}

// sync waits, for a sync read, until this node has applied what the
// cluster had committed when it was asked.
func (s *session) sync(ctx context.Context) error {
	s.h.m.syncReads.Inc()
	wctx, stop := s.untilCanceled(ctx)
	defer stop()
	if err := s.h.cfg.Replica.SyncRead(wctx); err != nil {
		if s.wasCanceled() {
			return pgErr(codeQueryCanceled, "ordo: %v (a sync read waited for this node to catch up with the cluster)", termination.ErrClientCanceled)
		}
		return pgErr(codeResolutionUnknown, "ordo: sync read: %v", err)
	}
	return nil
}

// newImplicit notes that the batch's implicit transaction ended at a
// COMMIT or ROLLBACK: what follows in the batch runs in a new one, whose
// snapshot includes what committed so far.
func (s *session) newImplicit() {
	s.unitStatus = 'I'
	s.unitSnapLater = true // (read at the next statement)
	s.unitReads, s.unitGran, s.unitTemp = txn.ReadSet{}, granuleEpoch{}, false
	s.unitFresh, s.unitParsed = true, false
}

// noteWrap notes a block Ordo opens in the current unit (see wrapExec).
func (s *session) noteWrap(injected bool) {
	if !s.wrapExec && !s.wrapInjected {
		s.wrapBegins = s.be.Begins()
	}
	if !injected {
		s.wrapExec = true
	} else if !s.wrapInjected {
		s.wrapInjected, s.wrapInjectedAt = true, s.be.InjectedBegins()
	}
}

// beginHere makes the implicit transaction of the batch being sent a
// transaction block that the batch's Sync does not end (see wrap). Its
// snapshot was taken by an earlier statement of the batch, if one ran in
// it (unitFresh): snapshot_seqno is the applied prefix when the batch (or
// the implicit transaction) began, and its reads so far are the
// transaction's.
func (s *session) beginHere() {
	s.noteWrap(true)
	s.be.BeginHere("BEGIN")
	s.tx = txState{active: true, wrapped: true, injected: true, atDefault: true, snapshot: !s.unitFresh, pgSnap: !s.unitFresh, batchSnap: !s.unitFresh, snapSeq: s.unitSnap, reads: s.unitReads, gran: s.unitGran, tempNamed: s.unitTemp, bound: s.tx.bound}
	s.unitStatus = 'T'
	s.unitReads, s.unitGran, s.unitTemp = txn.ReadSet{}, granuleEpoch{}, false
	s.inTxn.Store(true)
	s.be.HoldReady()
}

// track adds a statement's reads and DDL to the transaction.
func (s *session) track(a *analysis.Statement, params []analysis.Param, m at) {
	if a.Kind == analysis.KindDDL {
		if a.Tag == "TruncateStmt" {
			return // its decoded truncate carries it, as it ran (or not at all, rolled back)
		}
		d := newDDLStmt(a, m.sent)
		if !d.seen && m.kind == wire.KindBind && m.msg != nil {
			d.bind, d.portal = bindUnrun, m.msg.Portal
			m.msg.WatchExecute = true // (Executed)
		}
		s.tx.ddl = append(s.tx.ddl, d)
		return // DDL reads the catalog, which only DDL changes, in total order
	}
	if a.Kind == analysis.KindOpaque {
		s.tx.noteBlock(m)
	}
	if len(a.Locks) > 0 && a.Kind != analysis.KindLock {
		s.trackLocks(a, params)
		s.tx.gran.note(a.GranuleSeqno)
	}
	if !s.tracksReads() {
		return
	}
	s.trackReads(&s.tx.reads, a, params)
	s.tx.gran.note(a.GranuleSeqno)
}

// granuleEpoch is the granule epoch of the analyses a transaction's keys
// came from (catalog.Catalog.GranuleSeqno), and whether they differed.
type granuleEpoch struct {
	seqno      uint64
	set, mixed bool
}

func (g *granuleEpoch) note(seqno uint64) {
	if g.set && g.seqno != seqno {
		g.mixed = true
	}
	g.seqno, g.set = seqno, true
}

// trackLocks adds the rows a SELECT … FOR UPDATE/NO KEY UPDATE/SHARE/KEY
// SHARE locks to the transaction's lock keys, which terminate certifies
// and records as writes (X): a row lock is local to a node, so without
// them two transactions on two nodes could both lock one row and commit,
// where PostgreSQL lets only one hold it at a time (compatibility.md "Row
// locks"). The rows are those the analyzer proves (primary key or
// granule values); otherwise the whole table is the key.
func (s *session) trackLocks(a *analysis.Statement, params []analysis.Param) {
	if len(s.tx.locks) == 0 {
		s.tx.lockSnap = s.h.cfg.Replica.AppliedPrefix()
	}
	locked := map[catalog.Name]bool{}
	for _, t := range a.Locks {
		locked[t] = true
	}
	keyed := map[catalog.Name]bool{}
	if fp, err := a.Bind(params); err == nil && !fp.All {
		for _, k := range fp.Reads {
			if t := (catalog.Name{Schema: k.Schema, Name: k.Table}); locked[t] {
				if k.Level == txn.LevelGranule {
					// A row lock or reference in the granule records no
					// granule key to meet X on it: the whole table.
					k = txn.TableKey(k.Schema, k.Table)
				}
				s.tx.locks = append(s.tx.locks, k)
				keyed[t] = true
			}
		}
	}
	for _, t := range a.Locks {
		if !keyed[t] {
			s.tx.locks = append(s.tx.locks, txn.TableKey(t.Schema, t.Name))
		}
	}
}

// trackReads adds a statement's read keys to reads.
func (s *session) trackReads(reads *txn.ReadSet, a *analysis.Statement, params []analysis.Param) {
	if a.ReadsAll {
		reads.AddAll()
		return
	}
	if a.LargeObjects {
		// Which objects a call reads is not known before it runs (an
		// lo_open's descriptor, an oid from a column): it reads them all.
		reads.Add(capture.LargeObjectsTable())
	}
	fp, err := a.Bind(params)
	if err != nil {
		if errors.Is(err, analysis.ErrParams) {
			reads.AddAll()
		}
		return
	}
	if fp.All {
		reads.AddAll()
		return
	}
	reads.SetLimit(s.h.cfg.KeyEscalationRows)
	for _, k := range fp.Reads {
		reads.Add(k)
	}
}

// ReadyForQuery implements wire.SessionHooks.
func (s *session) ReadyForQuery(status byte) {
	s.unitStatus, s.early = 0, 0
	s.inTxn.Store(status != 'I')
	if status == 'I' {
		if s.labelLocal {
			s.label, s.labelLocal = "", false
		}
		s.consEnd()
		s.tx = txState{}
		s.resetAborted()
	} else if status == 'T' && !s.tx.active {
		s.tx.active = true
	}
}

// Close implements wire.SessionHooks.
func (s *session) Close() {
	s.consEnd()
	s.h.forget(s)
}

// oidArray reads an oid[] in PostgreSQL's text form ("{23,701}").
func oidArray(text string) ([]uint32, bool) {
	parts, ok := analysis.TextArray(text)
	if !ok {
		return nil, false
	}
	oids := make([]uint32, len(parts))
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 32)
		if err != nil {
			return nil, false
		}
		oids[i] = uint32(n)
	}
	return oids, true
}
