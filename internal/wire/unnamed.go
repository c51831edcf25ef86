package wire

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgproto3"
)

// unnamedTracker follows the replies to the client's messages (and to the
// messages Ordo injects among them, whose replies it recognizes by their
// place alone) and the client's unnamed prepared statement, so that
// a hook's Exec, whose simple Query makes PostgreSQL destroy it, leaves
// it as the client knew it: nothing Ordo sends on a client's backend may
// change state the client can observe.
//
// PostgreSQL answers the messages of a connection in order, each
// extended-protocol message with one final reply (ParseComplete,
// BindComplete, RowDescription or NoData, CommandComplete,
// EmptyQueryResponse or PortalSuspended, CloseComplete) or an
// ErrorResponse, after which it skips every message up to the Sync. The
// session goroutine queues each message it sends for the client; the
// backend goroutine takes them off as their replies arrive, and so knows
// which Parse of the unnamed statement succeeded, failed (which drops the
// old one too) or was skipped (which leaves it), and when a Close or a
// simple Query destroyed it.
//
// It follows the client's named statements the same way: a Parse that
// failed (because the name exists, say) or was skipped leaves what the
// name held, and so does a skipped Close. SQL's PREPARE, DEALLOCATE and
// DISCARD change them too, which it follows by their tags (sqlNames):
// after a PREPARE, a name it does not hold may be held (and after a
// DEALLOCATE then a PREPARE, any name may hold anything), until the
// session reads them from PostgreSQL (learnNamed).
type unnamedTracker struct {
	// nextFrees: the names the DEALLOCATEs of the client's Query of text
	// nextFreesSQL, sent next, free, in order (Backend.QueryFrees).
	nextFrees    []string
	nextFreesSQL string
	mu           sync.Mutex
	queue        []trackedMsg
	// spare is the array queue last grew into, if it holds at most
	// spareMax entries: an empty queue starts again at its beginning
	// (replies pop the queue from its front, so without it every unit
	// reallocated it as it grew). Popped entries are zeroed (popFront),
	// so it holds nothing.
	spare []trackedMsg
	// stmt is the client's unnamed statement as PostgreSQL holds it, nil
	// if there is none, or if what became of it is unknown; stmtClient
	// is the text the client sent for it where Ordo sent another
	// (Statement.Rewrite), else "".
	stmt       *pgproto3.Parse
	stmtClient string
	// named holds the client's named statements PostgreSQL is known to
	// hold; namedUnsure: a name not in it may be held too.
	named       map[string]heldStatement
	namedUnsure bool
	// parsed holds, by name, the last Parse of the client's PostgreSQL
	// accepted (until a Close of it was), kept when named is forgotten:
	// learnNamed takes its types for a statement PostgreSQL still holds
	// with its text.
	parsed map[string]heldStatement
	// lastExecute: the last ErrorResponse followed answered an Execute,
	// and the next message is a Sync (PostgreSQL skipped nothing).
	lastExecute bool
	// seq numbers the messages queued (trackedMsg.seq); copyIn is the
	// seq of the last Execute answered by CopyInResponse; unsure: what
	// became of the messages up to it is unknown (lost).
	seq, copyIn, unsure uint64
	// nextNotice is the edit for the client's next Query or Bind sent
	// (taken by sentAs), portalNotices those of portals bound with one,
	// for their next Execute. Session goroutine only, but for
	// sentAs's taking it under mu.
	nextNotice    *noticeEdit
	portalNotices map[string]*noticeEdit
	// anyPortalNotice: portalNotices may hold one (transactionEnded
	// looks at it without mu, once per transaction).
	anyPortalNotice atomic.Bool
	// showPortals: portals bound to a statement that answers a SHOW
	// (ShowMarker), whose every Execute completes with the tag SHOW, a
	// later one too (the rest of a portal suspended after its row, or
	// one run to its end).
	showPortals map[string]bool
}

type trackedKind uint8

const (
	trackedParse trackedKind = iota + 1
	trackedOther             // Bind, Describe, Execute, Close of something else
	trackedCloseUnnamed
	trackedSync
	trackedQuery // destroys the unnamed statement
	trackedCloseNamed
	trackedExecute
)

type trackedMsg struct {
	kind  trackedKind
	parse *pgproto3.Parse // trackedParse
	// name: trackedCloseNamed's statement.
	name string
	// client: the text the client sent for a Parse Ordo rewrote.
	client string
	// injected: sent by Ordo (BeginHere, SyncHere), not the client: its
	// reply is dropped; begin marks BeginHere's Execute of BEGIN (counted
	// by Backend.InjectedBegins). quiet: SyncHere's, whose error and
	// warning are dropped too.
	injected, begin, quiet bool
	seq                    uint64
	// bind: a Bind of stmt into portal; an Execute's portal.
	bind         bool
	portal, stmt string
	// frees: a Query's, the names its DEALLOCATEs still to be answered
	// free, in order (sqlNames).
	frees []string
	// notice: a Query's or an Execute's warning edit (Backend.Warn,
	// Unwarn).
	notice *noticeEdit
}

// noticeEdit is what Backend.Warn and Unwarn ask of one statement's
// replies: add goes to the client before its CommandComplete, and
// PostgreSQL's warning with code drop and message dropMsg is dropped.
type noticeEdit struct {
	add           *pgproto3.NoticeResponse
	drop, dropMsg string
	from          uint64 // the number of the Query or Bind it was asked for
}

// sentInjected notes an injected statement's messages: two Closes, Parse,
// Bind, Execute and two Closes, in that order; quiet for SyncHere's BEGIN,
// begin for BeginHere's (else SetHere's statement).
func (u *unnamedTracker) sentInjected(quiet, begin bool) {
	m := trackedMsg{kind: trackedOther, injected: true, quiet: quiet}
	exec := m
	exec.begin = begin
	u.mu.Lock()
	u.push(m, m, m, m, exec, m, m)
	u.mu.Unlock()
}

// sentInjectedParse notes ParseHere's Parse of the unnamed statement.
func (u *unnamedTracker) sentInjectedParse(p *pgproto3.Parse) {
	u.mu.Lock()
	u.push(trackedMsg{kind: trackedParse, parse: &pgproto3.Parse{Query: p.Query, ParameterOIDs: append([]uint32(nil), p.ParameterOIDs...)}, injected: true})
	u.mu.Unlock()
}

// sentInjectedCloses notes Ordo's Close of the unnamed statement and
// portal before a refused Query (PostgreSQL drops both at a Query): their
// replies are dropped.
func (u *unnamedTracker) sentInjectedCloses() {
	u.mu.Lock()
	u.push(trackedMsg{kind: trackedCloseUnnamed, injected: true}, trackedMsg{kind: trackedOther, injected: true})
	u.mu.Unlock()
}

// noteShowPortal notes what a Bind that succeeded (bind) put in its
// portal: a statement that answers a SHOW, or another. u.mu is held.
func (u *unnamedTracker) noteShowPortal(bind trackedMsg) {
	held, ok := u.named[bind.stmt]
	sql := held.sql
	if bind.stmt == "" {
		ok = u.stmt != nil
		if ok {
			sql = u.stmt.Query
		}
	}
	if ok && strings.Contains(sql, ShowMarkerSQL) {
		if u.showPortals == nil {
			u.showPortals = make(map[string]bool)
		}
		u.showPortals[bind.portal] = true
	} else {
		delete(u.showPortals, bind.portal)
	}
}

// ignoredSyncs forgets the last n Syncs sent: they followed the Execute
// of a COPY FROM STDIN, and PostgreSQL ignores Sync in that mode (only
// Syncs and Flushes can follow that Execute). Left queued, each would take
// the place of a later message's reply, and what followed would be lost
// (an injected BEGIN's replies relayed).
func (u *unnamedTracker) ignoredSyncs(n int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for i := len(u.queue) - 1; i >= 0 && n > 0; i-- {
		if u.queue[i].kind == trackedSync {
			u.queue = append(u.queue[:i], u.queue[i+1:]...)
			u.queue[:len(u.queue)+1][len(u.queue)] = trackedMsg{} // (the last one's copy)
			n--
		}
	}
}

// answered reports whether every message sent has had its reply.
func (u *unnamedTracker) answered() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.queue) == 0
}

// refusedExecute notes that an Execute of portal is refused (sent as a
// rejection): its warning edit, if any, is the rejection's (nextNotice).
func (u *unnamedTracker) refusedExecute(portal string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if e, ok := u.portalNotices[portal]; ok {
		u.nextNotice = e
		delete(u.portalNotices, portal)
	}
}

// executeNotice makes e, asked for by PortalWatcher.Executed, the
// warning edit of the Execute of portal about to be sent.
func (u *unnamedTracker) executeNotice(portal string, e *noticeEdit) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.portalNotices == nil {
		u.portalNotices = make(map[string]*noticeEdit)
	}
	e.from = u.seq // (decided after what was sent so far)
	u.portalNotices[portal] = e
	u.anyPortalNotice.Store(true)
}

// dropNotice answers Backend.Unwarn for m, a notice of PostgreSQL's:
// whether it is the warning Unwarn named, for the statement in front.
func (u *unnamedTracker) dropNotice(m *pgproto3.NoticeResponse) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.queue) == 0 || u.queue[0].notice == nil {
		return false
	}
	e := u.queue[0].notice
	if e.drop != "" && m.Code == e.drop && m.Message == e.dropMsg {
		e.drop = "" // (once)
		return true
	}
	return false
}

// injectedFirst reports whether the next reply answers a message Ordo
// injected (BeginHere, SetHere, ParseHere, SyncHere's BEGIN).
func (u *unnamedTracker) injectedFirst() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.queue) > 0 && u.queue[0].injected
}

// sent notes a message sent to PostgreSQL for the client, and returns its
// number (0 for a message that has no reply of its own).
func (u *unnamedTracker) sent(msg pgproto3.FrontendMessage) uint64 { return u.sentAs(msg, "") }

// sentAs is sent for a message Ordo rewrote: client is the text the
// client sent in a Parse (current reports it).
func (u *unnamedTracker) sentAs(msg pgproto3.FrontendMessage, client string) uint64 {
	var m trackedMsg
	switch x := msg.(type) {
	case *pgproto3.Parse:
		m = trackedMsg{kind: trackedParse, parse: &pgproto3.Parse{Name: x.Name, Query: x.Query, ParameterOIDs: append([]uint32(nil), x.ParameterOIDs...)}, client: client}
	case *pgproto3.Close:
		m.kind = trackedOther
		if x.ObjectType == 'S' && x.Name == "" {
			m.kind = trackedCloseUnnamed
		} else if x.ObjectType == 'S' {
			m = trackedMsg{kind: trackedCloseNamed, name: x.Name}
		}
	case *pgproto3.Bind:
		m = trackedMsg{kind: trackedOther, bind: true, portal: x.DestinationPortal, stmt: x.PreparedStatement}
	case *pgproto3.Describe:
		m.kind = trackedOther
	case *pgproto3.Execute:
		m = trackedMsg{kind: trackedExecute, portal: x.Portal}
	case *pgproto3.Sync, *pgproto3.FunctionCall:
		m.kind = trackedSync
	case *pgproto3.Query:
		m = trackedMsg{kind: trackedQuery}
	default:
		return 0 // no reply of its own (Flush, COPY data)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if q, ok := msg.(*pgproto3.Query); ok && u.nextFrees != nil && q.String == u.nextFreesSQL {
		m.frees = u.nextFrees
	}
	u.nextFrees, u.nextFreesSQL = nil, ""
	e := u.nextNotice
	switch {
	case m.kind == trackedQuery:
		m.notice, u.nextNotice = e, nil
	case m.bind && e != nil:
		if u.portalNotices == nil {
			u.portalNotices = make(map[string]*noticeEdit)
		}
		u.portalNotices[m.portal], u.nextNotice = e, nil
		u.anyPortalNotice.Store(true)
	case m.bind && len(u.portalNotices) > 0:
		delete(u.portalNotices, m.portal)
	case m.kind == trackedExecute && len(u.portalNotices) > 0:
		m.notice = u.portalNotices[m.portal]
		delete(u.portalNotices, m.portal)
	}
	u.push(m)
	if e != nil && u.nextNotice == nil {
		e.from = u.seq // (taken by this Query or Bind)
	}
	return u.seq
}

// queryFrees notes what the DEALLOCATEs of the Query of text sql, the
// next message sent, free (Backend.QueryFrees).
func (u *unnamedTracker) queryFrees(sql string, names []string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.nextFrees, u.nextFreesSQL = names, sql
}

// push queues messages, numbering them. u.mu is held.
func (u *unnamedTracker) push(msgs ...trackedMsg) {
	if len(u.queue) == 0 {
		u.queue = u.spare[:0] // (nil after a queue larger than spareMax)
	}
	c := cap(u.queue)
	for _, m := range msgs {
		u.seq++
		m.seq = u.seq
		u.queue = append(u.queue, m)
	}
	if cap(u.queue) != c {
		// A new array, queue at its beginning: the old one, with the
		// copies of the live messages it keeps, is dropped.
		u.spare = nil
		if cap(u.queue) <= spareMax {
			u.spare = u.queue[:0]
		}
	}
}

// spareMax bounds the array an empty queue starts from again: one
// deep pipeline must not keep a large array for the connection's life.
const spareMax = 64

// popFront drops the first n queued messages, zeroed first so the array
// keeps nothing they pointed to. u.mu is held.
func (u *unnamedTracker) popFront(n int) {
	clear(u.queue[:n])
	u.queue = u.queue[n:]
}

// copyFate tells what became of the Execute numbered seq: decided once
// PostgreSQL answered it (or skipped it), started if it started a COPY
// FROM STDIN. If the tracker lost track of the replies, it answers
// started: the caller then goes on as if PostgreSQL waited for the data.
// Seq 0 is no Execute: nothing started.
func (u *unnamedTracker) copyFate(seq uint64) (started, decided bool) {
	if seq == 0 {
		return false, true
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	switch {
	case u.copyIn == seq:
		return true, true
	case seq <= u.unsure:
		return true, true
	case len(u.queue) > 0 && u.queue[0].seq <= seq:
		return false, false
	}
	return false, true
}

// reply follows one message of PostgreSQL's replies to the client's
// messages. drop: it answers a message Ordo injected (BeginHere), and
// began: it is the CommandComplete of its BEGIN; show: it is the
// CommandComplete of an Execute of a rewritten SHOW's portal.
func (u *unnamedTracker) reply(msg pgproto3.BackendMessage) (drop, began, show bool, warn *pgproto3.NoticeResponse) {
	final := false
	switch msg.(type) {
	case *pgproto3.ParseComplete, *pgproto3.BindComplete, *pgproto3.RowDescription, *pgproto3.NoData,
		*pgproto3.CommandComplete, *pgproto3.EmptyQueryResponse, *pgproto3.PortalSuspended, *pgproto3.CloseComplete:
		final = true
	case *pgproto3.ErrorResponse, *pgproto3.ReadyForQuery:
	case *pgproto3.CopyInResponse:
		// It answers the Execute in front (a Query's COPY answers its
		// Query, which stays in front until its ReadyForQuery).
		u.mu.Lock()
		if len(u.queue) > 0 && u.queue[0].kind == trackedExecute {
			u.copyIn = u.queue[0].seq
		}
		u.mu.Unlock()
		return false, false, false, nil
	default:
		return false, false, false, nil
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if _, failed := msg.(*pgproto3.ErrorResponse); failed {
		u.lastExecute = false // (set below if it answers an Execute)
	}
	if cc, ok := msg.(*pgproto3.CommandComplete); ok {
		if len(u.queue) > 0 && txnTag(cc.CommandTag) {
			u.staleNotices(u.queue[0].seq)
		}
		var frees *[]string
		if len(u.queue) > 0 && u.queue[0].kind == trackedQuery {
			frees = &u.queue[0].frees
		}
		u.sqlNames(cc.CommandTag, frees)
	}
	if r, ok := msg.(*pgproto3.ReadyForQuery); ok && r.TxStatus == 'I' {
		clear(u.showPortals) // portals end with their transaction
	}
	if len(u.queue) == 0 {
		return false, false, false, nil
	}
	front := u.queue[0]
	if front.notice != nil && front.notice.add != nil {
		switch msg.(type) {
		case *pgproto3.CommandComplete, *pgproto3.ErrorResponse:
			// Backend.Warn's, before the statement's completion or
			// error (PostgreSQL's warnings of this kind come before
			// its checks that fail).
			warn, front.notice.add = front.notice.add, nil
		}
	}
	switch {
	case front.kind == trackedQuery:
		// A simple Query's replies end with its ReadyForQuery.
		if _, ok := msg.(*pgproto3.ReadyForQuery); ok {
			u.popFront(1)
			u.stmt = nil
		}
	case front.kind == trackedSync:
		switch msg.(type) {
		case *pgproto3.ReadyForQuery:
			u.popFront(1)
		case *pgproto3.ErrorResponse:
			// It answers the Sync or FunctionCall itself: a function
			// call that failed (any, in a failed block), or the commit
			// of the implicit transaction a Sync ends (a deferred
			// constraint). Its ReadyForQuery follows.
		default:
			u.lost()
		}
	case final:
		u.popFront(1)
		if front.kind == trackedCloseUnnamed {
			u.stmt = nil // the client's, or Ordo's Close of it for a refused Query
		}
		if front.injected {
			if front.kind == trackedParse {
				u.stmt, u.stmtClient = front.parse, "" // ParseHere's
			}
			return true, front.begin, false, nil
		}
		if _, ok := msg.(*pgproto3.BindComplete); ok && front.bind {
			u.noteShowPortal(front)
		}
		if _, ok := msg.(*pgproto3.CommandComplete); ok && front.kind == trackedExecute {
			show = u.showPortals[front.portal]
		}
		switch front.kind {
		case trackedParse:
			if front.parse.Name == "" {
				u.stmt, u.stmtClient = front.parse, front.client
			} else {
				if u.named == nil {
					u.named = make(map[string]heldStatement)
				}
				if u.parsed == nil {
					u.parsed = make(map[string]heldStatement)
				}
				held := heldStatement{sql: front.parse.Query, types: front.parse.ParameterOIDs, typed: true}
				u.named[front.parse.Name], u.parsed[front.parse.Name] = held, held
			}
		case trackedCloseUnnamed:
			u.stmt = nil
		case trackedCloseNamed:
			delete(u.named, front.name)
			delete(u.parsed, front.name)
		}
	default:
		if _, ok := msg.(*pgproto3.ReadyForQuery); ok {
			// The messages before the Sync were skipped after an error
			// that was answered before they were queued (SyncHere waits
			// for the replies so far, then sends its own).
			for i, m := range u.queue {
				if m.kind == trackedQuery {
					break
				}
				if m.kind == trackedSync {
					u.popFront(i + 1)
					return false, false, false, nil
				}
			}
			u.lost()
			return false, false, false, nil
		}
		// An ErrorResponse: the front message failed (a failed Parse of
		// the unnamed statement has dropped the old one), and the rest
		// up to the Sync is skipped. SyncHere's BEGIN fails in a failed
		// block: the client does not see that.
		if front.kind == trackedParse && front.parse.Name == "" {
			u.stmt = nil
		}
		u.popFront(1)
		u.lastExecute = front.kind == trackedExecute && len(u.queue) > 0 && u.queue[0].kind == trackedSync
		for len(u.queue) > 0 && u.queue[0].kind != trackedSync && u.queue[0].kind != trackedQuery {
			u.popFront(1)
		}
		if front.quiet {
			return true, false, false, nil
		}
	}
	return false, false, show, warn
}

// failedExecuteLast reports whether the last ErrorResponse of the
// client's messages answered an Execute followed only by a Sync.
func (u *unnamedTracker) failedExecuteLast() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.lastExecute
}

// lost forgets what is known: the replies did not match the messages.
func (u *unnamedTracker) lost() {
	u.unsure = u.seq
	clear(u.queue)
	u.queue = u.queue[:0]
	u.lastExecute = false
	u.stmt = nil
	u.forgetNamed()
	clear(u.parsed)
	clear(u.showPortals)
	clear(u.portalNotices)
}

// staleNotices forgets the warnings decided at a Bind before the message
// numbered seq, transaction control that began or ended a transaction,
// for Executes after it: the warning depended on the transaction as it
// was at the Bind, PostgreSQL's on the transaction at the Execute.
// u.mu is held.
func (u *unnamedTracker) staleNotices(seq uint64) {
	for p, e := range u.portalNotices {
		if e.from < seq {
			delete(u.portalNotices, p)
		}
	}
	for i := 1; i < len(u.queue); i++ {
		if e := u.queue[i].notice; e != nil && e.from < seq {
			u.queue[i].notice = nil
		}
	}
}

// txnTag reports whether tag is a CommandComplete's of transaction
// control that begins or ends a transaction (ROLLBACK TO SAVEPOINT's
// says ROLLBACK too).
func txnTag(tag []byte) bool {
	switch string(tag) {
	case "BEGIN", "START TRANSACTION", "COMMIT", "ROLLBACK":
		return true
	}
	return false
}

// transactionEnded forgets the warnings of portals, which ended with
// their transaction (at every ReadyForQuery 'I', relayed or an Exec's).
func (u *unnamedTracker) transactionEnded() {
	if !u.anyPortalNotice.Load() {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	clear(u.portalNotices)
	u.anyPortalNotice.Store(false)
}

func (u *unnamedTracker) forgetNamed() {
	clear(u.named)
	u.namedUnsure = true
}

// namedStatement returns the text PostgreSQL holds under a named
// statement's name: exists false if it holds none, known false if the
// tracker cannot tell.
func (u *unnamedTracker) namedStatement(name string) (sql string, exists, known bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if held, ok := u.named[name]; ok {
		return held.sql, true, true
	}
	return "", false, !u.namedUnsure
}

// lastParsed returns the text of the client's last Parse of name that
// PostgreSQL accepted, until a Close of it: what the name holds unless
// SQL's DEALLOCATE or DISCARD freed it since (or its PREPARE took it).
func (u *unnamedTracker) lastParsed(name string) (string, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	held, ok := u.parsed[name]
	return held.sql, ok
}

// heldStatement is a named statement PostgreSQL holds: its text, and the
// parameter types its Parse declared (typed false: not known).
type heldStatement struct {
	sql   string
	types []uint32
	typed bool
}

// declaredTypes returns the text PostgreSQL holds as the client's
// statement name ("" the unnamed one) and the parameter types its Parse
// declared (0: left to PostgreSQL); ok false if the tracker cannot tell
// either. Exact, like namedStatement and current, for a name not parsed
// or closed since the replies so far.
func (u *unnamedTracker) declaredTypes(name string) (sql string, types []uint32, ok bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if name == "" {
		if u.stmt == nil {
			return "", nil, false
		}
		return u.stmt.Query, u.stmt.ParameterOIDs, true
	}
	held, ok := u.named[name]
	if !ok || !held.typed {
		return "", nil, false
	}
	return held.sql, held.types, true
}

// namedKnown reports whether every name is known (namedStatement).
func (u *unnamedTracker) namedKnown() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return !u.namedUnsure
}

// learnNamed replaces what the tracker knows of the client's named
// statements with names (read from PostgreSQL): every name is known
// again. A statement a Parse of the client's made, with the text the
// tracker saw it accepted with, keeps the types that Parse declared (0
// for those left to PostgreSQL); the others take those of types (what
// PostgreSQL resolved), if there. fromSQL: the names SQL's PREPARE made.
// Only while no message of the client's is awaiting its reply.
func (u *unnamedTracker) learnNamed(names, fromSQL map[string]string, types map[string][]uint32) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.named = make(map[string]heldStatement, len(names))
	for name, sql := range names {
		if _, prepared := fromSQL[name]; !prepared && u.parsed[name].typed && u.parsed[name].sql == sql {
			u.named[name] = u.parsed[name]
			continue
		}
		ts, typed := types[name]
		u.named[name] = heldStatement{sql: sql, types: ts, typed: typed}
	}
	u.namedUnsure = false
}

// sqlNames follows what SQL's statements on prepared statements did, by
// the tag of their CommandComplete (a simple Query's, or an Execute's):
// DEALLOCATE ALL and DISCARD ALL drop every named statement, so none is
// held; PREPARE creates one under a name and with a text the tracker
// does not know, so a name it does not hold may be held. DEALLOCATE of
// one name does not say which: no name is known after it (the session
// reads them again), unless it answers a Query whose DEALLOCATEs the
// session named (frees: QueryFrees, taken in order). u.mu is held.
func (u *unnamedTracker) sqlNames(tag []byte, frees *[]string) {
	switch string(tag) {
	case "DEALLOCATE ALL", "DISCARD ALL":
		clear(u.named)
		u.namedUnsure = false
	case "DEALLOCATE":
		if frees != nil && len(*frees) > 0 {
			delete(u.named, (*frees)[0])
			*frees = (*frees)[1:]
			return
		}
		// Its tag does not say which name it freed: any name held may
		// be gone (kept, a Bind of a deallocated COMMIT's name was
		// taken for the COMMIT, and Ordo committed a block PostgreSQL
		// then failed: session fuzzer, seed 1796181147388393039).
		u.forgetNamed()
	case "PREPARE":
		u.namedUnsure = true
	case "DO", "CALL":
		// Its dynamic SQL may have run a DEALLOCATE and a PREPARE of
		// any name, which no tag tells.
		u.forgetNamed()
	}
}

// current returns the client's unnamed statement, if it is known to
// exist, and the text the client sent for it if Ordo sent another.
func (u *unnamedTracker) current() (*pgproto3.Parse, string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.stmt == nil {
		return nil, ""
	}
	return u.stmt, u.stmtClient
}
