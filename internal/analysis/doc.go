// Package analysis analyzes SQL statements with PostgreSQL's own parser
// (pg_query_go) for the session layer: what kind of statement it is, which
// tables it reads, writes and locks, and the keys of its read set (row keys
// when the primary key is fixed by constants, $n parameters, IN lists or
// = ANY(array); granule keys when the configured granule column is fixed;
// table keys otherwise). It also parses and checks conflict-class
// declarations (CONS).
//
// How a session uses it:
//
//  1. At Parse (or for a simple Query), call Analyzer.Analyze(sql, env) once.
//     It splits the text into statements with their offsets, classifies each,
//     resolves names with the session's search_path (Env) and the current
//     catalog, and caches the result by exact text. A text seen for the
//     first time whose fingerprint (its text with literals replaced by
//     placeholders) matches an earlier query or DML statement's is not
//     parsed: the earlier analysis is reused with this text's literals
//     bound in, as parameters are by Bind.
//  2. At Bind (or right away for simple queries), call Statement.Bind(params)
//     for the Footprint: read keys (or All) and predicted write keys.
//     Statements without parameters return a precomputed footprint.
//  3. Add Footprint.Reads to the transaction's txn.ReadSet; for CONS, check
//     the footprint against the declared classes with Classes.Check.
//
// Never an under-approximation: what cannot be attributed (an unknown
// relation or function, a function that may read data, a view calling one,
// DDL, CALL, DO) sets ReadsAll; a predicate the analyzer does not
// understand only makes keys coarser.
//
// Files:
//   - statement.go: Kind, TxnControl, Setting, Statement, Footprint.
//   - analyzer.go: Analyzer, Env, Options, the cache, statement splitting,
//     directives in leading comments.
//   - fingerprint.go: the lexer that finds literals and makes a text's
//     fingerprint, declining whatever it does not read exactly as
//     PostgreSQL does (FuzzFingerprint checks it against pg_query).
//   - template.go: an analysis reused for every text of one fingerprint,
//     and the binding of literals into it.
//   - classify.go: classification of every statement kind.
//   - walk.go: the walk over queries (scopes, FROM items, CTEs, DML targets,
//     function calls, a generic walk of everything else).
//   - fix.go: which columns WHERE/ON predicates fix, and to what.
//   - bind.go: Param, Bind, key construction and the key limit.
//   - canon.go: canonical text of values (literals, text/binary params,
//     arrays) for the key types the analyzer understands.
//   - classes.go: conflict classes (definitions, declarations, profiles,
//     derivation, validation).
//
// Goroutines: none. An Analyzer is safe for concurrent use (its cache is
// guarded by a mutex); Statements and Footprints it returns are immutable
// and shared — callers must not modify them.
//
// This package must never execute SQL, never hold OIDs, and never return a
// read set smaller than what the statement can read; nor, through a
// template, any analysis other than the one the text itself would get.
package analysis
