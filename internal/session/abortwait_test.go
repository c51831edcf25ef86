package session

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ordo-db/ordo/internal/termination"
	"github.com/ordo-db/ordo/internal/wire"
)

// shutGate is a ToldAwaiter whose told commits never become visible: a
// wait ends only as its arguments end it.
type shutGate struct{}

func (shutGate) AwaitTold(ctx context.Context, canceled, aborted <-chan struct{}) error {
	select {
	case <-canceled:
		return termination.ErrClientCanceled
	case <-aborted:
		return termination.ErrBruteForced
	case <-ctx.Done():
		return ctx.Err()
	}
}

// abortable is a client backend that records the wire layer's Abort.
type abortable struct {
	wire.Backend
	aborts chan error
}

func (a abortable) Abort(err error) { a.aborts <- err }

// TestAbortWaitChannel checks the session's bookkeeping of the channel a
// wait for this node's told commits ends on (a unit test, with a gate
// that never opens and a fake client backend: the wait and the abort
// themselves are the replica's and the node's). A transaction chosen for
// a brute-force abort while a statement of it waits (inside its hook,
// where the wire layer cannot roll it back) stops waiting and fails with
// the brute-force error; the session's next transaction waits again.
func TestAbortWaitChannel(t *testing.T) {
	h := &Hooks{told: shutGate{}, byPID: map[uint32]*session{}, m: newMetrics(nil)}
	be := abortable{aborts: make(chan error, 4)}
	s := &session{h: h, be: be, pid: 7}
	h.byPID[7] = s
	s.inTxn.Store(true)

	done := make(chan error, 1)
	go func() { done <- s.awaitTold(context.Background()) }()
	select {
	case err := <-done:
		t.Fatalf("returned before the abort: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	if unknown := h.Abort([]int{7}, false); len(unknown) != 0 {
		t.Fatalf("unknown pids %v", unknown)
	}
	select {
	case err := <-done:
		if !errors.Is(err, errBruteForce) {
			t.Fatalf("wait ended with %v, want the brute-force error", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the abort did not end the wait")
	}
	if err := <-be.aborts; !errors.Is(err, errBruteForce) {
		t.Errorf("wire layer aborted with %v", err)
	}

	// A statement of the same aborted transaction does not wait.
	if err := s.awaitTold(context.Background()); !errors.Is(err, errBruteForce) {
		t.Errorf("again in the aborted transaction: %v", err)
	}

	// The next transaction (ReadyForQuery 'I' reset aborted) waits again.
	s.resetAborted()
	if err := waitBriefly(s); err != nil {
		t.Errorf("the next transaction's wait: %v, want it to wait until its deadline", err)
	}
	// An abort whose transaction ended (reset) before its wake came: the
	// wake does not end the next transaction's wait.
	s.aborted.Store(true) // Hooks.Abort's first step, for the last transaction
	s.resetAborted()      // which ended
	next := s.abortWait() // the next one waits
	s.wakeAborted()       // the abort's last step, late
	select {
	case <-next:
		t.Error("a late wake ended the next transaction's wait")
	default:
	}

	// Aborted before any wait began: the wait ends at once.
	s2 := &session{h: h, be: be, pid: 8}
	h.byPID[8] = s2
	s2.inTxn.Store(true)
	h.Abort([]int{8}, false)
	<-be.aborts
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s2.awaitTold(ctx); !errors.Is(err, errBruteForce) {
		t.Errorf("aborted before the wait: %v", err)
	}

	// A blocked DDL's abort of a session outside any transaction (its
	// statement ended since): the session's wait goes on, and the
	// transaction its next unit begins does not inherit the abort.
	s3 := &session{h: h, be: be, pid: 9}
	h.byPID[9] = s3
	if err := waitBriefly(s3); err != nil { // (an earlier wait)
		t.Fatal(err)
	}
	h.Abort([]int{9}, true)
	<-be.aborts
	if err := waitBriefly(s3); err != nil {
		t.Errorf("wait outside a transaction after a DDL's abort: %v", err)
	}
}

// waitBriefly waits in awaitTold for 50 ms; nil if it waited them out.
func waitBriefly(s *session) error {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := s.awaitTold(ctx)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != codeQueryCanceled || errors.Is(err, errBruteForce) || ctx.Err() == nil {
		return fmt.Errorf("ended with %v", err)
	}
	return nil
}
