package session

import (
	"context"
	"errors"
	"testing"

	"github.com/ordo-db/ordo/internal/classes"
	"github.com/ordo-db/ordo/internal/termination"
	"github.com/ordo-db/ordo/internal/txn"
	"github.com/ordo-db/ordo/internal/wire"
)

// endRecorder is a cons engine that records the transactions whose
// classes a session releases (termination.ClassScheduler.End).
type endRecorder struct {
	termination.Protocol
	ended []txn.GID
}

func (e *endRecorder) Begin(context.Context, txn.GID, []txn.ClassRef) error { return nil }
func (e *endRecorder) End(gid txn.GID)                                      { e.ended = append(e.ended, gid) }

// deadBackend is a client backend whose connection is gone.
type deadBackend struct{ wire.Backend }

func (deadBackend) HoldReady() {}

func (deadBackend) Exec(context.Context, string, ...string) (*wire.Result, error) {
	return nil, errors.New("conn closed")
}

// TestBeginAheadThatFailsReleasesClasses: under cons, an autocommit
// statement's classes are granted before the BEGIN queued ahead of it is
// sent (wrapAhead, then consTake); if that BEGIN fails (PostgreSQL lost
// the backend in between: the safety matrix's cons/ddl/backend-kill), the
// forgotten transaction's classes must be released, or every transaction
// of a conflicting class waits for them for good.
func TestBeginAheadThatFailsReleasesClasses(t *testing.T) {
	rec := &endRecorder{}
	s := &session{
		h:  &Hooks{cfg: Config{Replica: rec, Classes: func() classes.Set { return classes.Set{} }}},
		be: deadBackend{},
	}
	s.wrapAhead()
	s.tx.cons.gid, s.tx.cons.held = "ordo_1_7", true // granted (consTake)
	if err := s.beginAhead(context.Background()); err == nil {
		t.Fatal("the BEGIN on a lost backend succeeded")
	}
	if len(rec.ended) != 1 || rec.ended[0] != "ordo_1_7" {
		t.Fatalf("classes released for %v, want ordo_1_7", rec.ended)
	}
	if s.tx.active || s.tx.cons.gid != "" {
		t.Fatalf("transaction kept: %+v", s.tx)
	}
}

// beginBackend is a client backend whose BEGIN succeeds.
type beginBackend struct{ wire.Backend }

func (beginBackend) Exec(context.Context, string, ...string) (*wire.Result, error) {
	return &wire.Result{Tags: []string{"BEGIN"}, TxStatus: 'T'}, nil
}
func (beginBackend) Begins() int64 { return 1 }

// TestRetryAttemptReleasesClasses: the block of an autocommit statement's
// next attempt (beginWrapped, for a retry) replaces the last attempt's,
// whose classes, if it took any (the cluster switched to cons under it),
// are released rather than forgotten.
func TestRetryAttemptReleasesClasses(t *testing.T) {
	rec := &endRecorder{}
	s := &session{
		h:  &Hooks{cfg: Config{Replica: rec, Classes: func() classes.Set { return classes.Set{} }}},
		be: beginBackend{},
	}
	s.tx.cons.gid, s.tx.cons.held = "ordo_1_8", true
	if err := s.beginWrapped(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(rec.ended) != 1 || rec.ended[0] != "ordo_1_8" {
		t.Fatalf("classes released for %v, want ordo_1_8", rec.ended)
	}
	if !s.tx.active || s.tx.cons.gid != "" {
		t.Fatalf("the new attempt's block: %+v", s.tx)
	}
}
