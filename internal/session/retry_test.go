package session

import (
	"fmt"
	"testing"
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
