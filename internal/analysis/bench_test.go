package analysis

import (
	"strings"
	"testing"
)

type benchStmt struct {
	sql    string
	params []Param
	env    Env
}

// benchStatements returns every statement of the TPC-C and pgbench golden
// files with its parameters.
func benchStatements(b *testing.B) []benchStmt {
	var out []benchStmt
	for _, path := range []string{"testdata/tpcc.txt", "testdata/pgbench.txt"} {
		cases, _ := readGolden(&testing.T{}, path)
		for _, c := range cases {
			params, env := parseHeader(&testing.T{}, c.header)
			if strings.HasPrefix(c.output, "error") {
				continue
			}
			out = append(out, benchStmt{c.sql, params, env})
		}
	}
	if len(out) == 0 {
		b.Fatal("no statements")
	}
	return out
}

func run(b *testing.B, a *Analyzer, s benchStmt, cached bool) {
	var stmts []*Statement
	var err error
	if cached {
		stmts, err = a.Analyze(s.sql, s.env)
	} else {
		stmts, err = a.AnalyzeUncached(s.sql, s.env)
	}
	if err != nil {
		b.Fatal(err)
	}
	for _, st := range stmts {
		if _, err := st.Bind(s.params); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAnalyzeCached: one op is one statement, analyzed at Parse (a
// cache hit) and bound.
func BenchmarkAnalyzeCached(b *testing.B) {
	a := New(testCatalog(b), Options{})
	stmts := benchStatements(b)
	for _, s := range stmts {
		run(b, a, s, true)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		run(b, a, stmts[i%len(stmts)], true)
	}
}

// BenchmarkAnalyzeUncached: one op is one statement parsed, analyzed and
// bound from scratch.
func BenchmarkAnalyzeUncached(b *testing.B) {
	a := New(testCatalog(b), Options{})
	stmts := benchStatements(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		run(b, a, stmts[i%len(stmts)], false)
	}
}
