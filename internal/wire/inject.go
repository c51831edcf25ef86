package wire

import "github.com/jackc/pgx/v5/pgproto3"

// injectedName names the statement and portal of BeginHere's BEGIN.
const injectedName = "ordo_begin"

// BeginHere implements Backend. It runs on the session goroutine, inside a
// Statement call: what it sends goes before the message being reported.
//
// The BEGIN is parsed, bound, executed and closed under a name of its own
// (the client's unnamed statement and portal stay as they are). Its five
// replies arrive together, in order, unless an earlier message of the
// batch failed, and then none does (PostgreSQL skips to the Sync).
func (ss *session) BeginHere() {
	ss.injected.Add(1)
	ss.sendServer(&pgproto3.Parse{Name: injectedName, Query: "BEGIN"})
	ss.sendServer(&pgproto3.Bind{DestinationPortal: injectedName, PreparedStatement: injectedName})
	ss.sendServer(&pgproto3.Execute{Portal: injectedName})
	ss.sendServer(&pgproto3.Close{ObjectType: 'P', Name: injectedName})
	ss.sendServer(&pgproto3.Close{ObjectType: 'S', Name: injectedName})
}

// injectMatch recognizes the replies to BeginHere's messages among the
// client's: ParseComplete, BindComplete, CommandComplete "BEGIN", then two
// CloseCompletes. A ParseComplete and a BindComplete that may start that
// sequence are held until the CommandComplete shows whose they are. The
// client's own replies cannot form it: BeginHere is only called outside a
// transaction block, and a BEGIN the client sent earlier in the batch
// would have opened one.
type injectMatch struct {
	held   int // 0, 1 (a ParseComplete) or 2 (and a BindComplete)
	closes int // CloseCompletes still to drop
}

// matchInjected runs on the backend goroutine while injected > 0 and
// reports whether msg was consumed (held or dropped).
func (ss *session) matchInjected(msg pgproto3.BackendMessage) bool {
	m := &ss.inj
	if m.closes > 0 {
		if _, ok := msg.(*pgproto3.CloseComplete); ok {
			m.closes--
			if m.closes == 0 {
				ss.injected.Add(-1)
			}
			return true
		}
		m.closes = 0 // cannot happen: PostgreSQL answers them together
		ss.injected.Add(-1)
		return false
	}
	switch x := msg.(type) {
	case *pgproto3.ParseComplete:
		ss.releaseHeld()
		m.held = 1
		return true
	case *pgproto3.BindComplete:
		if m.held == 1 {
			m.held = 2
			return true
		}
	case *pgproto3.CommandComplete:
		if m.held == 2 && string(x.CommandTag) == "BEGIN" {
			m.held, m.closes = 0, 2
			return true
		}
	case *pgproto3.ReadyForQuery:
		// The batch ended: a BEGIN not seen was skipped after an error.
		ss.releaseHeld()
		ss.injected.Store(0)
		return false
	}
	ss.releaseHeld()
	return false
}

// releaseHeld relays the held replies: they were the client's.
func (ss *session) releaseHeld() {
	if ss.inj.held >= 1 {
		ss.sendClient(&pgproto3.ParseComplete{})
	}
	if ss.inj.held >= 2 {
		ss.sendClient(&pgproto3.BindComplete{})
	}
	ss.inj.held = 0
}
