package catalog

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Querier is what Load needs of a connection (*pgx.Conn, a pool).
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// execFunctions are built-in functions that run SQL given as text and so
// read whatever that SQL reads.
var execFunctions = map[string]bool{
	"query_to_xml": true, "query_to_xmlschema": true, "query_to_xml_and_xmlschema": true,
	"table_to_xml": true, "table_to_xmlschema": true, "table_to_xml_and_xmlschema": true,
	"cursor_to_xml": true, "cursor_to_xmlschema": true,
	"schema_to_xml": true, "schema_to_xmlschema": true, "schema_to_xml_and_xmlschema": true,
	"database_to_xml": true, "database_to_xmlschema": true, "database_to_xml_and_xmlschema": true,
	"ts_stat": true, "ts_rewrite": true, // ts_rewrite(tsquery, text): its second argument is a query
}

const (
	// qRelations reads each table, view, materialized and foreign table
	// with its columns (names, and type names: '' for a column whose
	// collation is not deterministic, whose equal values may differ in
	// bytes), its primary key's columns in key order, and whether it has
	// user triggers or rules, in one query (one round trip): a node
	// reloads its catalog after every DDL. (What row security policies
	// use is qPolicyDeps's: TableDesc.PolicyReads is derived from it.) Set
	// at a time (each catalog read once and joined, rel inlined where it
	// is used: materialized, PostgreSQL took seconds on 1,000 tables), not
	// a subquery per relation, which cost 35 µs a relation
	// (BenchmarkLoad).
	qRelations = `
WITH rel AS NOT MATERIALIZED (
  SELECT c.oid, n.nspname, c.relname, c.relkind
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
  WHERE c.relkind IN ('r','p','m','f','v')
    AND n.nspname NOT LIKE 'pg_toast%' AND n.nspname NOT LIKE 'pg_temp%' AND {scope n}),
cols AS (
  SELECT a.attrelid,
    array_agg(a.attname::text ORDER BY a.attnum) AS names,
    array_agg(CASE WHEN coalesce(co.collisdeterministic, true) THEN t.typname::text ELSE '' END ORDER BY a.attnum) AS types
  FROM rel JOIN pg_attribute a ON a.attrelid = rel.oid
  LEFT JOIN pg_type t ON t.oid = a.atttypid
  LEFT JOIN pg_collation co ON co.oid = a.attcollation
  WHERE a.attnum > 0 AND NOT a.attisdropped
  GROUP BY a.attrelid),
pk AS (
  SELECT i.indrelid, array_agg(a.attname::text ORDER BY k.ord) AS names
  FROM rel JOIN pg_index i ON i.indrelid = rel.oid AND i.indisprimary
  CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
  JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
  GROUP BY i.indrelid)
SELECT rel.nspname, rel.relname, rel.relkind::text, coalesce(cols.names, '{}'), coalesce(cols.types, '{}'), coalesce(pk.names, '{}'),
  rel.oid IN (SELECT t.tgrelid FROM pg_trigger t WHERE NOT t.tgisinternal)
    OR (rel.relkind <> 'v' AND rel.oid IN (SELECT r.ev_class FROM pg_rewrite r))
FROM rel LEFT JOIN cols ON cols.attrelid = rel.oid LEFT JOIN pk ON pk.indrelid = rel.oid
ORDER BY 1, 2`
	// userCode holds qWriteCode's first common table expressions (ufn,
	// udep, tlink, rdom: see qWriteCode).
	userCode = `
WITH RECURSIVE ufn AS (
  SELECT p.oid FROM pg_proc p
  JOIN pg_namespace pn ON pn.oid = p.pronamespace
  JOIN pg_language l ON l.oid = p.prolang
  WHERE p.provolatile <> 'i' AND pn.nspname NOT IN ('pg_catalog', 'information_schema')
    AND l.lanname NOT IN ('c', 'internal')),
udep AS (
  SELECT d.classid, d.objid FROM pg_depend d
  WHERE d.refclassid = 'pg_proc'::regclass AND d.refobjid IN (SELECT oid FROM ufn)
     OR d.refclassid = 'pg_operator'::regclass
        AND d.refobjid IN (SELECT o.oid FROM pg_operator o WHERE o.oprcode IN (SELECT oid FROM ufn))),
tlink(oid, of) AS (
  SELECT t.oid, t.typbasetype FROM pg_type t WHERE t.typtype = 'd'
  UNION ALL SELECT t.oid, t.typelem FROM pg_type t WHERE t.typcategory = 'A' AND t.typelem <> 0
  UNION ALL SELECT ct.oid, a.atttypid FROM pg_type ct
  JOIN pg_attribute a ON a.attrelid = ct.typrelid AND a.attnum > 0 AND NOT a.attisdropped
  WHERE ct.typtype = 'c'
  UNION ALL SELECT r.rngtypid, r.rngsubtype FROM pg_range r
  UNION ALL SELECT r.rngmultitypid, r.rngtypid FROM pg_range r),
rdom(oid) AS (
  SELECT co.contypid FROM pg_constraint co
  JOIN udep ON udep.classid = 'pg_constraint'::regclass AND udep.objid = co.oid
  WHERE co.contypid <> 0
  UNION
  SELECT tl.oid FROM tlink tl JOIN rdom ON tl.of = rdom.oid)`
	// qWriteCode reads the tables (wcode) an INSERT or UPDATE of which may call a
	// user function that may read data (ufn: not IMMUTABLE, and not C,
	// which Ordo takes for what extensions' C code is, pure, as it takes
	// PostgreSQL's own) directly or through an operator: in a column's
	// default, a check constraint, or a check of a column's domain
	// (rdom: or of the domain its domain, array or composite type is
	// of, through tlink, as is a range's or a table's row type), and the tables an INSERT or UPDATE of which may reach
	// one of those (wup: partitioned tables and inheritance parents,
	// tables whose update a foreign key's ON UPDATE CASCADE, SET NULL or
	// SET DEFAULT carries to one). Generated columns and indexes take
	// IMMUTABLE functions only. With each, whether a DELETE may run such
	// code (wdel): a foreign key's ON DELETE SET NULL or SET DEFAULT
	// updates one, maybe through ON DELETE CASCADE and partitions. And
	// whether a write of it may fire user triggers or rules (tall: its
	// own, a view's INSTEAD OF ones, or a partition's or child's), and
	// whether an UPDATE or DELETE may, through foreign keys' actions
	// (tcasc). Rows of kind 't' are the domains (and composite, range
	// types holding one) a cast to which runs such a check (rdom), but
	// those named like one of PostgreSQL's types (a cast to text would
	// read anything).
	qWriteCode = userCode + `,
wown(relid) AS (
  SELECT ad.adrelid FROM pg_attrdef ad JOIN udep ON udep.classid = 'pg_attrdef'::regclass AND udep.objid = ad.oid
  UNION SELECT co.conrelid FROM pg_constraint co
  JOIN udep ON udep.classid = 'pg_constraint'::regclass AND udep.objid = co.oid WHERE co.conrelid <> 0
  UNION SELECT a.attrelid FROM pg_attribute a
  WHERE a.atttypid IN (SELECT oid FROM rdom) AND a.attnum > 0 AND NOT a.attisdropped),
wup(down, up) AS (
  SELECT i.inhrelid, i.inhparent FROM pg_inherits i
  UNION ALL SELECT f.conrelid, f.confrelid FROM pg_constraint f WHERE f.contype = 'f' AND f.confupdtype IN ('c', 'n', 'd')),
wcode(relid) AS (
  SELECT relid FROM wown
  UNION SELECT e.up FROM wcode JOIN wup e ON e.down = wcode.relid),
wdown(down, up) AS (
  SELECT i.inhrelid, i.inhparent FROM pg_inherits i
  UNION ALL SELECT f.conrelid, f.confrelid FROM pg_constraint f WHERE f.contype = 'f' AND f.confdeltype = 'c'),
wdel(relid) AS (
  SELECT f.confrelid FROM pg_constraint f JOIN wcode ON f.conrelid = wcode.relid
  WHERE f.contype = 'f' AND f.confdeltype IN ('n', 'd')
  UNION SELECT e.up FROM wdel JOIN wdown e ON e.down = wdel.relid),
trig(relid) AS (
  SELECT t.tgrelid FROM pg_trigger t WHERE NOT t.tgisinternal
  UNION SELECT r.ev_class FROM pg_rewrite r WHERE r.rulename <> '_RETURN'),
tall(relid) AS (
  SELECT relid FROM trig
  UNION SELECT i.inhparent FROM pg_inherits i JOIN tall ON i.inhrelid = tall.relid),
tedge(down, up) AS (
  SELECT i.inhrelid, i.inhparent FROM pg_inherits i
  UNION ALL SELECT f.conrelid, f.confrelid FROM pg_constraint f
  WHERE f.contype = 'f' AND (f.confdeltype IN ('c', 'n', 'd') OR f.confupdtype IN ('c', 'n', 'd'))),
tcasc(relid) AS (
  SELECT f.confrelid FROM pg_constraint f JOIN tall ON f.conrelid = tall.relid
  WHERE f.contype = 'f' AND (f.confdeltype IN ('c', 'n', 'd') OR f.confupdtype IN ('c', 'n', 'd'))
  UNION SELECT e.up FROM tcasc JOIN tedge e ON e.down = tcasc.relid),
flagged(relid) AS (
  SELECT relid FROM wcode UNION SELECT relid FROM wdel UNION SELECT relid FROM tall UNION SELECT relid FROM tcasc)
SELECT 'r', n.nspname, c.relname, c.oid IN (SELECT relid FROM wcode), c.oid IN (SELECT relid FROM wdel),
  c.oid IN (SELECT relid FROM tall), c.oid IN (SELECT relid FROM tcasc)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid IN (SELECT relid FROM flagged) AND {scope n}
UNION ALL
SELECT 't', n.nspname, t.typname, false, false, false, false
FROM rdom JOIN pg_type t ON t.oid = rdom.oid JOIN pg_namespace n ON n.oid = t.typnamespace
WHERE (t.typcategory <> 'A' OR t.typtype = 'd') AND {scope n}
  AND NOT EXISTS (SELECT 1 FROM pg_type b WHERE b.typname = t.typname AND b.typnamespace = 'pg_catalog'::regnamespace)`
	// qTriggerFunctions reads the functions the user triggers of each
	// table run.
	qTriggerFunctions = `
SELECT DISTINCT n.nspname, c.relname, pn.nspname, p.proname
FROM pg_trigger t
JOIN pg_class c ON c.oid = t.tgrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_proc p ON p.oid = t.tgfoid
JOIN pg_namespace pn ON pn.oid = p.pronamespace
WHERE NOT t.tgisinternal AND {scope n}`
	qViewDeps = `
SELECT DISTINCT vn.nspname, v.relname,` + depColumns + `
FROM pg_class v
JOIN pg_namespace vn ON vn.oid = v.relnamespace
JOIN pg_rewrite rw ON rw.ev_class = v.oid
JOIN pg_depend d ON d.classid = 'pg_rewrite'::regclass AND d.objid = rw.oid` + depJoins + `
WHERE v.relkind = 'v' AND (r.oid IS NOT NULL AND r.oid <> v.oid OR p.oid IS NOT NULL) AND {scope vn}
  AND NOT (o.oid IS NOT NULL AND pl.lanname IN ('c', 'internal'))
ORDER BY 1, 2, 3, 4, 5`
	// depColumns and depJoins are what qViewDeps and qPolicyDeps read of
	// a dependency d (pg_depend): 'r' and the relation r it names, or
	// 'f' and the function p, an operator's (o) function for an
	// operator, with p's language pl.
	depColumns = `
       CASE WHEN d.refclassid = 'pg_class'::regclass THEN 'r' ELSE 'f' END,
       coalesce(rn.nspname, pn.nspname), coalesce(r.relname, p.proname)`
	depJoins = `
LEFT JOIN pg_class r ON d.refclassid = 'pg_class'::regclass AND r.oid = d.refobjid
LEFT JOIN pg_namespace rn ON rn.oid = r.relnamespace
LEFT JOIN pg_operator o ON d.refclassid = 'pg_operator'::regclass AND o.oid = d.refobjid
LEFT JOIN pg_proc p ON p.oid = CASE WHEN d.refclassid = 'pg_proc'::regclass THEN d.refobjid ELSE o.oprcode END
LEFT JOIN pg_namespace pn ON pn.oid = p.pronamespace
LEFT JOIN pg_language pl ON pl.oid = p.prolang`
	// qPolicyDeps reads what the row security policies of each table
	// use: the relations (other than the table) and the functions they
	// call, an operator's function but those in C, as qViewDeps does
	// for views.
	qPolicyDeps = `
SELECT DISTINCT tn.nspname, t.relname,` + depColumns + `
FROM pg_policy pol
JOIN pg_class t ON t.oid = pol.polrelid
JOIN pg_namespace tn ON tn.oid = t.relnamespace
JOIN pg_depend d ON d.classid = 'pg_policy'::regclass AND d.objid = pol.oid` + depJoins + `
WHERE t.relrowsecurity AND (r.oid IS NOT NULL AND r.oid <> t.oid OR p.oid IS NOT NULL) AND {scope tn}
  AND NOT (o.oid IS NOT NULL AND pl.lanname IN ('c', 'internal'))
ORDER BY 1, 2, 3, 4, 5`
	qTriggers = `
SELECT DISTINCT n.nspname, c.relname
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE (EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgrelid = c.oid AND NOT t.tgisinternal)
   OR (c.relkind <> 'v' AND EXISTS (SELECT 1 FROM pg_rewrite r WHERE r.ev_class = c.oid)))
  AND {scope n}
ORDER BY 1, 2`
	// qFunctions reads every function, with the body of a user one
	// (scanned by changesNames) unless it is C or internal: its symbol.
	// An aggregate (which PostgreSQL marks IMMUTABLE whatever it runs)
	// is read as its user support functions (ag: not C or internal) are,
	// the worst volatility of them and their bodies.
	qFunctions = `
SELECT n.nspname, p.proname, CASE WHEN p.prokind = 'a' THEN coalesce(ag.vol, 'i') ELSE p.provolatile::text END,
  l.lanname, p.prokind::text,
  CASE WHEN p.prokind = 'a' THEN coalesce(ag.body, '')
       WHEN n.nspname IN ('pg_catalog', 'information_schema') OR l.lanname IN ('c', 'internal') THEN ''
       WHEN p.prosqlbody IS NOT NULL THEN pg_get_function_sqlbody(p.oid)
       ELSE p.prosrc END
FROM pg_proc p
JOIN pg_namespace n ON n.oid = p.pronamespace
JOIN pg_language l ON l.oid = p.prolang
LEFT JOIN LATERAL (
  SELECT CASE max(CASE sp.provolatile WHEN 'v' THEN 2 WHEN 's' THEN 1 ELSE 0 END) WHEN 2 THEN 'v' WHEN 1 THEN 's' ELSE 'i' END AS vol,
         string_agg(CASE WHEN sp.prosqlbody IS NOT NULL THEN pg_get_function_sqlbody(sp.oid) ELSE sp.prosrc END, ' ') AS body
  FROM pg_aggregate a
  JOIN pg_proc sp ON sp.oid IN (a.aggtransfn, a.aggfinalfn, a.aggcombinefn, a.aggserialfn, a.aggdeserialfn,
                                a.aggmtransfn, a.aggminvtransfn, a.aggmfinalfn)
  JOIN pg_namespace sn ON sn.oid = sp.pronamespace
  JOIN pg_language sl ON sl.oid = sp.prolang
  WHERE a.aggfnoid = p.oid AND sn.nspname NOT IN ('pg_catalog', 'information_schema') AND sl.lanname NOT IN ('c', 'internal')
) ag ON p.prokind = 'a'
WHERE {scope n}
ORDER BY 1, 2`
	// qOperators reads every operator with its function's schema, name,
	// volatility, kind and language, but those named like one of
	// PostgreSQL's (=, <, %…): the analysis matches operators by symbol,
	// not knowing the operands' types, and one such of the user's would
	// make every comparison in the path read anything.
	qOperators = `
SELECT n.nspname, o.oprname, pn.nspname, p.proname, p.provolatile::text, p.prokind::text, l.lanname
FROM pg_operator o
JOIN pg_namespace n ON n.oid = o.oprnamespace
JOIN pg_proc p ON p.oid = o.oprcode
JOIN pg_namespace pn ON pn.oid = p.pronamespace
JOIN pg_language l ON l.oid = p.prolang
WHERE {scope n}
  AND NOT EXISTS (SELECT 1 FROM pg_operator b WHERE b.oprname = o.oprname AND b.oprnamespace = 'pg_catalog'::regnamespace)
ORDER BY 1, 2`
	// qSystemSignature counts the objects created in the system schemas
	// since initdb (whose objects have lower OIDs): extensions created in
	// them. They change in no other way while PostgreSQL runs (an upgrade
	// restarts it, and the node with it).
	qSystemSignature = `
SELECT (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid >= 16384 AND {scope n}),
       (SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE p.oid >= 16384 AND {scope n})`
)

// scope selects the schemas a load reads.
type scope int

const (
	allSchemas    scope = iota
	systemSchemas       // pg_catalog and information_schema
	userSchemas         // every other
)

// scoped returns query with each "{scope X}" replaced by the condition
// on the schema name column X.nspname that selects s.
func scoped(query string, s scope) string {
	for {
		i := strings.Index(query, "{scope ")
		if i < 0 {
			return query
		}
		j := strings.IndexByte(query[i:], '}')
		alias := query[i+len("{scope ") : i+j]
		cond := "true"
		switch s {
		case systemSchemas:
			cond = alias + ".nspname IN ('pg_catalog', 'information_schema')"
		case userSchemas:
			cond = alias + ".nspname NOT IN ('pg_catalog', 'information_schema')"
		}
		query = query[:i] + cond + query[i+j+1:]
	}
}

// Load reads the schema of the database q is connected to: every table,
// view, materialized and foreign table (system catalogs included, so psql's
// queries resolve), primary keys, view dependencies and functions. granules
// is the cluster's granule configuration ("schema.table" → column).
//
// A function may read data (ReadsData) unless it is IMMUTABLE, or it is a
// built-in (pg_catalog, information_schema) that does not run SQL text.
//
// PostgreSQL records no dependencies on pinned objects, so a view's Uses
// never include system catalogs (pg_tables has none at all). Reads of
// system catalogs are thus not part of read sets; they change only through
// DDL, which Ordo orders against every transaction.
func Load(ctx context.Context, q Querier, granules map[string]string) (Description, error) {
	return load(ctx, q, granules, allSchemas)
}

func load(ctx context.Context, q Querier, granules map[string]string, sc scope) (Description, error) {
	d := Description{Granules: granules}
	tables := make(map[Name]*TableDesc)
	views := make(map[Name]*ViewDesc)
	var order []Name
	err := each(ctx, q, qRelations, sc, func(r pgx.Rows) error {
		var n Name
		var kind string
		var cols, types, pk []string
		var triggers bool
		if err := r.Scan(&n.Schema, &n.Name, &kind, &cols, &types, &pk, &triggers); err != nil {
			return err
		}
		if len(cols) != len(types) {
			return fmt.Errorf("%s: %d column names for %d types", n, len(cols), len(types))
		}
		if len(pk) == 0 {
			pk = nil
		}
		var columns []Column
		for i := range cols {
			columns = append(columns, Column{Name: cols[i], Type: types[i]})
		}
		if kind == "v" {
			views[n] = &ViewDesc{Schema: n.Schema, Name: n.Name, Columns: columns}
		} else {
			tables[n] = &TableDesc{Schema: n.Schema, Name: n.Name, Columns: columns, PK: pk, Triggers: triggers}
		}
		order = append(order, n)
		return nil
	})
	if err != nil {
		return d, err
	}
	err = each(ctx, q, qWriteCode, sc, func(r pgx.Rows) error {
		var kind string
		var n Name
		var write, del, trig, casc bool
		if err := r.Scan(&kind, &n.Schema, &n.Name, &write, &del, &trig, &casc); err != nil {
			return err
		}
		if kind == "t" {
			d.ReadingTypes = append(d.ReadingTypes, n)
			return nil
		}
		if t, ok := tables[n]; ok {
			t.WriteCode, t.DeleteCode, t.CascadeTriggers = write, del, casc
			t.Triggers = t.Triggers || trig
		} else if v, ok := views[n]; ok {
			v.WriteCode, v.Triggers = write, trig // a view's own defaults, INSTEAD OF triggers, rules
		}
		return nil
	})
	if err != nil {
		return d, err
	}
	err = eachDep(ctx, q, qPolicyDeps, sc, func(owner Name, relation bool, dep string) {
		if t, ok := tables[owner]; ok && relation {
			t.PolicyUses = append(t.PolicyUses, dep)
		} else if ok {
			t.PolicyFunctions = append(t.PolicyFunctions, dep)
		}
	})
	if err != nil {
		return d, err
	}
	for _, t := range tables {
		t.PolicyReads = len(t.PolicyUses) > 0 || len(t.PolicyFunctions) > 0
	}
	err = eachDep(ctx, q, qViewDeps, sc, func(owner Name, relation bool, dep string) {
		if v, ok := views[owner]; ok && relation {
			v.Uses = append(v.Uses, dep)
		} else if ok {
			v.Functions = append(v.Functions, dep)
		}
	})
	if err != nil {
		return d, err
	}
	var bodies []string
	err = each(ctx, q, qFunctions, sc, func(r pgx.Rows) error {
		var f FuncDesc
		var vol, lang, kind, body string
		if err := r.Scan(&f.Schema, &f.Name, &vol, &lang, &kind, &body); err != nil {
			return err
		}
		f.Volatility = vol
		f.ReadsData = readsData(f.Schema, f.Name, vol, kind)
		d.Functions = append(d.Functions, f)
		bodies = append(bodies, body)
		return nil
	})
	if err != nil {
		return d, err
	}
	changing := markChangesNames(d.Functions, bodies)
	if len(changing) > 0 {
		err = each(ctx, q, qTriggerFunctions, sc, func(r pgx.Rows) error {
			var n, f Name
			if err := r.Scan(&n.Schema, &n.Name, &f.Schema, &f.Name); err != nil {
				return err
			}
			if t, ok := tables[n]; ok && changing[f] {
				t.TriggersChangeNames = true
			}
			return nil
		})
		if err != nil {
			return d, err
		}
	}
	err = each(ctx, q, qOperators, sc, func(r pgx.Rows) error {
		var o FuncDesc
		var fschema, fname, vol, kind, lang string
		if err := r.Scan(&o.Schema, &o.Name, &fschema, &fname, &vol, &kind, &lang); err != nil {
			return err
		}
		if !readsData(fschema, fname, vol, kind) || lang == "c" || lang == "internal" {
			// As the built-in operators, and those of extensions
			// written in C (pg_trgm's %, citext's =, PostGIS's &&):
			// what the analysis assumes of any operator. Matched by
			// symbol only, they would make every % or = read anything.
			return nil
		}
		o.Volatility, o.ReadsData = vol, true
		o.ChangesNames = changing[Name{fschema, fname}]
		d.Operators = append(d.Operators, o)
		return nil
	})
	if err != nil {
		return d, err
	}
	for _, n := range order {
		if t, ok := tables[n]; ok {
			d.Tables = append(d.Tables, *t)
		} else {
			d.Views = append(d.Views, *views[n])
		}
	}
	return d, nil
}

// readsData reports whether calling a function may read (or write) user
// data: a built-in one only if it runs SQL given as text
// (execFunctions), a user one unless it is an IMMUTABLE function.
func readsData(schema, name, volatility, kind string) bool {
	switch {
	case schema == "pg_catalog" || schema == "information_schema":
		return execFunctions[name]
	case kind == "p":
		return true
	default:
		return volatility != "i"
	}
}

// namesBody matches what in a function's body (lower case) may change
// how the session resolves names: SET or RESET of search_path (quoted or
// not, or its alias SCHEMA), the role, the session authorization or
// everything, set_config (any setting: its name may be computed),
// DISCARD ALL, and EXECUTE (PL/pgSQL's SQL built as text, a PL's
// plpy.execute or spi_exec…). Comments and strings count: a string may
// be SQL the body runs, and a scanner of the body's quoting (escape
// strings, dollar quoting) would be one more place to get wrong.
var namesBody = regexp.MustCompile(`\b(?:(?:set|reset)\s+(?:(?:local|session)\s+)?(?:"?search_path"?|schema|"?role"?|"?session[\s_]+authorization"?|all)(?:\s|=|;|'|$)|set_config\b|discard\s+all\b|execute\b|exec\b|spi_exec)`)

// mayChangeNames reports whether namesBody may match body (lower case):
// whether it holds a word every match holds one of. The regular
// expression is slow on the bodies it cannot match.
func mayChangeNames(body string) bool {
	for _, w := range []string{"search_path", "schema", "role", "authorization", "all", "set_config", "exec"} {
		if strings.Contains(body, w) {
			return true
		}
	}
	return false
}

// called matches a name in call position in a body (lower case): a
// word or a quoted identifier, before an opening parenthesis.
var called = regexp.MustCompile(`("(?:[^"]|"")+"|[a-z_][a-z0-9_$]*)\s*\(`)

// markChangesNames sets ChangesNames on the functions (bodies[i] is
// fns[i]'s, "" if none was read) whose body may change how the session
// resolves names (namesBody), or calls a function that does, by its name
// in any schema: a call through another user function changes them as
// well. It returns the functions it marked.
func markChangesNames(fns []FuncDesc, bodies []string) map[Name]bool {
	marked := make(map[Name]bool)
	changing := make(map[string]bool) // names, lower case
	code := make([]string, len(bodies))
	for i, b := range bodies {
		if b == "" {
			continue
		}
		code[i] = strings.ToLower(b)
		if mayChangeNames(code[i]) && namesBody.MatchString(code[i]) {
			fns[i].ChangesNames = true
			changing[strings.ToLower(fns[i].Name)] = true
		}
	}
	if len(changing) > 0 {
		calls := make([][]string, len(fns))
		for i, c := range code {
			if c == "" || fns[i].ChangesNames {
				continue
			}
			for _, m := range called.FindAllStringSubmatch(c, -1) {
				name := m[1]
				if strings.HasPrefix(name, `"`) {
					name = strings.ReplaceAll(name[1:len(name)-1], `""`, `"`)
				}
				calls[i] = append(calls[i], name)
			}
		}
		for more := true; more; {
			more = false
			for i := range fns {
				if fns[i].ChangesNames {
					continue
				}
				for _, name := range calls[i] {
					if changing[name] {
						fns[i].ChangesNames, changing[strings.ToLower(fns[i].Name)], more = true, true, true
						break
					}
				}
			}
		}
	}
	for _, f := range fns {
		if f.ChangesNames {
			marked[Name{f.Schema, f.Name}] = true
		}
	}
	return marked
}

func each(ctx context.Context, q Querier, sql string, sc scope, f func(pgx.Rows) error) error {
	rows, err := q.Query(ctx, scoped(sql, sc))
	if err != nil {
		return fmt.Errorf("catalog: load: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := f(rows); err != nil {
			return fmt.Errorf("catalog: load: %w", err)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("catalog: load: %w", err)
	}
	return nil
}

// eachDep runs a query of what objects use (qViewDeps, qPolicyDeps: the
// owner's schema and name, 'r' for a relation or 'f' for a function, the
// dependency's schema and name) and calls f with each row.
func eachDep(ctx context.Context, q Querier, query string, sc scope, f func(owner Name, relation bool, dep string)) error {
	return each(ctx, q, query, sc, func(r pgx.Rows) error {
		var owner, dep Name
		var kind string
		if err := r.Scan(&owner.Schema, &owner.Name, &kind, &dep.Schema, &dep.Name); err != nil {
			return err
		}
		f(owner, kind == "r", dep.String())
		return nil
	})
}
