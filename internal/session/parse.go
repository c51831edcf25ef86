package session

import (
	"context"

	"github.com/ordo-db/ordo/internal/analysis"
)

// PostgreSQL takes a REPEATABLE READ transaction's snapshot when it
// parses the transaction's first statement that needs one (a query or a
// data-changing statement: analyze_requires_snapshot), not when it binds
// it. Drivers using the extended protocol send that Parse first, so what
// must precede the snapshot happens at the Parse: under cons the
// transaction's classes are taken, then snapshot_seqno is read. (Read at
// the Bind, snapshot_seqno could claim transactions applied between the
// Parse and the Bind that the snapshot does not hold.)

// atParse runs, at the Parse of stmts, what must precede the transaction's
// snapshot, if the Parse is inside a transaction whose snapshot is not
// taken yet. sent is the text PostgreSQL parses: a SHOW of the isolation
// level answered by a SELECT (rewriteIsolation) takes the snapshot there.
func (s *session) atParse(ctx context.Context, stmts []*analysis.Statement, first bool, sent string) error {
	if s.tx.snapshot || !(s.tx.active || s.txStatus() == 'T') || s.txStatus() == 'E' {
		return nil
	}
	for _, a := range stmts {
		if showAnswered(a, sent) {
			// Classes are taken as for a read of nothing in particular.
			a = &analysis.Statement{Kind: analysis.KindRead, SQL: a.SQL}
		} else if !takesSnapshot(a) {
			continue
		}
		if _, err := s.consTake(ctx, a, nil, first); err != nil {
			return err
		}
		return s.beforeSnapshot(ctx, first)
	}
	return nil
}

// takesSnapshot reports whether parsing a makes PostgreSQL take the
// transaction's snapshot (its analyze_requires_snapshot): a query or a
// data-changing statement, a SELECT INTO a temporary table among them
// (taken for a statement that takes none, a named BEGIN's level set
// ahead of its Bind came too late: 25001, review).
func takesSnapshot(a *analysis.Statement) bool {
	switch a.Kind {
	case analysis.KindLocal:
		return a.Tag == "SelectInto"
	case analysis.KindTxn, analysis.KindSession, analysis.KindNotify, analysis.KindEmpty, analysis.KindRefused:
		return false
	}
	return true
}
