package wire

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgproto3"
)

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

// SyncHere implements Backend. It runs on the session goroutine, inside a
// Statement call (hookMu held).
//
// The Sync is Ordo's: its ReadyForQuery is not relayed (quietReady), and
// the hooks' ReadyForQuery runs for it before SyncHere returns. If a
// message before it failed, PostgreSQL skipped the rest of the batch up to
// that Sync and now runs messages again; a silent rejection (a Describe of
// a portal that does not exist, whose error the client does not see) makes
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
	ss.quietReady.Store(true)
	ss.outstanding.Add(1)
	ss.sendTracked(&pgproto3.Sync{})
	if err := ss.flushServer(); err != nil {
		return false, fmt.Errorf("%w: %w", ErrSessionClosed, err)
	}
	if err := ss.waitIdle(ctx); err != nil {
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
