package analysis

import (
	"github.com/stretchr/testify/require"

	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/ordo-db/ordo/internal/catalog"
)

// swapSource lets a test change the catalog under an analyzer.
type swapSource struct{ c *catalog.Catalog }

func (s *swapSource) Current() *catalog.Catalog { return s.c }

func TestCache(t *testing.T) {
	cat := testCatalog(t)
	src := &swapSource{cat}
	a := New(src, Options{CacheSize: 4})
	env := NewEnv([]string{"public"})
	sql := "SELECT * FROM item WHERE i_id = 1"
	s1, err := a.Analyze(sql, env)
	if err != nil {
		t.Fatal(err)
	}
	s2, _ := a.Analyze(sql, env)
	if s1[0] != s2[0] {
		t.Fatal("second Analyze of the same text must hit the cache")
	}
	// Another search_path is another entry.
	s3, _ := a.Analyze(sql, NewEnv([]string{"s1", "public"}))
	if s3[0] == s1[0] {
		t.Fatal("cache must be keyed by search_path")
	}
	// A new catalog version invalidates.
	d := catalog.Description{Tables: []catalog.TableDesc{{Schema: "public", Name: "item", Columns: []catalog.Column{{Name: "i_id", Type: "int8"}}}}}
	newer, err := catalog.New(d, 2)
	if err != nil {
		t.Fatal(err)
	}
	src.c = newer
	s4, _ := a.Analyze(sql, env)
	if s4[0] == s1[0] {
		t.Fatal("a new catalog version must invalidate cached analyses")
	}
	if f, _ := s4[0].Bind(nil); len(f.Reads) != 1 || f.Reads[0].String() != "public.item" {
		t.Fatalf("item has no PK in the new catalog: %v", f.Reads)
	}
	// The cache stays bounded.
	for i := 0; i < 20; i++ {
		if _, err := a.Analyze(strings.Repeat(" ", i)+"SELECT 1", env); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(a.cache); n > 4 {
		t.Fatalf("cache holds %d entries, limit 4", n)
	}
	// Errors.
	if _, err := a.Analyze("SELEC 1", env); !errors.Is(err, ErrSyntax) {
		t.Fatalf("syntax error: %v", err)
	}
	if _, err := New(&swapSource{}, Options{}).Analyze("SELECT 1", env); !errors.Is(err, ErrNoCatalog) {
		t.Fatalf("no catalog: %v", err)
	}
}

func TestBindParams(t *testing.T) {
	a := New(testCatalog(t), Options{KeyLimit: 10})
	env := NewEnv([]string{"public"})
	stmts, err := a.Analyze("SELECT * FROM stock WHERE s_w_id = $1 AND s_i_id = ANY($2)", env)
	if err != nil {
		t.Fatal(err)
	}
	s := stmts[0]
	if s.NumParams != 2 {
		t.Fatalf("NumParams %d", s.NumParams)
	}
	if _, err := s.Bind([]Param{{Value: []byte("1")}}); !errors.Is(err, ErrParams) {
		t.Fatalf("missing parameter: %v", err)
	}
	be32 := func(v int32) []byte { b := make([]byte, 4); binary.BigEndian.PutUint32(b, uint32(v)); return b }
	// A binary int4[] {5,6}: ndim 1, no nulls, element oid 23, dim 2, lbound 1.
	arr := append(append(append(append(append(be32(1), be32(0)...), be32(23)...), be32(2)...), be32(1)...), append(append(be32(4), be32(5)...), append(be32(4), be32(6)...)...)...)
	cases := []struct {
		params []Param
		want   string
	}{
		{[]Param{{Value: []byte("1")}, {Value: []byte("{5,6}")}}, "public.stock(1,5) public.stock(1,6)"},
		{[]Param{{Value: be32(1), Binary: true}, {Value: arr, Binary: true}}, "public.stock(1,5) public.stock(1,6)"},
		{[]Param{{Value: []byte{0, 0, 0, 0, 0, 0, 0, 1}, Binary: true}, {Value: []byte(`{"5"}`)}}, "public.stock(1,5)"},
		{[]Param{{Value: []byte("1")}, {}}, "public.stock@s_w_id=1"},
		{[]Param{{Value: []byte("1")}, {Value: []byte("{1,2,3,4,5,6,7,8,9,10,11}")}}, "public.stock@s_w_id=1"},
		{[]Param{{}, {Value: []byte("{5}")}}, "public.stock"},
		{[]Param{{Value: []byte{1, 2, 3}, Binary: true}, {Value: []byte("{5}")}}, "public.stock"},
	}
	for _, c := range cases {
		f, err := s.Bind(c.params)
		if err != nil {
			t.Fatal(err)
		}
		if got := keys(f.Reads); got != c.want {
			t.Errorf("Bind(%v) = %s, want %s", c.params, got, c.want)
		}
	}
}

// TestBindDeclaredTypes checks that a parameter makes a key only if it is
// compared with the key column as a value of the column's type: one its
// Parse declared of another type (a float8, whose bytes PostgreSQL
// compares as 5.0, not as the integer they spell) makes the table's key.
func TestBindDeclaredTypes(t *testing.T) {
	a := New(testCatalog(t), Options{})
	env := NewEnv([]string{"public"})
	stmts, err := a.Analyze("SELECT * FROM blog_post WHERE id = $1 OR id BETWEEN $2 AND $3 OR id = ANY($4)", env)
	if err != nil {
		t.Fatal(err)
	}
	be64 := func(v uint64) []byte { b := make([]byte, 8); binary.BigEndian.PutUint64(b, v); return b }
	five := be64(math.Float64bits(5))
	seven, nine, ten := be64(7), be64(9), be64(10)
	ints := []Param{{Value: seven, Binary: true}, {Value: nine, Binary: true}, {Value: ten, Binary: true}, {Value: []byte("{1}")}}
	cases := []struct {
		declared []uint32
		first    []byte
		want     string
	}{
		{nil, seven, "public.blog_post(1) public.blog_post(10) public.blog_post(7) public.blog_post(9)"},
		{[]uint32{20, 20, 23, 1016}, seven, "public.blog_post(1) public.blog_post(10) public.blog_post(7) public.blog_post(9)"},
		{[]uint32{701, 20, 20, 1016}, five, "public.blog_post"},   // float8 5.0
		{[]uint32{20, 1700, 20, 1016}, seven, "public.blog_post"}, // numeric bound
		{[]uint32{20, 20, 20, 1022}, seven, "public.blog_post"},   // float8[]
		{[]uint32{0, 0, 0, 0}, seven, "public.blog_post(1) public.blog_post(10) public.blog_post(7) public.blog_post(9)"},
		{[]uint32{TypeUnknown, TypeUnknown, TypeUnknown, TypeUnknown}, seven, "public.blog_post"}, // the session does not know them
	}
	for _, c := range cases {
		params := append([]Param(nil), ints...)
		params[0].Value = c.first
		for i, oid := range c.declared {
			params[i].Declared = oid
		}
		f, err := stmts[0].Bind(params)
		if err != nil {
			t.Fatal(err)
		}
		if got := keys(f.Reads); got != c.want {
			t.Errorf("declared %v: %s, want %s", c.declared, got, c.want)
		}
	}
}

// TestNeverUnderApproximates checks statements whose reads cannot be
// attributed to tables: each must read everything, not nothing.
func TestNeverUnderApproximates(t *testing.T) {
	a := New(testCatalog(t), Options{})
	env := NewEnv([]string{"public"})
	for _, sql := range []string{
		"SELECT my_stable_reader(1)",
		"SELECT * FROM new_order_fn(1)",
		"SELECT * FROM rich_view",
		"SELECT * FROM nowhere",
		"SELECT query_to_xml('select 1', true, false, '')",
		"CALL app.transfer('a', 'b', 1)",
		"DO $$ BEGIN PERFORM 1; END $$",
		"EXECUTE q(1)",
		"CREATE TABLE x AS SELECT * FROM item",
		"SELECT * FROM item WHERE i_id IN (SELECT undefined_fn())",
		"WITH c AS (SELECT my_stable_reader(1)) SELECT * FROM c",
		"UPDATE item SET i_price = (SELECT my_stable_reader(1)) WHERE i_id = 1",
	} {
		stmts, err := a.Analyze(sql, env)
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		f, err := stmts[0].Bind([]Param{{Value: []byte("1")}})
		if err != nil {
			t.Fatal(err)
		}
		if !f.All {
			t.Errorf("%s: reads %v, want everything", sql, f.Reads)
		}
	}
}

func TestRefusedTwoPhase(t *testing.T) {
	a := New(testCatalog(t), Options{})
	for _, sql := range []string{"PREPARE TRANSACTION 'x'", "COMMIT PREPARED 'x'", "ROLLBACK PREPARED 'x'"} {
		stmts, err := a.Analyze(sql, NewEnv(nil))
		if err != nil {
			t.Fatal(err)
		}
		s := stmts[0]
		if s.Kind != KindRefused || !errors.Is(s.Err(), ErrRefused) || !strings.Contains(s.Err().Error(), "Ordo") || s.Txn.GID != "x" {
			t.Errorf("%s: kind %v err %v", sql, s.Kind, s.Err())
		}
	}
	stmts, _ := a.Analyze("COMMIT", NewEnv(nil))
	if stmts[0].Err() != nil || stmts[0].Updates() {
		t.Error("COMMIT is not refused and does not update")
	}
}

// TestNoBlockNamesWhatPostgreSQLRunsOnlyOutsideBlocks: NoBlock names a
// statement as PostgreSQL's errors do, and only those PostgreSQL never
// runs in a transaction block.
func TestNoBlockNamesWhatPostgreSQLRunsOnlyOutsideBlocks(t *testing.T) {
	a := New(testCatalog(t), Options{})
	for sql, want := range map[string]string{
		"DISCARD ALL": "DISCARD ALL", "VACUUM t": "VACUUM", "ALTER SYSTEM SET work_mem = '1MB'": "ALTER SYSTEM",
		"CREATE DATABASE d": "CREATE DATABASE", "DROP DATABASE d": "DROP DATABASE",
		"CREATE TABLESPACE s LOCATION '/x'": "CREATE TABLESPACE", "DROP TABLESPACE s": "DROP TABLESPACE",
		"DISCARD PLANS": "", "ANALYZE t": "", "DEALLOCATE ALL": "", "SELECT 1": "", "CHECKPOINT": "",
	} {
		stmts, err := a.Analyze(sql, NewEnv(nil))
		if err != nil {
			t.Fatal(err)
		}
		if got := stmts[0].NoBlock; got != want {
			t.Errorf("%s: NoBlock %q, want %q", sql, got, want)
		}
	}
}

// TestWarnsOutsideBlockNamesWhatPostgreSQLWarnsAbout: the statements
// PostgreSQL runs outside a transaction block with a warning naming them
// (WarnNoTransactionBlock), as it names them.
func TestWarnsOutsideBlockNamesWhatPostgreSQLWarnsAbout(t *testing.T) {
	a := New(testCatalog(t), Options{})
	for sql, want := range map[string]string{
		"SET LOCAL work_mem = '1MB'": "SET LOCAL", "set local work_mem to default": "SET LOCAL",
		"SET TRANSACTION ISOLATION LEVEL SERIALIZABLE": "SET TRANSACTION", "SET TRANSACTION SNAPSHOT '00000003-1'": "SET TRANSACTION",
		"SET CONSTRAINTS ALL DEFERRED": "SET CONSTRAINTS",
		"SET work_mem = '1MB'":         "", "RESET work_mem": "", "SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY": "", "SELECT 1": "",
	} {
		stmts, err := a.Analyze(sql, NewEnv(nil))
		if err != nil {
			t.Fatal(err)
		}
		if got := stmts[0].WarnsOutsideBlock; got != want {
			t.Errorf("%s: WarnsOutsideBlock %q, want %q", sql, got, want)
		}
	}
}

// TestWhatAStatementFrees: the prepared statements a DEALLOCATE or DISCARD
// frees come from the parse tree, named as PostgreSQL folds them; a
// comment or a quoted name does not change them.
func TestWhatAStatementFrees(t *testing.T) {
	a := New(testCatalog(t), Options{})
	type frees struct {
		name          string
		all, discards bool
	}
	for sql, want := range map[string]frees{
		"DEALLOCATE ALL": {all: true}, "deallocate prepare all": {all: true},
		"DISCARD ALL": {all: true, discards: true}, "DISCARD PLANS /* all */": {},
		"DISCARD TEMP": {}, "DEALLOCATE Foo": {name: "foo"}, "DEALLOCATE PREPARE \"Foo Bar\"": {name: "Foo Bar"},
		`DEALLOCATE "a""b" -- all`: {name: `a"b`}, "SELECT 'deallocate all'": {},
	} {
		stmts, err := a.Analyze(sql, NewEnv(nil))
		if err != nil {
			t.Fatal(err)
		}
		if got := (frees{stmts[0].Deallocates, stmts[0].FreesAll, stmts[0].DiscardsAll}); got != want {
			t.Errorf("%s: frees %+v, want %+v", sql, got, want)
		}
	}
}

func TestSetvalMakesAnUpdate(t *testing.T) {
	a := New(&swapSource{testCatalog(t)}, Options{})
	env := NewEnv([]string{"public"})
	for _, sql := range []string{
		"SELECT setval('item_seq', 42)",
		"SELECT pg_catalog.setval('item_seq', (SELECT max(i_id) FROM item), true)",
	} {
		st, err := a.Analyze(sql, env)
		if err != nil {
			t.Fatal(err)
		}
		if !st[0].SetsSequence || !st[0].Updates() {
			t.Fatalf("%s: SetsSequence=%v Updates=%v (kind %v), want both", sql, st[0].SetsSequence, st[0].Updates(), st[0].Kind)
		}
	}
	st, _ := a.Analyze("SELECT nextval('item_seq')", env)
	if st[0].SetsSequence {
		t.Fatal("nextval does not set a sequence")
	}
}

// TestSetConfigOfOrdoSettings: a call of set_config that may set one of
// Ordo's settings is marked, so the session reads them again; which
// setting is read from the text, never from the template of a call that
// set another one (the second text below has the first one's
// fingerprint).
func TestSetConfigOfOrdoSettings(t *testing.T) {
	a := New(&swapSource{testCatalog(t)}, Options{CacheSize: 100})
	env := NewEnv([]string{"public"})
	for _, c := range []struct {
		sql  string
		want bool
	}{
		{"SELECT set_config('request.jwt.claims', 'x', true)", false},
		{"SELECT set_config('ordo.read_consistency', 'sync', true)", true},
		{"SELECT set_config('request.jwt.claims', 'y', true)", false},
		{"SELECT set_config('ordo.read_consistency', 'sync', false)", true},
		{"SELECT pg_catalog.set_config('ORDO.read_consistency'::text, 'sync', false)", true},
		{"SELECT set_config($1, $2, false)", true},
		{"SELECT current_setting('ordo.read_consistency')", false},
	} {
		st, err := a.Analyze(c.sql, env)
		if err != nil {
			t.Fatal(err)
		}
		if st[0].SetsOrdoConfig != c.want {
			t.Errorf("%s: SetsOrdoConfig %v, want %v", c.sql, st[0].SetsOrdoConfig, c.want)
		}
	}
}

// TestOrdoObjectsAreRefused: clients may read Ordo's bookkeeping but not
// change it (rows in _ordo.applied would make a node skip transactions it
// never applied); what only reads or calls it stays allowed.
func TestOrdoObjectsAreRefused(t *testing.T) {
	a := New(&swapSource{testCatalog(t)}, Options{CacheSize: 16})
	env := NewEnv([]string{"public"})
	for _, sql := range []string{
		"INSERT INTO _ordo.applied (seqno, gid) VALUES (1000000, 'x')",
		"COPY _ordo.applied (seqno, gid) FROM stdin",
		"DELETE FROM _ordo.aborted",
		"UPDATE _ordo.cluster_config SET value = 'x'",
		"TRUNCATE _ordo.applied",
		"CREATE SCHEMA _ordo",
		"DROP SCHEMA _ordo CASCADE",
		"ALTER SCHEMA _ordo RENAME TO x",
		"ALTER SCHEMA _ordo OWNER TO nobody",
		"CREATE TABLE _ordo.mine (x int)",
		"ALTER TABLE _ordo.applied ADD COLUMN x int",
		"ALTER TABLE ONLY _ordo.applied ADD CONSTRAINT applied_pkey PRIMARY KEY (seqno)",
		"CREATE INDEX applied_label ON _ordo.applied (label)",
		"DROP TABLE _ordo.applied",
		"CREATE OR REPLACE FUNCTION _ordo.prepare_mark() RETURNS bool LANGUAGE sql AS 'SELECT true'",
		"DROP FUNCTION _ordo.ddl_end()",
		"ALTER FUNCTION _ordo.ddl_end() OWNER TO nobody",
		"CREATE EVENT TRIGGER ordo_ddl_end ON ddl_command_end EXECUTE FUNCTION _ordo.ddl_end()",
		"ALTER EVENT TRIGGER ordo_ddl_end DISABLE",
		"DROP EVENT TRIGGER ordo_ddl_dropped",
		"CREATE PUBLICATION ordo FOR ALL TABLES",
		"ALTER PUBLICATION ordo OWNER TO nobody",
		"DROP PUBLICATION ordo",
		"GRANT SELECT ON _ordo.applied TO nobody",
		"REVOKE USAGE ON SCHEMA _ordo FROM PUBLIC",
		"REVOKE ALL ON ALL FUNCTIONS IN SCHEMA _ordo FROM PUBLIC",
		"REVOKE EXECUTE ON FUNCTION _ordo.prepare_mark() FROM PUBLIC",
		"ALTER TABLE item SET SCHEMA _ordo",
	} {
		st, err := a.Analyze(sql, env)
		require.NoError(t, err, sql)
		require.Len(t, st, 1, sql)
		require.Equal(t, KindRefused, st[0].Kind, sql)
		require.Equal(t, "42501", st[0].RefusedCode, sql)
		require.Contains(t, st[0].Reason, "is Ordo's own", sql)
	}
	for _, sql := range []string{
		"SELECT * FROM _ordo.applied",
		"SELECT _ordo.txn_status('x')",
		"COPY _ordo.applied TO stdout",
		"CREATE VIEW mine AS SELECT count(*) FROM _ordo.applied",
		"CREATE TABLE t_ordo (x text DEFAULT _ordo.txn_status('a'))",
		"CREATE EVENT TRIGGER my_trigger ON ddl_command_end EXECUTE FUNCTION public.f()",
		"CREATE PUBLICATION mine FOR ALL TABLES",
		"CREATE SCHEMA ordo",
		"CREATE EVENT TRIGGER ordo_audit ON ddl_command_end EXECUTE FUNCTION public.f()",
		"DROP EVENT TRIGGER ordo_audit",
		"GRANT SELECT ON item TO nobody",
		"REVOKE ALL ON ALL TABLES IN SCHEMA public FROM PUBLIC",
	} {
		st, err := a.Analyze(sql, env)
		require.NoError(t, err, sql)
		require.Len(t, st, 1, sql)
		require.NotEqual(t, KindRefused, st[0].Kind, "%s: %s", sql, st[0].Reason)
	}
}

func TestLiteralDefaults(t *testing.T) {
	a := New(&swapSource{testCatalog(t)}, Options{CacheSize: 16})
	env := NewEnv([]string{"public"})
	sql := "ALTER TABLE item ADD COLUMN made timestamptz NOT NULL DEFAULT now(), ADD COLUMN n int DEFAULT -1, ADD COLUMN who text DEFAULT current_user, ADD COLUMN k int DEFAULT 7::int"
	st, err := a.Analyze(sql, env)
	require.NoError(t, err)
	require.Equal(t, []string{"made", "who"}, st[0].FastDefaults)
	out, err := LiteralDefaults(sql, map[string]string{"made": "2026-11-28 23:40:00+00", "who": "o'brien"})
	require.NoError(t, err)
	require.Equal(t, "ALTER TABLE item ADD COLUMN made timestamptz NOT NULL DEFAULT ('2026-11-28 23:40:00+00'::timestamptz), "+
		"ADD COLUMN n int DEFAULT -1, ADD COLUMN who text DEFAULT ('o''brien'::text), ADD COLUMN k int DEFAULT (7::int), "+
		"ALTER COLUMN made SET DEFAULT now(), ALTER COLUMN who SET DEFAULT current_user", out)
	same, err := LiteralDefaults("ALTER TABLE item ADD COLUMN z int", map[string]string{"made": "x"})
	require.NoError(t, err)
	require.Equal(t, "ALTER TABLE item ADD COLUMN z int", same)
}

func TestAlterTypeUsingWhatDiffersPerNode(t *testing.T) {
	a := New(&swapSource{testCatalog(t)}, Options{CacheSize: 16})
	env := NewEnv([]string{"public"})
	for sql, refused := range map[string]bool{
		"ALTER TABLE item ALTER COLUMN i_price TYPE text USING random()::text":           true,
		"ALTER TABLE item ALTER COLUMN i_price TYPE timestamptz USING now()":             true,
		"ALTER TABLE item ALTER COLUMN i_name TYPE text USING current_user":              true,
		"ALTER TABLE item ALTER COLUMN i_name TYPE text USING (SELECT max(x) FROM item)": true,
		"ALTER TABLE item ALTER COLUMN i_price TYPE bigint USING i_price::bigint":        false,
		"ALTER TABLE item ALTER COLUMN i_name TYPE text USING lower(trim(i_name))":       false,
		"ALTER TABLE item ALTER COLUMN i_name TYPE numeric USING length(i_name)":         false,
		"ALTER TABLE item ALTER COLUMN i_name TYPE text USING to_char(now(), 'YYYY')":    true,
		"ALTER TABLE item ALTER COLUMN i_name TYPE text USING pg_backend_pid()::text":    true,
		"ALTER TABLE item ALTER COLUMN i_name TYPE text USING current_setting('x')":      true,
		"ALTER TABLE item ALTER COLUMN i_price TYPE bigint":                              false,
	} {
		st, err := a.Analyze(sql, env)
		require.NoError(t, err, sql)
		require.Equal(t, refused, st[0].Kind == KindRefused, "%s: %s", sql, st[0].Reason)
	}
}
