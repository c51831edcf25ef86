package wire

import (
	"sync"

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
type unnamedTracker struct {
	mu    sync.Mutex
	queue []trackedMsg
	// stmt is the client's unnamed statement as PostgreSQL holds it, nil
	// if there is none, or if what became of it is unknown.
	stmt *pgproto3.Parse
}

type trackedKind uint8

const (
	trackedParse trackedKind = iota + 1
	trackedOther             // Bind, Describe, Execute, Close of something else
	trackedCloseUnnamed
	trackedSync
	trackedQuery // destroys the unnamed statement
)

type trackedMsg struct {
	kind  trackedKind
	parse *pgproto3.Parse // trackedParse
	// injected: sent by Ordo (BeginHere, SyncHere), not the client: its
	// reply is dropped; begin marks BeginHere's Execute of BEGIN (counted
	// by Backend.InjectedBegins). quiet: SyncHere's, whose error and
	// warning are dropped too.
	injected, begin, quiet bool
}

// sentInjected notes an injected BEGIN's messages: Parse, Bind, Execute
// and two Closes, in that order; quiet for SyncHere's, else BeginHere's.
func (u *unnamedTracker) sentInjected(quiet bool) {
	m := trackedMsg{kind: trackedOther, injected: true, quiet: quiet}
	exec := m
	exec.begin = !quiet
	u.mu.Lock()
	u.queue = append(u.queue, m, m, exec, m, m)
	u.mu.Unlock()
}

// answered reports whether every message sent has had its reply.
func (u *unnamedTracker) answered() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.queue) == 0
}

// quietFirst reports whether the next reply answers a message of
// SyncHere's.
func (u *unnamedTracker) quietFirst() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.queue) > 0 && u.queue[0].quiet
}

// sent notes a message sent to PostgreSQL for the client.
func (u *unnamedTracker) sent(msg pgproto3.FrontendMessage) {
	var m trackedMsg
	switch x := msg.(type) {
	case *pgproto3.Parse:
		m = trackedMsg{kind: trackedParse, parse: &pgproto3.Parse{Name: x.Name, Query: x.Query, ParameterOIDs: append([]uint32(nil), x.ParameterOIDs...)}}
	case *pgproto3.Close:
		m.kind = trackedOther
		if x.ObjectType == 'S' && x.Name == "" {
			m.kind = trackedCloseUnnamed
		}
	case *pgproto3.Bind, *pgproto3.Describe, *pgproto3.Execute:
		m.kind = trackedOther
	case *pgproto3.Sync, *pgproto3.FunctionCall:
		m.kind = trackedSync
	case *pgproto3.Query:
		m.kind = trackedQuery
	default:
		return // no reply of its own (Flush, COPY data)
	}
	u.mu.Lock()
	u.queue = append(u.queue, m)
	u.mu.Unlock()
}

// reply follows one message of PostgreSQL's replies to the client's
// messages. drop: it answers a message Ordo injected (BeginHere), and
// began: it is the CommandComplete of its BEGIN.
func (u *unnamedTracker) reply(msg pgproto3.BackendMessage) (drop, began bool) {
	final := false
	switch msg.(type) {
	case *pgproto3.ParseComplete, *pgproto3.BindComplete, *pgproto3.RowDescription, *pgproto3.NoData,
		*pgproto3.CommandComplete, *pgproto3.EmptyQueryResponse, *pgproto3.PortalSuspended, *pgproto3.CloseComplete:
		final = true
	case *pgproto3.ErrorResponse, *pgproto3.ReadyForQuery:
	default:
		return false, false
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.queue) == 0 {
		return false, false
	}
	front := u.queue[0]
	switch {
	case front.kind == trackedQuery:
		// A simple Query's replies end with its ReadyForQuery.
		if _, ok := msg.(*pgproto3.ReadyForQuery); ok {
			u.queue = u.queue[1:]
			u.stmt = nil
		}
	case front.kind == trackedSync:
		if _, ok := msg.(*pgproto3.ReadyForQuery); ok {
			u.queue = u.queue[1:]
		} else {
			u.lost()
		}
	case final:
		u.queue = u.queue[1:]
		if front.injected {
			return true, front.begin
		}
		switch front.kind {
		case trackedParse:
			if front.parse.Name == "" {
				u.stmt = front.parse
			}
		case trackedCloseUnnamed:
			u.stmt = nil
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
					u.queue = u.queue[i+1:]
					return false, false
				}
			}
			u.lost()
			return false, false
		}
		// An ErrorResponse: the front message failed (a failed Parse of
		// the unnamed statement has dropped the old one), and the rest
		// up to the Sync is skipped. SyncHere's BEGIN fails in a failed
		// block: the client does not see that.
		if front.kind == trackedParse && front.parse.Name == "" {
			u.stmt = nil
		}
		u.queue = u.queue[1:]
		for len(u.queue) > 0 && u.queue[0].kind != trackedSync && u.queue[0].kind != trackedQuery {
			u.queue = u.queue[1:]
		}
		if front.quiet {
			return true, false
		}
	}
	return false, false
}

// lost forgets what is known: the replies did not match the messages.
func (u *unnamedTracker) lost() {
	u.queue = u.queue[:0]
	u.stmt = nil
}

// current returns the client's unnamed statement, if it is known to
// exist.
func (u *unnamedTracker) current() *pgproto3.Parse {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.stmt
}
