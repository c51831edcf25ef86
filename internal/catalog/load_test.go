package catalog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

const schemaSQL = `
CREATE SCHEMA app;
CREATE SCHEMA "Odd Schema";
CREATE TABLE app.warehouse (w_id int PRIMARY KEY, w_name varchar(10), w_tax numeric(4,4));
CREATE TABLE app.district (d_id int, d_w_id int REFERENCES app.warehouse, d_name text, PRIMARY KEY (d_w_id, d_id));
CREATE TABLE app.events (ts timestamptz, msg text);
CREATE TABLE "Odd Schema"."Odd Table" ("Id" bigint PRIMARY KEY, "Value" text);
CREATE TABLE public.district (x int PRIMARY KEY);
CREATE TABLE app.kv (k uuid, flag bool, ch char(3), PRIMARY KEY (flag, k));
CREATE FUNCTION app.reader(int) RETURNS int LANGUAGE sql STABLE AS 'SELECT count(*)::int FROM app.events';
CREATE FUNCTION app.pure(int) RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT $1 + 1';
CREATE FUNCTION app.writer() RETURNS void LANGUAGE plpgsql AS 'BEGIN DELETE FROM app.events; END';
CREATE PROCEDURE app.proc() LANGUAGE sql AS 'SELECT 1';
CREATE VIEW app.wd AS SELECT * FROM app.warehouse JOIN app.district ON d_w_id = w_id;
CREATE VIEW app.wd2 AS SELECT w_name, e.msg FROM app.wd, app.events e;
CREATE VIEW app.pure_view AS SELECT app.pure(w_id) FROM app.warehouse;
CREATE VIEW app.opaque_view AS SELECT app.reader(w_id) FROM app.warehouse;
CREATE FUNCTION app.logs(int) RETURNS int LANGUAGE plpgsql AS 'BEGIN INSERT INTO app.events VALUES (now(), $1::text); RETURN $1; END';
CREATE VIEW app.writing_view AS SELECT app.logs(w_id) FROM app.warehouse;
CREATE VIEW app.over_writing_view AS SELECT * FROM app.writing_view;
CREATE OPERATOR app.@@@ (FUNCTION = app.logs, RIGHTARG = int);
CREATE VIEW app.operator_view AS SELECT OPERATOR(app.@@@) w_id FROM app.warehouse;
CREATE OPERATOR app.### (FUNCTION = app.reader, RIGHTARG = int);
CREATE VIEW app.reading_operator_view AS SELECT OPERATOR(app.###) w_id FROM app.warehouse;
CREATE FUNCTION app.count_events(int, int) RETURNS int LANGUAGE sql STABLE AS 'SELECT $1 + count(*)::int FROM app.events';
CREATE AGGREGATE app.reading_agg(int) (SFUNC = app.count_events, STYPE = int, INITCOND = '0');
CREATE FUNCTION app.log_events(int, int) RETURNS int LANGUAGE plpgsql AS 'BEGIN INSERT INTO app.events VALUES (now(), $2::text); RETURN $1; END';
CREATE AGGREGATE app.pure_final_agg(int) (SFUNC = int4pl, STYPE = int, FINALFUNC = app.pure);
CREATE AGGREGATE app.logging_agg(int) (SFUNC = app.log_events, STYPE = int);
CREATE AGGREGATE app.pure_agg(int) (SFUNC = int4pl, STYPE = int);
CREATE MATERIALIZED VIEW app.mv AS SELECT count(*) FROM app.events;
CREATE FUNCTION app.trg() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NEW; END';
CREATE TRIGGER t BEFORE INSERT ON app.events FOR EACH ROW EXECUTE FUNCTION app.trg();
`

func connect(t *testing.T) (*pgx.Conn, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn, ctx
}

func TestLoadFromPostgreSQL(t *testing.T) {
	conn, ctx := connect(t)
	if _, err := conn.Exec(ctx, schemaSQL); err != nil {
		t.Fatal(err)
	}
	granules := map[string]string{"app.warehouse": "w_id", "app.district": "d_w_id"}
	d, err := Load(ctx, conn, granules)
	if err != nil {
		t.Fatal(err)
	}
	cat, err := New(d, 1)
	if err != nil {
		t.Fatal(err)
	}

	district, ok := cat.Lookup(Name{"app", "district"})
	if !ok || district.Kind != KindTable {
		t.Fatalf("app.district: %+v %v", district, ok)
	}
	if !slices.Equal(district.PK, []string{"d_w_id", "d_id"}) {
		t.Errorf("PK in key order: got %v", district.PK)
	}
	if district.Granule != "d_w_id" {
		t.Errorf("granule: %q", district.Granule)
	}
	if c, _ := district.Column("d_name"); c.Type != "text" {
		t.Errorf("d_name type %q", c.Type)
	}
	kv, _ := cat.Lookup(Name{"app", "kv"})
	if !slices.Equal(kv.PK, []string{"flag", "k"}) {
		t.Errorf("kv PK %v", kv.PK)
	}
	for col, typ := range map[string]string{"k": "uuid", "flag": "bool", "ch": "bpchar"} {
		if c, _ := kv.Column(col); c.Type != typ {
			t.Errorf("kv.%s type %q, want %q", col, c.Type, typ)
		}
	}
	odd, ok := cat.Lookup(Name{"Odd Schema", "Odd Table"})
	if !ok || !slices.Equal(odd.PK, []string{"Id"}) {
		t.Errorf("quoted names: %+v", odd)
	}
	if ev, _ := cat.Lookup(Name{"app", "events"}); ev == nil || len(ev.PK) != 0 || !ev.Triggers {
		t.Errorf("events: no PK, a trigger: %+v", ev)
	}
	if district.Triggers {
		t.Error("foreign-key triggers are internal and do not count")
	}
	// Row security whose policy reads another table, or only a setting.
	if _, err := conn.Exec(ctx, `
CREATE TABLE app.grants (doc int, who text);
CREATE TABLE app.docs (id int PRIMARY KEY, body text);
ALTER TABLE app.docs ENABLE ROW LEVEL SECURITY;
CREATE POLICY by_grant ON app.docs USING (EXISTS (SELECT 1 FROM app.grants g WHERE g.doc = id AND g.who = current_user));
CREATE TABLE app.notes (id int PRIMARY KEY, tenant text);
ALTER TABLE app.notes ENABLE ROW LEVEL SECURITY;
CREATE POLICY by_tenant ON app.notes USING (tenant = current_setting('app.tenant', true));
CREATE TABLE app.audited (id int PRIMARY KEY);
ALTER TABLE app.audited ENABLE ROW LEVEL SECURITY;
CREATE POLICY logged ON app.audited USING (app.logs(id) > 0);
CREATE FUNCTION app.stable_reader(int, int) RETURNS bool LANGUAGE sql STABLE AS 'SELECT $1 > $2 + count(*) FROM app.grants';
CREATE OPERATOR app.>>> (FUNCTION = app.stable_reader, LEFTARG = int, RIGHTARG = int);
CREATE TABLE app.by_op (id int PRIMARY KEY);
ALTER TABLE app.by_op ENABLE ROW LEVEL SECURITY;
CREATE POLICY by_op ON app.by_op USING (id OPERATOR(app.>>>) 0);
CREATE TABLE app.by_writing_view (id int PRIMARY KEY);
ALTER TABLE app.by_writing_view ENABLE ROW LEVEL SECURITY;
CREATE POLICY wv ON app.by_writing_view USING (EXISTS (SELECT 1 FROM app.writing_view));
CREATE TABLE app.by_aggregate (id int PRIMARY KEY);
ALTER TABLE app.by_aggregate ENABLE ROW LEVEL SECURITY;
CREATE POLICY agg ON app.by_aggregate USING ((SELECT app.logging_agg(1)) > 0);
CREATE VIEW app.over_audited AS SELECT id FROM app.audited;
CREATE VIEW app.over_docs AS SELECT id FROM app.docs;
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE VIEW app.trgm_view AS SELECT msg % 'x' AS similar FROM app.events`); err != nil {
		t.Fatal(err)
	}
	if d, err = Load(ctx, conn, granules); err != nil {
		t.Fatal(err)
	}
	if cat, err = New(d, 2); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][2]bool{"docs": {true, false}, "notes": {false, false}, "grants": {false, false},
		"district": {false, false}, "audited": {true, true}, "by_op": {true, false},
		"by_writing_view": {true, true}, "by_aggregate": {true, true}} {
		if r, _ := cat.Lookup(Name{"app", name}); r == nil || [2]bool{r.PolicyReads, r.PolicyWrites} != want {
			t.Errorf("app.%s: PolicyReads, PolicyWrites %+v, want %v", name, r, want)
		}
	}
	// A view runs its tables' policies; an operator in C (pg_trgm's %)
	// reads nothing, in a view as in a query.
	for name, want := range map[string][2]bool{"over_audited": {true, true}, "over_docs": {true, false}, "trgm_view": {false, false}} {
		if r, _ := cat.Lookup(Name{"app", name}); r == nil || [2]bool{r.Opaque, r.MayWrite} != want {
			t.Errorf("app.%s: Opaque, MayWrite %+v, want %v", name, r, want)
		}
	}
	// A column whose collation is not deterministic has no type: its
	// equal values may differ in bytes. (A column of a type without
	// collation has none to look up.)
	ci, wantCols := `CREATE COLLATION app.ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false)`, "[{id int4} {n } {m text}]"
	if _, err := conn.Exec(ctx, ci); err != nil {
		// PostgreSQL built without ICU (the PostgreSQL 18 wheel) has no
		// collation that is not deterministic: a deterministic one
		// must keep its type.
		t.Logf("%v: checking a deterministic collation only", err)
		ci, wantCols = `CREATE COLLATION app.ci (provider = libc, locale = 'C')`, "[{id int4} {n text} {m text}]"
		if _, err := conn.Exec(ctx, ci); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE app.names (id int PRIMARY KEY, n text COLLATE app.ci, m text COLLATE "C")`); err != nil {
		t.Fatal(err)
	}
	names, err := Load(ctx, conn, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range names.Tables {
		if tb.Schema == "app" && tb.Name == "names" {
			if got := fmt.Sprint(tb.Columns); got != wantCols {
				t.Errorf("app.names columns %s", got)
			}
		}
	}
	if mv, _ := cat.Lookup(Name{"app", "mv"}); mv == nil || mv.Kind != KindTable {
		t.Errorf("materialized view is read like a table: %+v", mv)
	}

	// Views resolve to base tables through views over views.
	wd2, _ := cat.Lookup(Name{"app", "wd2"})
	if wd2 == nil || wd2.Kind != KindView || wd2.Opaque {
		t.Fatalf("app.wd2: %+v", wd2)
	}
	want := []Name{{"app", "district"}, {"app", "events"}, {"app", "warehouse"}}
	if !slices.Equal(wd2.Bases, want) {
		t.Errorf("wd2 bases %v, want %v", wd2.Bases, want)
	}
	if v, _ := cat.Lookup(Name{"app", "pure_view"}); v == nil || v.Opaque {
		t.Errorf("a view calling an immutable function is not opaque: %+v", v)
	}
	if v, _ := cat.Lookup(Name{"app", "opaque_view"}); v == nil || !v.Opaque || v.MayWrite {
		t.Errorf("a view calling a stable SQL function that reads tables must be opaque, and cannot write: %+v", v)
	}
	// Reading a view that calls a volatile function may write (taken for
	// a read, it wrote on one node alone), also through another view or
	// an operator.
	for _, n := range []string{"writing_view", "over_writing_view", "operator_view"} {
		if v, _ := cat.Lookup(Name{"app", n}); v == nil || !v.Opaque || !v.MayWrite {
			t.Errorf("app.%s may write: %+v", n, v)
		}
	}
	if v, _ := cat.Lookup(Name{"app", "reading_operator_view"}); v == nil || !v.Opaque || v.MayWrite {
		t.Errorf("a view using an operator whose function reads tables is opaque: %+v", v)
	}
	// PostgreSQL records no dependencies on pinned system catalogs, so a
	// system view has no bases (see Load).
	if v, _ := cat.Resolve([]string{"public"}, "", "pg_tables"); v == nil || v.Kind != KindView || v.Opaque {
		t.Errorf("pg_catalog views resolve: %+v", v)
	}

	// Functions: volatility and whether they may read data.
	for name, w := range map[Name]struct {
		vol   Volatility
		reads bool
	}{
		{"app", "reader"}:              {Stable, true},
		{"app", "pure"}:                {Immutable, false},
		{"app", "writer"}:              {Volatile, true},
		{"app", "proc"}:                {Volatile, true},
		{"pg_catalog", "now"}:          {Stable, false},
		{"pg_catalog", "random"}:       {Volatile, false},
		{"pg_catalog", "lower"}:        {Immutable, false},
		{"pg_catalog", "query_to_xml"}: {Volatile, true},
		{"pg_catalog", "ts_stat"}:      {Volatile, true},
		// An aggregate is what its support functions are (PostgreSQL
		// marks every one IMMUTABLE).
		{"app", "reading_agg"}:    {Stable, true},
		{"app", "pure_final_agg"}: {Immutable, false},
		{"app", "logging_agg"}:    {Volatile, true},
		{"app", "pure_agg"}:       {Immutable, false},
		{"pg_catalog", "sum"}:     {Immutable, false},
	} {
		f, ok := cat.Func(nil, name.Schema, name.Name)
		if !ok || f.Volatility != w.vol || f.ReadsData != w.reads {
			t.Errorf("function %s: %+v, want volatility %c reads %v", name, f, w.vol, w.reads)
		}
	}

	// search_path resolution: pg_catalog first, then the path in order.
	if r, _ := cat.Resolve([]string{"app", "public"}, "", "district"); r == nil || r.Name.Schema != "app" {
		t.Errorf("app first: %+v", r)
	}
	if r, _ := cat.Resolve([]string{"public", "app"}, "", "district"); r == nil || r.Name.Schema != "public" {
		t.Errorf("public first: %+v", r)
	}
	if r, _ := cat.Resolve(SearchPath(`"$user", public`, "app"), "", "warehouse"); r == nil || r.Name.Schema != "app" {
		t.Errorf("$user: %+v", r)
	}
	if _, ok := cat.Resolve([]string{"public"}, "", "warehouse"); ok {
		t.Error("app.warehouse must not resolve without app in the path")
	}
	if r, _ := cat.Resolve([]string{"public"}, "", "pg_class"); r == nil || r.Name.Schema != "pg_catalog" {
		t.Errorf("implicit pg_catalog: %+v", r)
	}

	// Bad granule configuration is refused with the table named.
	d.Granules = map[string]string{"app.events": "nope"}
	if _, err := New(d, 2); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad granule column: %v", err)
	}
	d.Granules = map[string]string{"app.nosuch": "x"}
	if _, err := New(d, 2); !errors.Is(err, ErrInvalid) {
		t.Errorf("granule for unknown table: %v", err)
	}
}

// TestCacheRefreshAfterDDL checks that a refresh after DDL sees the change
// under a new version, and that a failed load keeps the old snapshot.
func TestCacheRefreshAfterDDL(t *testing.T) {
	conn, ctx := connect(t)
	if _, err := conn.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS refresh; CREATE TABLE refresh.a (id int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	fail := false
	c := NewCache(func(ctx context.Context) (Description, error) {
		if fail {
			return Description{}, errors.New("connection lost")
		}
		return Load(ctx, conn, nil)
	})
	if c.Current() != nil {
		t.Fatal("empty cache must have no catalog")
	}
	v1, err := c.Refresh(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := v1.Lookup(Name{"refresh", "b"}); ok {
		t.Fatal("refresh.b exists before it is created")
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE refresh.b (x int, y text, PRIMARY KEY (y, x)); ALTER TABLE refresh.a ADD COLUMN note text`); err != nil {
		t.Fatal(err)
	}
	v2, err := c.Refresh(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v2.Version() <= v1.Version() || c.Current() != v2 {
		t.Fatalf("versions %d then %d", v1.Version(), v2.Version())
	}
	b, ok := v2.Lookup(Name{"refresh", "b"})
	if !ok || !slices.Equal(b.PK, []string{"y", "x"}) {
		t.Fatalf("refresh.b after DDL: %+v", b)
	}
	if a, _ := v2.Lookup(Name{"refresh", "a"}); a == nil || len(a.Columns) != 2 {
		t.Fatalf("refresh.a columns after ALTER: %+v", a)
	}
	fail = true
	if _, err := c.Refresh(ctx); err == nil || c.Current() != v2 {
		t.Fatalf("failed refresh: err %v, current changed: %v", err, c.Current() != v2)
	}
}

// TestLoaderReadsTheSystemSchemasOnlyWhenTheyChange: a node refreshes its
// catalog after every DDL while its other commits wait, so Loader keeps
// its connection and the system schemas' description between refreshes,
// and must still describe exactly what Load does.
func TestLoaderReadsTheSystemSchemasOnlyWhenTheyChange(t *testing.T) {
	conn, ctx := connect(t)
	if _, err := conn.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS loader; CREATE TABLE loader.a (id int PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	granules := map[string]string{"loader.a": "id"}
	connects := 0
	l := NewLoader(func(ctx context.Context) (*pgx.Conn, error) {
		connects++
		return pgx.Connect(ctx, dsn)
	}, granules)
	t.Cleanup(l.Close)
	same := func(step string) {
		t.Helper()
		got, err := l.Load(ctx)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		want, err := Load(ctx, conn, granules)
		if err != nil {
			t.Fatal(err)
		}
		if g, w := describe(got), describe(want); !slices.Equal(g, w) {
			t.Fatalf("%s: the loader's description differs from Load's (%d against %d lines)", step, len(g), len(w))
		}
		if _, err := New(got, 1); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	same("first load")
	if _, err := conn.Exec(ctx, `CREATE TABLE loader.b (x int, y text, PRIMARY KEY (y, x));
		CREATE VIEW loader.v AS SELECT * FROM loader.b, information_schema.tables;
		CREATE FUNCTION loader.f() RETURNS int LANGUAGE sql STABLE AS 'SELECT 1'`); err != nil {
		t.Fatal(err)
	}
	same("after user DDL")
	if l.systemLoads != 1 || connects != 1 {
		t.Fatalf("after two loads: %d loads of the system schemas, %d connections; want 1 and 1", l.systemLoads, connects)
	}
	if _, err := conn.Exec(ctx, `CREATE FUNCTION pg_catalog.ordo_loader_test() RETURNS int LANGUAGE sql AS 'SELECT 1'`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = conn.Exec(context.Background(), `DROP FUNCTION pg_catalog.ordo_loader_test()`) })
	same("after a function created in pg_catalog")
	if l.systemLoads != 2 {
		t.Fatalf("a function created in pg_catalog: %d loads of the system schemas, want 2", l.systemLoads)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND datname = current_database() AND backend_type = 'client backend'`); err != nil {
		t.Fatal(err)
	}
	same("after the connection was terminated") // tried again on a new one
	if connects != 2 {
		t.Fatalf("%d connections after one was terminated, want 2", connects)
	}
}

// describe lists a description's objects, one line each, sorted.
func describe(d Description) []string {
	var out []string
	for _, t := range d.Tables {
		out = append(out, fmt.Sprintf("table %s.%s %v pk=%v trig=%v", t.Schema, t.Name, t.Columns, t.PK, t.Triggers))
	}
	for _, v := range d.Views {
		out = append(out, fmt.Sprintf("view %s.%s %v uses=%v funcs=%v", v.Schema, v.Name, v.Columns, v.Uses, v.Functions))
	}
	for _, f := range d.Functions {
		out = append(out, fmt.Sprintf("func %+v", f))
	}
	out = append(out, fmt.Sprint(d.Granules))
	slices.Sort(out)
	return out
}

// TestLoadUserCodeOnWrites: an INSERT or UPDATE runs the user functions
// of the table's column defaults, check constraints and columns' domains'
// checks (directly or through an operator), and those of its partitions
// and children; one that may read data makes the table's WriteCode.
// Immutable functions (the only ones PostgreSQL allows in generated
// columns and indexes), built-in ones and C ones (extensions') do not.
func TestLoadUserCodeOnWrites(t *testing.T) {
	conn, ctx := connect(t)
	if _, err := conn.Exec(ctx, `
CREATE SCHEMA uc;
CREATE TABLE uc.limits (n int);
CREATE TABLE uc.limits_view_base (id int);
CREATE FUNCTION uc.reads(int) RETURNS int LANGUAGE sql STABLE AS 'SELECT coalesce(max(n), 0) FROM uc.limits';
CREATE FUNCTION uc.ok(int) RETURNS bool LANGUAGE sql STABLE AS 'SELECT $1 <= (SELECT coalesce(max(n), 0) FROM uc.limits)';
CREATE FUNCTION uc.pure(int) RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT $1 + 1';
CREATE FUNCTION uc.below(int, int) RETURNS bool LANGUAGE sql STABLE AS 'SELECT $1 < $2 + (SELECT count(*) FROM uc.limits)';
CREATE OPERATOR uc.<<< (FUNCTION = uc.below, LEFTARG = int, RIGHTARG = int);
CREATE DOMAIN uc.capped AS int CHECK (uc.ok(VALUE));
CREATE DOMAIN uc.capped2 AS uc.capped;
CREATE TYPE uc.pair AS (a uc.capped, b int);
CREATE TABLE uc.by_default (id int PRIMARY KEY, v int DEFAULT uc.reads(1));
CREATE TABLE uc.by_check (id int PRIMARY KEY, v int CHECK (uc.ok(v)));
CREATE TABLE uc.by_operator (id int PRIMARY KEY, v int CHECK (v OPERATOR(uc.<<<) 3));
CREATE TABLE uc.by_domain (id int PRIMARY KEY, v uc.capped2);
CREATE TABLE uc.by_domain_array (id int PRIMARY KEY, v uc.capped[]);
CREATE TABLE uc.by_composite (id int PRIMARY KEY, v uc.pair);
CREATE TABLE uc.parted (id int, v int) PARTITION BY RANGE (id);
CREATE TABLE uc.part1 PARTITION OF uc.parted FOR VALUES FROM (0) TO (10);
CREATE TABLE uc.part2 PARTITION OF uc.parted FOR VALUES FROM (10) TO (20);
ALTER TABLE uc.part1 ADD CHECK (uc.ok(v));
CREATE TABLE uc.parent (id int, v int);
CREATE TABLE uc.child (w int CHECK (uc.ok(w))) INHERITS (uc.parent);
CREATE TABLE uc.pure (id int PRIMARY KEY, v int DEFAULT uc.pure(1) CHECK (uc.pure(v) > 0), w timestamptz DEFAULT now(),
  g int GENERATED ALWAYS AS (uc.pure(v)) STORED);
CREATE INDEX ON uc.pure (uc.pure(v));
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE TABLE uc.by_c_default (id int PRIMARY KEY, v real DEFAULT set_limit(0.3));
CREATE TABLE uc.fk_parent (id int PRIMARY KEY);
CREATE TABLE uc.fk_child (id int PRIMARY KEY, p int REFERENCES uc.fk_parent ON DELETE SET NULL ON UPDATE CASCADE CHECK (uc.ok(p)));
CREATE TABLE uc.fk_grand (id int PRIMARY KEY);
CREATE TABLE uc.fk_mid (id int PRIMARY KEY, g int REFERENCES uc.fk_grand ON DELETE CASCADE);
CREATE TABLE uc.fk_leaf (id int PRIMARY KEY, m int REFERENCES uc.fk_mid ON DELETE SET DEFAULT DEFAULT uc.reads(1));
CREATE TABLE uc.fk_plain (id int PRIMARY KEY, p int REFERENCES uc.fk_parent);
CREATE VIEW uc.v AS SELECT id FROM uc.limits_view_base;
CREATE FUNCTION uc.audit() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NEW; END$$;
CREATE TABLE uc.tparted (id int, v int) PARTITION BY RANGE (id);
CREATE TABLE uc.tpart1 PARTITION OF uc.tparted FOR VALUES FROM (0) TO (10);
CREATE TRIGGER audit BEFORE INSERT ON uc.tpart1 FOR EACH ROW EXECUTE FUNCTION uc.audit();
CREATE TABLE uc.tparent (id int PRIMARY KEY);
CREATE TABLE uc.tchild (id int PRIMARY KEY, p int REFERENCES uc.tparent ON DELETE CASCADE);
CREATE TRIGGER audit BEFORE DELETE ON uc.tchild FOR EACH ROW EXECUTE FUNCTION uc.audit();
CREATE TABLE uc.tplain_parent (id int PRIMARY KEY);
CREATE TABLE uc.tplain_child (id int PRIMARY KEY, p int REFERENCES uc.tplain_parent);
CREATE TRIGGER audit BEFORE DELETE ON uc.tplain_child FOR EACH ROW EXECUTE FUNCTION uc.audit();
CREATE VIEW uc.vtrig AS SELECT id FROM uc.limits_view_base;
CREATE FUNCTION uc.instead() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NEW; END$$;
CREATE TRIGGER instead INSTEAD OF INSERT ON uc.vtrig FOR EACH ROW EXECUTE FUNCTION uc.instead();
CREATE VIEW uc.vrule AS SELECT id FROM uc.limits_view_base;
CREATE RULE r AS ON INSERT TO uc.vrule DO INSTEAD INSERT INTO uc.limits VALUES (NEW.id);
CREATE DOMAIN uc.cappeds AS int[] CHECK (uc.ok(VALUE[1]));
CREATE TYPE uc.crange AS RANGE (subtype = uc.capped);
CREATE TABLE uc.rowt (a uc.capped, b int);
CREATE DOMAIN uc.text AS text CHECK (uc.ok(length(VALUE)));`); err != nil {
		t.Fatal(err)
	}
	cat := loaded(ctx, t, conn, 1)
	for name, want := range map[string][2]bool{ // WriteCode, DeleteCode
		"by_default": {true, false}, "by_check": {true, false}, "by_operator": {true, false}, "by_domain": {true, false},
		"by_domain_array": {true, false}, "by_composite": {true, false},
		"part1": {true, false}, "parted": {true, false}, "part2": {false, false}, "child": {true, false}, "parent": {true, false},
		"pure": {false, false}, "limits": {false, false}, "by_c_default": {false, false},
		// ON DELETE SET NULL and ON UPDATE CASCADE into a checked child;
		// ON DELETE CASCADE into a table whose rows ON DELETE SET DEFAULT
		// gives a reading default.
		"fk_child": {true, false}, "fk_parent": {true, true}, "fk_leaf": {true, false}, "fk_mid": {false, true}, "fk_grand": {false, true},
		"fk_plain": {false, false},
	} {
		r, _ := cat.Lookup(Name{"uc", name})
		if r == nil || r.WriteCode != want[0] || r.DeleteCode != want[1] || r.Triggers || r.CascadeTriggers {
			t.Errorf("uc.%s: WriteCode %v, DeleteCode %v, want %v (Triggers %v)", name, r != nil && r.WriteCode, r != nil && r.DeleteCode, want, r != nil && r.Triggers)
		}
	}
	// Triggers: of a partition (its partitioned table's writes fire
	// them), of a view (INSTEAD OF, or a rule); through a foreign key's
	// action (an UPDATE or DELETE of the referenced table fires them).
	for name, want := range map[string][2]bool{ // Triggers, CascadeTriggers
		"tpart1": {true, false}, "tparted": {true, false},
		"tchild": {true, false}, "tparent": {false, true},
		"tplain_child": {true, false}, "tplain_parent": {false, false},
		"vtrig": {true, false}, "vrule": {true, false}, "v": {false, false},
	} {
		r, _ := cat.Lookup(Name{"uc", name})
		if r == nil || r.Triggers != want[0] || r.CascadeTriggers != want[1] {
			t.Errorf("uc.%s: Triggers %v, CascadeTriggers %v, want %v", name, r != nil && r.Triggers, r != nil && r.CascadeTriggers, want)
		}
	}
	// Casts to the domains (and the composite, range and row types
	// holding one, and a domain over an array) run their checks; a type
	// named like one of PostgreSQL's is left out.
	for _, n := range []Name{{"uc", "capped"}, {"uc", "capped2"}, {"uc", "pair"}, {"uc", "cappeds"}, {"uc", "crange"}, {"uc", "rowt"}} {
		if !cat.ReadingType(nil, n.Schema, n.Name) {
			t.Errorf("%s is not a reading type", n)
		}
	}
	if cat.ReadingType([]string{"uc"}, "", "text") {
		t.Error("uc.text, named like pg_catalog.text, is a reading type: every ::text would read anything")
	}
	if !cat.ReadingType([]string{"uc"}, "", "capped") || cat.ReadingType([]string{"public"}, "", "capped") || cat.ReadingType(nil, "pg_catalog", "int4") {
		t.Error("reading types resolve through the path")
	}
	// A view's own column default.
	if r, _ := cat.Lookup(Name{"uc", "v"}); r == nil || r.WriteCode {
		t.Errorf("uc.v before its default: %+v", r)
	}
	if _, err := conn.Exec(ctx, "ALTER VIEW uc.v ALTER COLUMN id SET DEFAULT uc.reads(2)"); err != nil {
		t.Fatal(err)
	}
	if r, _ := loaded(ctx, t, conn, 2).Lookup(Name{"uc", "v"}); r == nil || !r.WriteCode {
		t.Errorf("uc.v with a reading default: %+v", r)
	}
}

// TestLoadOperatorsAndNameChanges: the operators whose function may read
// data are loaded (no other), and functions whose body may change the
// session's search path or role, or call one that does, are marked.
func TestLoadOperatorsAndNameChanges(t *testing.T) {
	conn, ctx := connect(t)
	if _, err := conn.Exec(ctx, `
CREATE SCHEMA op;
CREATE TABLE op.allowed (a int, b int);
CREATE FUNCTION op.allowed(int, int) RETURNS bool LANGUAGE sql STABLE AS 'SELECT EXISTS (SELECT 1 FROM op.allowed WHERE a = $1 AND b = $2)';
CREATE OPERATOR op.=== (FUNCTION = op.allowed, LEFTARG = int, RIGHTARG = int);
CREATE FUNCTION op.same(int, int) RETURNS bool LANGUAGE sql IMMUTABLE AS 'SELECT $1 = $2';
CREATE OPERATOR op.=~= (FUNCTION = op.same, LEFTARG = int, RIGHTARG = int);
CREATE FUNCTION op.go_to(s text) RETURNS void LANGUAGE plpgsql AS $$BEGIN PERFORM set_config('search_path', s, false); END$$;
CREATE FUNCTION op.Via() RETURNS void LANGUAGE sql AS 'SELECT op.go_to(''x'')';
CREATE FUNCTION op.via_via() RETURNS int LANGUAGE plpgsql AS $$BEGIN PERFORM op.via(); RETURN 1; END$$;
CREATE FUNCTION op.be(r text) RETURNS void LANGUAGE plpgsql AS $$BEGIN EXECUTE format('SET ROLE %I', r); END$$;
CREATE FUNCTION op.path_local() RETURNS void LANGUAGE plpgsql AS $$BEGIN SET LOCAL search_path = op; END$$;
CREATE FUNCTION op.atomic() RETURNS text LANGUAGE sql BEGIN ATOMIC SELECT set_config('role', 'x', false); END;
CREATE FUNCTION op.plain(int) RETURNS int LANGUAGE plpgsql AS $$BEGIN RETURN (SELECT count(*) FROM op.allowed WHERE a = $1); END$$;
CREATE FUNCTION op.schema_alias() RETURNS void LANGUAGE plpgsql AS $$BEGIN SET SCHEMA 'op'; END$$;
CREATE FUNCTION op.quoted() RETURNS void LANGUAGE plpgsql AS $$BEGIN SET "search_path" = op; END$$;
CREATE FUNCTION op."Odd Name"() RETURNS void LANGUAGE sql AS 'SELECT set_config(''role'', ''x'', false)';
CREATE FUNCTION op.via_odd() RETURNS void LANGUAGE sql AS 'SELECT op."Odd Name"()';
CREATE FUNCTION op.commented() RETURNS int LANGUAGE plpgsql AS $$BEGIN
  -- go_to is not called here, nor is /* go_to( */ set_config
  RETURN (SELECT count(*) FROM op.allowed WHERE a = 1); -- SET search_path = x
END$$;
CREATE FUNCTION op.text_of_a_string() RETURNS text LANGUAGE sql AS $$SELECT 'a -- b' || 'set_config'$$;
CREATE FUNCTION op.changer(int, int) RETURNS bool LANGUAGE plpgsql STABLE AS $$BEGIN PERFORM set_config('search_path', 'op', false); RETURN true; END$$;
CREATE OPERATOR op.<~> (FUNCTION = op.changer, LEFTARG = int, RIGHTARG = int);
CREATE OPERATOR op.= (FUNCTION = op.allowed, LEFTARG = int, RIGHTARG = int);
CREATE FUNCTION op.moving() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN PERFORM op.go_to('x'); RETURN NEW; END$$;
CREATE FUNCTION op.still() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NEW; END$$;
CREATE TABLE op.moved (id int);
CREATE TRIGGER moving BEFORE INSERT ON op.moved FOR EACH ROW EXECUTE FUNCTION op.moving();
CREATE TABLE op.kept (id int);
CREATE TRIGGER still BEFORE INSERT ON op.kept FOR EACH ROW EXECUTE FUNCTION op.still();
CREATE PROCEDURE op.proc_moving() LANGUAGE sql AS 'SELECT set_config(''search_path'', ''x'', false)';
CREATE PROCEDURE op.proc_still() LANGUAGE sql AS 'SELECT 1';
CREATE FUNCTION op.auth() RETURNS void LANGUAGE plpgsql AS $$BEGIN SET session_authorization = 'x'; END$$;
CREATE FUNCTION op.e_string() RETURNS void LANGUAGE plpgsql AS $f$BEGIN RAISE NOTICE E'it\'s -- x'; SET search_path = op; END$f$;
CREATE EXTENSION IF NOT EXISTS pg_trgm;`); err != nil {
		t.Fatal(err)
	}
	cat := loaded(ctx, t, conn, 1)
	if o, ok := cat.Operator(nil, "op", "==="); !ok || !o.ReadsData || o.Volatility != Stable {
		t.Errorf("op.===: %+v %v", o, ok)
	}
	if o, ok := cat.Operator([]string{"op"}, "", "==="); !ok || !o.ReadsData {
		t.Errorf("=== on op's path: %+v %v", o, ok)
	}
	for _, sym := range []string{"=~=", "=", "<"} { // (op.= reads, but is named like a built-in one)
		if o, ok := cat.Operator([]string{"op"}, "", sym); ok {
			t.Errorf("%s is loaded: %+v", sym, o)
		}
	}
	if o, ok := cat.Operator([]string{"public"}, "", "%"); ok {
		t.Errorf("pg_trgm's %% (a C function) is loaded: %+v", o)
	}
	if o, ok := cat.Operator(nil, "op", "<~>"); !ok || !o.ChangesNames {
		t.Errorf("op.<~>, whose function sets search_path: %+v %v", o, ok)
	}
	for name, want := range map[string]bool{
		"go_to": true, "via": true, "via_via": true, "be": true, "path_local": true, "atomic": true, "plain": false, "allowed": false,
		"schema_alias": true, "quoted": true, "Odd Name": true, "via_odd": true, "text_of_a_string": true,
		"auth": true, "e_string": true, "proc_moving": true, "proc_still": false,
		"commented": true, // comments count: a string may run as SQL, and a scanner of quoting is not worth its risk
	} {
		if f, ok := cat.Func(nil, "op", name); !ok || f.ChangesNames != want {
			t.Errorf("op.%s: ChangesNames %v, want %v", name, ok && f.ChangesNames, want)
		}
	}
	for name, want := range map[string]bool{"moved": true, "kept": false} {
		if r, _ := cat.Lookup(Name{"op", name}); r == nil || !r.Triggers || r.TriggersChangeNames != want {
			t.Errorf("op.%s: %+v, want TriggersChangeNames %v", name, r, want)
		}
	}
	if f, _ := cat.Func(nil, "pg_catalog", "set_config"); f.ChangesNames {
		t.Error("set_config is marked: built-in functions' bodies are not read (the analysis knows it)")
	}
}

// loaded loads the catalog of conn's database, as version.
func loaded(ctx context.Context, t *testing.T, conn *pgx.Conn, version uint64) *Catalog {
	t.Helper()
	d, err := Load(ctx, conn, nil)
	if err != nil {
		t.Fatal(err)
	}
	cat, err := New(d, version)
	if err != nil {
		t.Fatal(err)
	}
	return cat
}
