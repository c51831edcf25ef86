package catalog

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// BenchmarkLoad reads a schema of 1,020 tables (a default and a check on
// each tenth calling a user function, 20 with columns of domains and
// composite types whose checks call one), 300 PL/pgSQL functions and 50
// operators: what a node reloads after every DDL.
func BenchmarkLoad(b *testing.B) {
	conn, ctx := connect(&testing.T{})
	BenchmarkLoadSetup(b)
	b.ResetTimer()
	for range b.N {
		if _, err := Load(ctx, conn, nil); err != nil {
			b.Fatal(err)
		}
	}
}

var loadSchema sync.Once

// BenchmarkLoadSetup creates BenchmarkLoad's schema, once per process
// (the framework calls a benchmark more than once).
func BenchmarkLoadSetup(b *testing.B) {
	loadSchema.Do(func() { createLoadSchema(b) })
}

func createLoadSchema(b *testing.B) {
	conn, ctx := connect(&testing.T{})
	var sql strings.Builder
	sql.WriteString("DROP SCHEMA IF EXISTS lb CASCADE; CREATE SCHEMA lb;\n")
	sql.WriteString("CREATE FUNCTION lb.f(int) RETURNS int LANGUAGE sql STABLE AS 'SELECT $1';\n")
	for i := range 300 {
		fmt.Fprintf(&sql, "CREATE FUNCTION lb.p%d(x int) RETURNS int LANGUAGE plpgsql AS $$BEGIN RETURN x + %d; /* %s */ END$$;\n", i, i, strings.Repeat("some text of the body ", 40))
	}
	for i := range 50 {
		fmt.Fprintf(&sql, "CREATE FUNCTION lb.o%d(int, int) RETURNS bool LANGUAGE sql IMMUTABLE AS 'SELECT $1 = $2'; CREATE OPERATOR lb.=%s= (FUNCTION = lb.o%d, LEFTARG = int, RIGHTARG = int);\n", i, strings.Repeat("~", i%5+1)+strings.Repeat("#", i/5), i)
	}
	for i := range 20 {
		fmt.Fprintf(&sql, "CREATE DOMAIN lb.d%d AS int CHECK (lb.f(VALUE) > 0); CREATE TYPE lb.c%d AS (a lb.d%d, b text); CREATE TABLE lb.dt%d (id int PRIMARY KEY, v lb.d%d, w lb.c%d);\n", i, i, i, i, i, i)
	}
	for i := range 1000 {
		if i%10 == 0 {
			fmt.Fprintf(&sql, "CREATE TABLE lb.t%d (id int PRIMARY KEY, a int DEFAULT lb.f(1), b text CHECK (lb.f(length(b)) > 0), c timestamptz DEFAULT now());\n", i)
		} else {
			fmt.Fprintf(&sql, "CREATE TABLE lb.t%d (id int PRIMARY KEY, a int, b text, c timestamptz DEFAULT now());\n", i)
		}
	}
	if _, err := conn.Exec(ctx, sql.String()); err != nil {
		b.Fatal(err)
	}
}
