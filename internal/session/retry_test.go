package session

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ordo-db/ordo/internal/wire"
)

// TestConflictIsRetried: which errors of a terminated autocommit statement
// make it run again (retry.go).
func TestConflictIsRetried(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{errBruteForce, true},
		{fmt.Errorf("wrapped: %w", errBruteForce), true},
		{pgErr(codeSerializationFailure, "ordo: could not serialize access due to a concurrent update on another node"), true},
		{pgErr(codeSerializationFailure, "could not serialize access due to concurrent update"), true},
		{unordered{pgErr(codeSerializationFailure, "ordo: the transaction was rolled back: its commit was not ordered in time")}, false},
		{recorded{pgErr(codeSerializationFailure, "ordo: could not serialize access due to a concurrent update on another node")}, true},
		{pgErr(codeDeadlock, "deadlock detected"), true},
		{pgErr(codeResolutionUnknown, "ordo: the cluster did not confirm the commit in time"), false},
		{pgErr("23505", "duplicate key value violates unique constraint"), false},
		{nil, false},
	} {
		if got := conflict(tc.err); got != tc.want {
			t.Errorf("conflict(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestRetryCandidate: an extended-protocol statement may be run again only
// once bound, with copies of its parameters (the Bind's are the wire's
// buffer), NULL kept apart from an empty value.
func TestRetryCandidate(t *testing.T) {
	var none *retryStmt
	if none.candidate() != nil {
		t.Fatal("nil candidate")
	}
	simple := &retryStmt{sql: "UPDATE t SET n = n + 1"}
	if simple.candidate() != simple {
		t.Fatal("a simple query is a candidate")
	}
	ext := &retryStmt{sql: "UPDATE t SET n = n + $1 WHERE k = $2 AND v = $3", extended: true}
	if ext.candidate() != nil {
		t.Fatal("an extended statement not bound yet is no candidate")
	}
	buf := []byte("12")
	b := &wire.Statement{Kind: wire.KindBind, ParamFormats: []int16{0}, Params: [][]byte{buf[:1], nil, buf[:0]}, ResultFormats: []int16{1}}
	ext.bound(b)
	buf[0] = 'x' // the wire reuses its buffer
	if ext.candidate() != ext {
		t.Fatal("a bound extended statement is a candidate")
	}
	if string(ext.params[0]) != "1" || ext.params[1] != nil || ext.params[2] == nil || len(ext.params[2]) != 0 {
		t.Fatalf("params %q: want a copy of 1, NULL, and an empty value", ext.params)
	}
	if len(ext.formats) != 1 || len(ext.results) != 1 || ext.results[0] != 1 {
		t.Fatalf("formats %v, results %v", ext.formats, ext.results)
	}
}

// TestRetryPause: no pause before the first retry, then between half and
// all of a bound that doubles from 1 ms to 64 ms; the least 20 and 50
// retries can wait in all (what retry.go's comment promises, and what
// e2e TestAutocommitRetriesOutlastABurstOfConflicts relies on), and the
// most the default 3 can.
func TestRetryPause(t *testing.T) {
	least := func(int64) int64 { return 0 }
	most := func(n int64) int64 { return n - 1 }
	for retry, bound := range map[int]time.Duration{0: 0, 1: 0, 2: time.Millisecond, 3: 2 * time.Millisecond, 8: 64 * time.Millisecond, 9: 64 * time.Millisecond, 100: 64 * time.Millisecond, 1 << 20: 64 * time.Millisecond} {
		if lo, hi := retryPause(retry, least), retryPause(retry, most); lo != bound/2 || hi != bound {
			t.Errorf("retry %d: pause from %v to %v, want from %v to %v", retry, lo, hi, bound/2, bound)
		}
	}
	total := func(retries int, n func(int64) int64) (d time.Duration) {
		for r := 1; r <= retries; r++ {
			d += retryPause(r, n)
		}
		return d
	}
	if d := total(20, least); d < 440*time.Millisecond {
		t.Errorf("20 retries wait at least %v in all", d)
	}
	if d := total(50, least); d < 1400*time.Millisecond {
		t.Errorf("50 retries wait at least %v in all", d)
	}
	if d := total(3, most); d > 3*time.Millisecond {
		t.Errorf("the default 3 retries wait up to %v in all", d)
	}
}

// TestPauseEnds: a pause between attempts lasts its while, or ends at the
// client's cancel or the session's end.
func TestPauseEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	never := make(chan struct{})
	if got := pause(ctx, never, time.Millisecond); got != pauseDone {
		t.Fatalf("a pause: %d", got)
	}
	canceled := make(chan struct{})
	close(canceled)
	if got := pause(ctx, canceled, time.Hour); got != pauseCanceled {
		t.Fatalf("a pause the client canceled: %d", got)
	}
	cancel()
	if got := pause(ctx, never, 0); got != pauseEnded {
		t.Fatalf("no pause in a session that ended: %d", got)
	}
	if got := pause(ctx, never, time.Hour); got != pauseEnded {
		t.Fatalf("a pause of a session that ended: %d", got)
	}
}
