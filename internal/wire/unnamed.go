package wire

import (
	"sync"

	"github.com/jackc/pgx/v5/pgproto3"
)

// unnamedTracker follows the client's unnamed prepared statement, so that
// a hook's Exec, whose simple Query makes PostgreSQL destroy it, leaves
// it as the client knew it: nothing Ordo sends on a client's backend may
// change state the client can observe.
//
// PostgreSQL answers the messages of a connection in order. The session
// goroutine queues each Parse and Sync (and Query) it sends for the
// client; the backend goroutine takes them off as their replies arrive:
// a ParseComplete answers the first queued Parse, an ErrorResponse fails
// it or skips every Parse queued before the next Sync, and a
// ReadyForQuery ends a Sync or Query.
type unnamedTracker struct {
	mu    sync.Mutex
	queue []trackedMsg
	// stmt is the client's unnamed statement as PostgreSQL holds it, nil
	// if there is none, or if what became of it is unknown.
	stmt *pgproto3.Parse
}

type trackedMsg struct {
	parse *pgproto3.Parse // nil: a Sync or a Query
	query bool            // a simple Query, which destroys the unnamed statement
}

// sentParse notes a Parse sent for the client.
func (u *unnamedTracker) sentParse(m *pgproto3.Parse) {
	cp := &pgproto3.Parse{Name: m.Name, Query: m.Query, ParameterOIDs: append([]uint32(nil), m.ParameterOIDs...)}
	u.mu.Lock()
	u.queue = append(u.queue, trackedMsg{parse: cp})
	u.mu.Unlock()
}

// sentSync notes a Sync (query false) or a Query sent for the client.
func (u *unnamedTracker) sentSync(query bool) {
	u.mu.Lock()
	u.queue = append(u.queue, trackedMsg{query: query})
	u.mu.Unlock()
}

// closed notes the client's Close of its unnamed statement.
func (u *unnamedTracker) closed() {
	u.mu.Lock()
	u.stmt = nil
	u.mu.Unlock()
}

// reply follows one message of PostgreSQL's replies to the client's
// messages.
func (u *unnamedTracker) reply(msg pgproto3.BackendMessage) {
	switch msg.(type) {
	case *pgproto3.ParseComplete, *pgproto3.ErrorResponse, *pgproto3.ReadyForQuery:
	default:
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	switch msg.(type) {
	case *pgproto3.ParseComplete:
		if len(u.queue) > 0 && u.queue[0].parse != nil {
			if u.queue[0].parse.Name == "" {
				u.stmt = u.queue[0].parse
			}
			u.queue = u.queue[1:]
		}
	case *pgproto3.ErrorResponse:
		// The first queued Parse failed, or the error was an earlier
		// message's and every Parse up to the Sync is skipped: which,
		// is not known here, so an unnamed one among them leaves the
		// unnamed statement unknown.
		for len(u.queue) > 0 && u.queue[0].parse != nil {
			if u.queue[0].parse.Name == "" {
				u.stmt = nil
			}
			u.queue = u.queue[1:]
		}
	case *pgproto3.ReadyForQuery:
		for len(u.queue) > 0 {
			m := u.queue[0]
			u.queue = u.queue[1:]
			if m.parse == nil {
				if m.query {
					u.stmt = nil
				}
				break
			}
		}
	}
}

// current returns the client's unnamed statement, if it is known to
// exist.
func (u *unnamedTracker) current() *pgproto3.Parse {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.stmt
}
