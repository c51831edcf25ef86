package wire

import "github.com/jackc/pgx/v5/pgproto3"

// injectedName names the statement and portal of BeginHere's BEGIN.
const injectedName = "ordo_begin"

// BeginHere implements Backend. It runs on the session goroutine, inside a
// Statement call: what it sends goes before the message being reported.
//
// The BEGIN is parsed, bound, executed and closed under a name of its own
// (the client's unnamed statement and portal stay as they are). Its five
// replies arrive in their place among the client's, unless an earlier
// message of the batch failed, and then none does (PostgreSQL skips to the
// Sync); unnamedTracker knows which replies are theirs and drops them.
func (ss *session) BeginHere() {
	ss.unnamed.sentInjected()
	ss.sendServer(&pgproto3.Parse{Name: injectedName, Query: "BEGIN"})
	ss.sendServer(&pgproto3.Bind{DestinationPortal: injectedName, PreparedStatement: injectedName})
	ss.sendServer(&pgproto3.Execute{Portal: injectedName})
	ss.sendServer(&pgproto3.Close{ObjectType: 'P', Name: injectedName})
	ss.sendServer(&pgproto3.Close{ObjectType: 'S', Name: injectedName})
}

// BeginsSinceInjected implements Backend.
func (ss *session) BeginsSinceInjected() int64 { return ss.beginsSinceInjected.Load() }

// InjectedBegins implements Backend.
func (ss *session) InjectedBegins() int64 { return ss.injectedBegins.Load() }

// Begins implements Backend.
func (ss *session) Begins() int64 { return ss.begins.Load() }

// Unnamed implements Backend.
func (ss *session) Unnamed() (string, bool) {
	if p := ss.unnamed.current(); p != nil {
		return p.Query, true
	}
	return "", false
}
