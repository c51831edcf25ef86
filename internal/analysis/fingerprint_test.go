package analysis

import (
	"fmt"
	"hash/fnv"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	pg "github.com/pganalyze/pg_query_go/v6"

	"github.com/ordo-db/ordo/internal/txn"
)

func TestFingerprint(t *testing.T) {
	for _, c := range []struct {
		sql  string
		key  string // "" when the lexer must decline
		lits []string
	}{
		{"SELECT abalance FROM pgbench_accounts WHERE aid = 42;", "SELECT abalance FROM pgbench_accounts WHERE aid = \x00i;", []string{"42"}},
		{"SELECT 1, 2147483647, 2147483648, 1.5, .5, 1., 1e5, 1.5E-3", "SELECT \x00i, \x00i, \x00n, \x00n, \x00n, \x00n, \x00n, \x00n", []string{"1", "2147483647", "2147483648", "1.5", ".5", "1.", "1e5", "1.5E-3"}},
		{"SELECT 'it''s', $$a'b$$, $q$x$$y$q$", "SELECT \x00s, \x00d, \x00d", []string{"'it''s'", "$$a'b$$", "$q$x$$y$q$"}},
		{"SELECT * FROM t WHERE k IN (1, 2) AND v IS NULL AND b = TRUE", "SELECT * FROM t WHERE k IN (\x00i, \x00i) AND v IS NULL AND b = TRUE", []string{"1", "2"}},
		{"SELECT -1, - 1, 5-1, '5'::int4, $1 + 3", "SELECT -\x00i, - \x00i, \x00i-\x00i, \x00s::int4, $1 + \x00i", []string{"1", "1", "5", "1", "'5'", "3"}},
		{`SELECT "a""1", t1.c2, a$1 FROM "t 2" -- 3 '
/* 4 /* 5 */ '6' */ WHERE x = 7`, `SELECT "a""1", t1.c2, a$1 FROM "t 2" -- 3 '
/* 4 /* 5 */ '6' */ WHERE x = ` + "\x00i", []string{"7"}},
		{"SELECT 1", "SELECT \x00i", []string{"1"}},
		{"SELECT now()", "SELECT now()", nil},
		// Declined.
		{`SELECT 'a\b'`, "", nil},
		{"SELECT E'a'", "", nil},
		{"SELECT e'a'", "", nil},
		{"SELECT U&'d\\0061t'", "", nil},
		{`SELECT U&"d" FROM t`, "", nil},
		{"SELECT B'101', X'1F', N'x'", "", nil},
		{"SELECT 'a'\n'b'", "", nil},
		{"SELECT 'a' -- c\n 'b'", "", nil},
		{"SELECT 0x1F", "", nil},
		{"SELECT 0o17", "", nil},
		{"SELECT 0b101", "", nil},
		{"SELECT 1_000", "", nil},
		{"SELECT 123abc", "", nil},
		{"SELECT 1e", "", nil},
		{"SELECT 1..2", "", nil},
		{"SELECT 1.2.3", "", nil},
		{"SELECT $1abc", "", nil},
		{"SELECT $a", "", nil},
		{"SELECT 'open", "", nil},
		{`SELECT "open`, "", nil},
		{"SELECT $$open", "", nil},
		{"SELECT /* /* */ 1", "", nil},
		{"SELECT '\xff'", "", nil},
		{"SELECT '\x00'", "", nil},
	} {
		key, lits, ok := fingerprint(c.sql)
		if c.key == "" {
			if ok {
				t.Errorf("%q: fingerprint %q, want a decline", c.sql, key)
			}
			continue
		}
		if !ok || key != c.key {
			t.Errorf("%q: fingerprint %q (ok %v), want %q", c.sql, key, ok, c.key)
			continue
		}
		var got []string
		for _, l := range lits {
			got = append(got, c.sql[l.start:l.end])
		}
		if !reflect.DeepEqual(got, c.lits) {
			t.Errorf("%q: literals %q, want %q", c.sql, got, c.lits)
		}
	}
}

// TestTemplate: texts that differ only in their literals are analyzed once
// and get each their own keys; shapes the template cannot follow are
// analyzed from their text.
func TestTemplate(t *testing.T) {
	cat := testCatalog(t)
	env := NewEnv([]string{"public"})
	a := New(cat, Options{})
	for i, c := range []struct {
		sql   string
		reads string
		parse bool
	}{
		{"SELECT abalance FROM pgbench_accounts WHERE aid = 1", "[public.pgbench_accounts(1)]", true},
		{"SELECT abalance FROM pgbench_accounts WHERE aid = 77", "[public.pgbench_accounts(77)]", false},
		{"SELECT abalance FROM pgbench_accounts WHERE aid = -5", "[public.pgbench_accounts(-5)]", true},
		{"SELECT abalance FROM pgbench_accounts WHERE aid = -6", "[public.pgbench_accounts(-6)]", false},
		{"SELECT abalance FROM pgbench_accounts WHERE aid IN (1, 2)", "[public.pgbench_accounts(1) public.pgbench_accounts(2)]", true},
		{"SELECT abalance FROM pgbench_accounts WHERE aid IN (3, 3)", "[public.pgbench_accounts(3)]", false},
		{"SELECT abalance FROM pgbench_accounts WHERE aid IN (3, 3, 4)", "[public.pgbench_accounts(3) public.pgbench_accounts(4)]", true},
		{"SELECT abalance FROM pgbench_accounts WHERE aid = '8'", "[public.pgbench_accounts(8)]", true},
		{"SELECT abalance FROM pgbench_accounts WHERE aid = 'x'", "[public.pgbench_accounts]", false},
		{"SELECT abalance FROM pgbench_accounts WHERE aid = ANY('{1,2}')", "[public.pgbench_accounts(1) public.pgbench_accounts(2)]", true},
		{"SELECT abalance FROM pgbench_accounts WHERE aid = ANY('{1,2,3}')", "[public.pgbench_accounts(1) public.pgbench_accounts(2) public.pgbench_accounts(3)]", true},
		{"SELECT abalance FROM pgbench_accounts WHERE aid = 9 LIMIT 1", "[public.pgbench_accounts(9)]", true},
		{"SELECT abalance FROM pgbench_accounts WHERE aid = 10 LIMIT 100", "[public.pgbench_accounts(10)]", false},
		{"SET work_mem = 1000", "", true},
		{"SET work_mem = 2000", "", true},
	} {
		before := a.Stats().Parses
		stmts, err := a.Analyze(c.sql, env)
		if err != nil {
			t.Fatalf("%d %q: %v", i, c.sql, err)
		}
		if parsed := a.Stats().Parses > before; parsed != c.parse {
			t.Errorf("%d %q: parsed %v, want %v", i, c.sql, parsed, c.parse)
		}
		fresh, _ := New(cat, Options{CacheSize: -1}).Analyze(c.sql, env)
		if d := diffAnalysis(stmts, fresh); d != "" {
			t.Errorf("%d %q: %s", i, c.sql, d)
		}
		if c.reads == "" {
			if stmts[0].Setting == nil || !strings.Contains(c.sql, stmts[0].Setting.Value) {
				t.Errorf("%d %q: setting %+v", i, c.sql, stmts[0].Setting)
			}
			continue
		}
		fp, err := stmts[0].Bind(nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := keysText(fp.Reads); got != c.reads {
			t.Errorf("%d %q: reads %s, want %s", i, c.sql, got, c.reads)
		}
	}
}

func keysText(ks []txn.Key) string {
	var parts []string
	for _, k := range ks {
		parts = append(parts, k.String())
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// FuzzFingerprint differentially tests the fingerprint lexer against
// PostgreSQL's scanner and parser (pg_query): for any text it does not
// decline, (1) its literals are exactly the scanner's constant tokens,
// (2) replacing them with other values of their classes keeps the
// fingerprint, and (3) the analysis obtained through a template made from
// one such text equals a fresh analysis of the other.
func FuzzFingerprint(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.txt")
	for _, path := range files {
		cases, _ := readGolden(&testing.T{}, path)
		for _, c := range cases {
			f.Add(c.sql)
		}
	}
	for _, s := range []string{
		"SELECT abalance FROM pgbench_accounts WHERE aid = 42",
		"SELECT abalance FROM pgbench_accounts WHERE aid = -42 AND aid = - 7",
		"SELECT * FROM pgbench_accounts WHERE aid IN (1, -2, '3', $1) OR aid = $$4$$",
		"SELECT * FROM pgbench_accounts WHERE aid = '5'::int4 AND bid = 1::int8",
		"SELECT * FROM pgbench_accounts WHERE aid = ANY('{1,2}'::int4[]) LIMIT 5 OFFSET 2",
		"SELECT * FROM pgbench_accounts WHERE aid = ANY(ARRAY[1, -2, 3])",
		"UPDATE pgbench_accounts SET abalance = abalance + -5 WHERE aid = 3 RETURNING 1.5",
		"INSERT INTO pgbench_history (tid, bid, aid, delta) VALUES (1, 2, 3, -4), ($1, 2, 3, 4)",
		"DELETE FROM pgbench_tellers WHERE (tid, bid) = (1, 2)",
		"SELECT * FROM warehouse w JOIN district d ON d.d_w_id = w.w_id WHERE w.w_id = 1 AND d.d_id = 2",
		"SELECT * FROM customer WHERE c_w_id = 1 AND c_d_id = 2 AND c_id = 3 AND c_last = 'BAR''ESE'",
		"SELECT * FROM item WHERE i_id = 1e3 OR i_id = .5 OR i_id = 2147483648 OR i_id = 0x1F",
		"SELECT * FROM item WHERE i_id = 1_000",
		"SELECT * FROM \"item\" /* c /* nested */ 1 */ WHERE i_id = 7 -- 8\n",
		"SELECT * FROM item WHERE i_id = E'\\x31' OR i_id = U&'\\0031' OR i_id = 'a\\'",
		"SELECT * FROM item WHERE i_name = $tag$x$y$tag$ AND i_id = $1",
		"SELECT * FROM item WHERE i_id = 1 AND i_data = 'a'\n'b'",
		"SELECT * FROM item WHERE i_id = -(1) OR i_id = - - 2 OR i_id = -'3'",
		"SELECT * FROM item WHERE i_id = TRUE OR i_id IS NULL OR i_id = NULL",
		"SELECT * FROM stock WHERE (s_w_id, s_i_id) IN ((1, 2), (3, 4))",
		"SELECT * FROM item WHERE i_id BETWEEN 1 AND 3 OR i_id BETWEEN -2 AND 0 OR i_id = 9",
		"SELECT * FROM district WHERE d_w_id = 7 AND d_id BETWEEN '2' AND 5::int8",
		"UPDATE item SET i_price = 1.5 WHERE i_id BETWEEN 2 AND 2147483647",
		"SELECT * FROM item WHERE i_id >= 3 AND i_id < 9 OR 4 < i_id AND 7 >= i_id OR i_id > 1",
		"SELECT 1; SELECT * FROM item WHERE i_id = 2",
		"SET search_path = 'a', 'b'",
		"EXPLAIN (ANALYZE 1) SELECT * FROM item WHERE i_id = 1",
	} {
		f.Add(s)
	}
	cat := testCatalog(f)
	env := NewEnv([]string{"public"})
	fresh := New(cat, Options{KeyLimit: 20, CacheSize: -1})
	f.Fuzz(func(t *testing.T, sql string) {
		key, lits, ok := fingerprint(sql)
		if !ok {
			return
		}
		checkScanner(t, sql, lits)
		variant := otherLiterals(sql, lits)
		key2, lits2, ok2 := fingerprint(variant)
		if !ok2 || key2 != key || len(lits2) != len(lits) {
			t.Fatalf("%q and %q: fingerprints %q (%v) and %q (%v)", sql, variant, key, ok, key2, ok2)
		}
		checkScanner(t, variant, lits2)
		for _, pair := range [][2]string{{variant, sql}, {sql, variant}} {
			a := New(cat, Options{KeyLimit: 20})
			_, _ = a.Analyze(pair[0], env)
			got, err := a.Analyze(pair[1], env)
			want, werr := fresh.Analyze(pair[1], env)
			if (err == nil) != (werr == nil) {
				t.Fatalf("%q after %q: error %v, fresh analysis %v", pair[1], pair[0], err, werr)
			}
			if d := diffAnalysis(got, want); d != "" {
				t.Fatalf("%q after %q: %s", pair[1], pair[0], d)
			}
		}
	})
}

// checkScanner compares the lexer's literals with PostgreSQL's scanner.
func checkScanner(t *testing.T, sql string, lits []literal) {
	t.Helper()
	res, err := pg.Scan(sql)
	if err != nil {
		return
	}
	var want [][2]int
	for _, tok := range res.Tokens {
		switch tok.Token {
		case pg.Token_ICONST, pg.Token_FCONST, pg.Token_SCONST, pg.Token_USCONST, pg.Token_BCONST, pg.Token_XCONST:
			want = append(want, [2]int{int(tok.Start), int(tok.End)})
		}
	}
	var got [][2]int
	for _, l := range lits {
		got = append(got, [2]int{l.start, l.end})
	}
	if len(got) != len(want) || (len(got) > 0 && !reflect.DeepEqual(got, want)) {
		t.Fatalf("%q: literals at %v, PostgreSQL's scanner at %v", sql, got, want)
	}
}

// otherLiterals replaces every literal of sql with another value of its
// class, chosen from the text's hash.
func otherLiterals(sql string, lits []literal) string {
	h := fnv.New32a()
	h.Write([]byte(sql))
	seed := int(h.Sum32() % 1024)
	choices := map[byte][]string{
		litInt:    {"0", "1", "2", "7", "42", "-0", "00012", "2147483647"},
		litNum:    {"1.5", "2e3", "1.", "99999999999", "1.0", "1.5e-3"},
		'.':       {".5", ".25e1", ".0"}, // a number that starts with a dot keeps it (A.5 is A and .5; A1. is A1 and .)
		litStr:    {"'x'", "''", "'it''s'", "'{1,2}'", "'1'", "'ω'", "'-3'", "'true'"},
		litDollar: {"$$y$$", "$q$a'b$q$", "$$7$$", "$$$$"},
	}
	var b strings.Builder
	last := 0
	for i, l := range lits {
		cs := choices[l.class]
		if sql[l.start] == '.' {
			cs = choices['.']
		}
		pick := cs[(seed+i*7)%len(cs)]
		if pick == sql[l.start:l.end] {
			pick = cs[(seed+i*7+1)%len(cs)]
		}
		if pick[0] == '-' { // no new minus signs: keep the class
			pick = pick[1:]
		}
		b.WriteString(sql[last:l.start])
		b.WriteString(pick)
		last = l.end
	}
	b.WriteString(sql[last:])
	return b.String()
}

// diffAnalysis compares two analyses field by field, ignoring where in
// their texts the constants were.
func diffAnalysis(got, want []*Statement) string {
	if len(got) != len(want) {
		return "statements differ in number"
	}
	for i := range got {
		n := want[i].NumParams
		if n > 64 {
			n = 0 // $333333331: both must refuse too few parameters, without allocating them
		}
		ps := make([]Param, n)
		for j := range ps {
			ps[j] = Param{Value: []byte("1")}
		}
		gf, gerr := got[i].Bind(ps)
		wf, werr := want[i].Bind(ps)
		if (gerr == nil) != (werr == nil) || !reflect.DeepEqual(gf, wf) {
			return fmt.Sprintf("footprints differ: got %+v (%v), want %+v (%v)", gf, gerr, wf, werr)
		}
		g, w := normalized(got[i]), normalized(want[i])
		if !reflect.DeepEqual(g, w) {
			return "analysis differs:\n got  " + dump(g) + "\n want " + dump(w)
		}
	}
	return ""
}

func normalized(s *Statement) *Statement {
	if s == nil {
		return nil
	}
	c := *s
	c.static = nil // compared through Bind
	c.acc = make([]access, len(s.acc))
	for i, a := range s.acc {
		if a.pk != nil {
			pk := make([][]val, len(a.pk))
			for j, vs := range a.pk {
				pk[j] = clearLoc(vs)
			}
			a.pk = pk
		}
		a.granule = clearLoc(a.granule)
		c.acc[i] = a
	}
	c.Prepared = normalized(s.Prepared)
	return &c
}

func clearLoc(vs []val) []val {
	if vs == nil {
		return nil
	}
	out := make([]val, len(vs))
	for i, v := range vs {
		v.loc = 0
		out[i] = v
	}
	return out
}

func dump(s *Statement) string {
	var b strings.Builder
	b.WriteString(s.Kind.String() + " " + s.Tag + " " + s.SQL)
	for _, a := range s.acc {
		b.WriteString(" | " + a.table.Name.String())
		for _, vs := range a.pk {
			for _, v := range vs {
				b.WriteString(" " + v.text)
			}
		}
	}
	return b.String()
}

// TestTemplatesConcurrently: sessions analyzing texts of a few shapes at
// once each get the analysis of their own text (run with -race).
func TestTemplatesConcurrently(t *testing.T) {
	cat := testCatalog(t)
	env := NewEnv([]string{"public"})
	a := New(cat, Options{CacheSize: 64})
	fresh := New(cat, Options{CacheSize: -1})
	shapes := []string{
		"SELECT abalance FROM pgbench_accounts WHERE aid = %d",
		"UPDATE pgbench_tellers SET tbalance = tbalance + -%d WHERE tid = %d",
		"SELECT * FROM stock WHERE s_w_id = %d AND s_i_id IN (%d, 7)",
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				shape := shapes[(g+i)%len(shapes)]
				args := []any{g*1000 + i, i}[:strings.Count(shape, "%d")]
				sql := fmt.Sprintf(shape, args...)
				got, err := a.Analyze(sql, env)
				want, werr := fresh.Analyze(sql, env)
				if err != nil || werr != nil {
					errs <- fmt.Sprintf("%q: %v / %v", sql, err, werr)
					return
				}
				if d := diffAnalysis(got, want); d != "" {
					errs <- fmt.Sprintf("%q: %s", sql, d)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	if s := a.Stats(); s.TemplateHits == 0 {
		t.Errorf("no text went through a template: %+v", s)
	}
}
