package session

import (
	"fmt"
	"testing"

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
