package analysis

import (
	"context"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-db/ordo/internal/catalog"
	"github.com/ordo-db/ordo/internal/txn"
)

func liveConn(t *testing.T) (*pgx.Conn, context.Context) {
	t.Helper()
	if dsn == "" {
		t.Fatal("no PostgreSQL (TestMain did not start one)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn, ctx
}

// TestCanonicalMatchesPostgreSQL checks that the canonical text the
// analyzer gives a literal is exactly PostgreSQL's output for the value
// (what the write-set decoder will see), and that what it refuses is either
// invalid input or a type it does not handle.
func TestCanonicalMatchesPostgreSQL(t *testing.T) {
	conn, ctx := liveConn(t)
	inputs := map[string][]string{
		"int2": {"1", " 7 ", "+5", "-32768", "0042", "32768", "1.0", "x"},
		"int4": {"0", "-0", "2147483647", "-2147483648", "2147483648", "007", "1e3", ""},
		"int8": {"9223372036854775807", "-9223372036854775808", "+12", "9223372036854775808", " 3"},
		"text": {"", "a b", "é", `x"y\z`, "1,2", "  pad  "},
		"bool": {"t", "TRUE", "yes", "on", "1", "f", "No", "off", "0", " true ", "maybe"},
		"uuid": {"6F1C0A4E-8F7B-4D5E-9B1A-3C2D4E5F6A7B", "{6f1c0a4e8f7b4d5e9b1a3c2d4e5f6a7b}", "6f1c0a4e8f7b4d5e9b1a3c2d4e5f6a7b", "not-a-uuid", "6f1c0a4e-8f7b-4d5e-9b1a-3c2d4e5f6a7"},
		"oid":  {"0", "4294967295", "4294967296", "-1"},
	}
	for typ, vals := range inputs {
		for _, in := range vals {
			var pgOut string
			// format('%s') uses the type's output function, as pgoutput does
			// (a bool cast to text would say "true", its output is "t").
			pgErr := conn.QueryRow(ctx, "SELECT format('%s', $1::text::"+typ+")", in).Scan(&pgOut)
			got, ok := canonical(typ, in)
			switch {
			case ok && pgErr != nil:
				t.Errorf("canonical(%s, %q) = %q but PostgreSQL rejects it: %v", typ, in, got, pgErr)
			case ok && got != pgOut:
				t.Errorf("canonical(%s, %q) = %q, PostgreSQL says %q", typ, in, got, pgOut)
			case !ok && pgErr == nil && typ != "oid" && typ != "bool":
				t.Errorf("canonical(%s, %q) refused a value PostgreSQL accepts (%q)", typ, in, pgOut)
			}
		}
	}
	// Binary parameters: PostgreSQL's binary send of each type, read back.
	for _, c := range []struct {
		typ, send, lit string
	}{{"int2", "int2send", "-7"}, {"int4", "int4send", "123456"}, {"int8", "int8send", "-9000000000"}, {"bool", "boolsend", "true"}, {"uuid", "uuid_send", "6f1c0a4e-8f7b-4d5e-9b1a-3c2d4e5f6a7b"}, {"text", "textsend", "héllo"}} {
		var b []byte
		var out string
		if err := conn.QueryRow(ctx, "SELECT "+c.send+"($1::text::"+c.typ+"), format('%s', $1::text::"+c.typ+")", c.lit).Scan(&b, &out); err != nil {
			t.Fatal(err)
		}
		if got, ok := canonicalBinary(c.typ, b); !ok || got != out {
			t.Errorf("canonicalBinary(%s, %x) = %q %v, want %q", c.typ, b, got, ok, out)
		}
	}
	// A binary int4[] as a client sends it for = ANY($1).
	var arr []byte
	if err := conn.QueryRow(ctx, "SELECT array_send(ARRAY[3,1,2]::int4[])").Scan(&arr); err != nil {
		t.Fatal(err)
	}
	elems, ok := binaryArray(arr)
	if !ok || len(elems) != 3 || binary.BigEndian.Uint32(elems[0]) != 3 {
		t.Fatalf("binaryArray: %v %v", elems, ok)
	}
}

// TestLiveCatalogEndToEnd loads the catalog of a real database, analyzes
// statements under two search paths, and checks the keys against the rows
// PostgreSQL actually returns.
func TestLiveCatalogEndToEnd(t *testing.T) {
	conn, ctx := liveConn(t)
	_, err := conn.Exec(ctx, `
CREATE SCHEMA e2e_a; CREATE SCHEMA e2e_b;
CREATE TABLE e2e_a.acct (bank int, id bigint, owner text, PRIMARY KEY (bank, id));
CREATE TABLE e2e_b.acct (id uuid PRIMARY KEY, owner text);
CREATE VIEW e2e_a.rich AS SELECT * FROM e2e_a.acct WHERE id > 100;
CREATE VIEW e2e_a.richer AS SELECT r.* FROM e2e_a.rich r JOIN e2e_b.acct b ON b.owner = r.owner;
INSERT INTO e2e_a.acct VALUES (1, 10, 'ann'), (1, 11, 'bob'), (2, 10, 'cy');`)
	if err != nil {
		t.Fatal(err)
	}
	cache := catalog.NewCache(func(ctx context.Context) (catalog.Description, error) {
		return catalog.Load(ctx, conn, map[string]string{"e2e_a.acct": "bank"})
	})
	if _, err := cache.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	a := New(cache, Options{})
	envA := NewEnv(catalog.SearchPath("e2e_a, public", "ordo"))
	envB := NewEnv(catalog.SearchPath("e2e_b, e2e_a", "ordo"))

	// Row keys from the statement must be the keys of the rows it reads.
	sql := "SELECT bank, id FROM acct WHERE bank = $1 AND id = ANY($2)"
	stmts, err := a.Analyze(sql, envA)
	if err != nil {
		t.Fatal(err)
	}
	f, err := stmts[0].Bind([]Param{{Value: []byte("1")}, {Value: []byte("{10,11,12}")}})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := conn.Query(ctx, "SELECT bank::text, id::text FROM e2e_a.acct WHERE bank = 1 AND id = ANY('{10,11,12}')")
	if err != nil {
		t.Fatal(err)
	}
	read := newReadSetFrom(f)
	for rows.Next() {
		var b, id string
		if err := rows.Scan(&b, &id); err != nil {
			t.Fatal(err)
		}
		if k := txn.RowKey("e2e_a", "acct", b, id); !read.Covers(k) {
			t.Errorf("row %s returned by PostgreSQL is not in the read set %v", k, f.Reads)
		}
	}
	rows.Close()
	if len(f.Reads) != 3 {
		t.Errorf("want 3 row keys, got %v", f.Reads)
	}

	// The same text under another search_path is another table.
	stmts, err = a.Analyze("SELECT * FROM acct WHERE id = '6f1c0a4e-8f7b-4d5e-9b1a-3c2d4e5f6a7b'", envB)
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := stmts[0].Bind(nil); len(f.Reads) != 1 || f.Reads[0].String() != "e2e_b.acct(6f1c0a4e-8f7b-4d5e-9b1a-3c2d4e5f6a7b)" {
		t.Errorf("search_path e2e_b: %v", f.Reads)
	}

	// Views over views resolve to their base tables.
	stmts, err = a.Analyze("SELECT * FROM richer", envA)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(stmts[0].Reads); got != "e2e_a.acct e2e_b.acct" {
		t.Errorf("richer reads %q", got)
	}

	// A table created after the catalog was loaded is unknown (escalation)
	// until the refresh that follows DDL; then it is analyzed precisely.
	if _, err := conn.Exec(ctx, "CREATE TABLE e2e_a.later (id int PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	q := "SELECT * FROM later WHERE id = 4"
	stmts, _ = a.Analyze(q, envA)
	if !stmts[0].ReadsAll || !strings.Contains(stmts[0].Reason, "unknown relation later") {
		t.Errorf("before refresh: %+v", stmts[0])
	}
	if _, err := cache.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	stmts, _ = a.Analyze(q, envA)
	if f, _ := stmts[0].Bind(nil); stmts[0].ReadsAll || len(f.Reads) != 1 || f.Reads[0].String() != "e2e_a.later(4)" {
		t.Errorf("after refresh: %+v %v", stmts[0], f.Reads)
	}
}

// newReadSetFrom puts a footprint's reads in a txn.ReadSet, as a session
// does.
func newReadSetFrom(f *Footprint) *txn.ReadSet {
	r := txn.NewReadSet(0)
	if f.All {
		r.AddAll()
	}
	for _, k := range f.Reads {
		r.Add(k)
	}
	return r
}
