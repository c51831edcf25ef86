package session

import (
	"context"
	"errors"
	"testing"
	"time"

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

// TestBruteForceEndsTheToldWait: a transaction chosen for a brute-force
// abort while a statement of it waits for this node's told commits
// (inside its hook, where the wire layer cannot roll it back) stops
// waiting and fails with the brute-force error; the session's next
// transaction waits again.
func TestBruteForceEndsTheToldWait(t *testing.T) {
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
	s.aborted.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.awaitTold(ctx); errors.Is(err, errBruteForce) || err == nil {
		t.Errorf("the next transaction's wait: %v, want it to wait until its deadline", err)
	}
}
