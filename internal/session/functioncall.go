package session

import (
	"context"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-db/ordo/internal/analysis"
	"github.com/ordo-db/ordo/internal/wire"
)

// The fast-path interface (the FunctionCall message) calls a function by
// its OID, outside any statement: libpq's large object functions (lo_open,
// lowrite, …, and lo_import and lo_export on the client's side) and
// pgjdbc's LargeObjectManager use it. The session treats a call as the
// query `SELECT schema.name($1, …)` with the call's arguments bound, sent
// as a unit of its own: in a transaction block it is one more statement of
// it; outside one, PostgreSQL runs it in a transaction of its own, which
// Ordo wraps and terminates like an autocommit statement, so what the
// function writes (rows, which are decoded, and large objects) is
// replicated.

// function is what the session knows of a function called by OID.
type function struct {
	schema, name string
}

// functionCall returns the analysis of a call of the function with the
// given OID and nargs arguments, naming it from the catalog (once per
// session and OID). A function it cannot name (PostgreSQL will report it,
// or the transaction has failed) is analyzed as a call of an unknown one:
// it may read and write anything.
//
// In a block whose snapshot is not taken yet, the call is the statement
// that takes it, so the function is named on the node's own connection
// (LargeObjectPeer): a query on the client's backend would take the
// block's snapshot before the call, and so before Ordo notes its seqno
// (certification's), sets the block's level or, under cons, takes its
// classes. A function the block created itself is not seen there, and
// is analyzed as an unknown one.
func (s *session) functionCall(ctx context.Context, oid uint32, nargs int) []*analysis.Statement {
	f, ok := s.funcs[oid]
	if !ok {
		if f, ok = s.nameFunction(ctx, oid); !ok {
			return []*analysis.Statement{opaque("a function called through the fast-path interface that this session could not name")}
		}
		if s.funcs == nil {
			s.funcs = map[uint32]function{}
		}
		s.funcs[oid] = f
	}
	var b strings.Builder
	b.WriteString("SELECT ")
	b.WriteString(pgx.Identifier{f.schema, f.name}.Sanitize())
	b.WriteByte('(')
	for i := range nargs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('$')
		b.WriteString(strconv.Itoa(i + 1))
	}
	b.WriteByte(')')
	return s.analyze(b.String())
}

// nameFunction finds the schema and name of the function with the given
// OID: on the client's backend, unless a query there would take the
// snapshot of its block (functionCall).
func (s *session) nameFunction(ctx context.Context, oid uint32) (function, bool) {
	if s.txStatus() == 'T' && !s.tx.snapshot {
		if s.h.cfg.LargeObjects == nil {
			return function{}, false
		}
		schema, name, err := s.h.cfg.LargeObjects.FunctionName(ctx, oid)
		return function{schema: schema, name: name}, err == nil
	}
	res, err := s.be.Exec(ctx, "SELECT n.nspname, p.proname FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace WHERE p.oid = "+strconv.FormatUint(uint64(oid), 10))
	if err != nil || res.Err != nil || len(res.Rows) != 1 || len(res.Rows[0]) != 2 {
		return function{}, false
	}
	return function{schema: res.Rows[0][0], name: res.Rows[0][1]}, true
}

// fastPath handles a FunctionCall: a unit of its own, like a Query.
func (s *session) fastPath(ctx context.Context, st *wire.Statement) error {
	stmts := s.functionCall(ctx, st.Function, len(st.Params))
	return s.execute(ctx, stmts, boundParams(st.Params, st.ParamFormats), at{kind: wire.KindQuery, first: st.AtBoundary})
}
