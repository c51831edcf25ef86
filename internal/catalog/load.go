package catalog

import (
	"context"
	"fmt"
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
	// bytes), its primary key's columns in key order, whether it has
	// user triggers or rules, and whether row security is on with a
	// policy that uses another relation or a function of the user's
	// (PostgreSQL records no dependency on built-in ones), in one query (one round trip, each
	// relation's catalog rows found through their indexes): a node
	// reloads its catalog after every DDL.
	qRelations = `
SELECT n.nspname, c.relname, c.relkind::text,
  coalesce((SELECT array_agg(a.attname::text ORDER BY a.attnum) FROM pg_attribute a
            WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped), '{}'),
  coalesce((SELECT array_agg(CASE WHEN coalesce((SELECT co.collisdeterministic FROM pg_collation co WHERE co.oid = a.attcollation), true)
                                  THEN (SELECT t.typname::text FROM pg_type t WHERE t.oid = a.atttypid) ELSE '' END ORDER BY a.attnum)
            FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped), '{}'),
  coalesce((SELECT array_agg(a.attname::text ORDER BY k.ord) FROM pg_index i
            CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
            JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
            WHERE i.indrelid = c.oid AND i.indisprimary), '{}'),
  EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgrelid = c.oid AND NOT t.tgisinternal)
    OR (c.relkind <> 'v' AND EXISTS (SELECT 1 FROM pg_rewrite r WHERE r.ev_class = c.oid)),
  c.relrowsecurity AND EXISTS (SELECT 1 FROM pg_policy pol
    JOIN pg_depend d ON d.classid = 'pg_policy'::regclass AND d.objid = pol.oid
    WHERE pol.polrelid = c.oid
      AND (d.refclassid = 'pg_proc'::regclass OR d.refclassid = 'pg_class'::regclass AND d.refobjid <> c.oid))
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r','p','m','f','v')
  AND n.nspname NOT LIKE 'pg_toast%' AND n.nspname NOT LIKE 'pg_temp%' AND {scope n}
ORDER BY 1, 2`
	qViewDeps = `
SELECT DISTINCT vn.nspname, v.relname,
       CASE WHEN d.refclassid = 'pg_class'::regclass THEN 'r' ELSE 'f' END,
       coalesce(rn.nspname, pn.nspname), coalesce(r.relname, p.proname)
FROM pg_class v
JOIN pg_namespace vn ON vn.oid = v.relnamespace
JOIN pg_rewrite rw ON rw.ev_class = v.oid
JOIN pg_depend d ON d.classid = 'pg_rewrite'::regclass AND d.objid = rw.oid
LEFT JOIN pg_class r ON d.refclassid = 'pg_class'::regclass AND r.oid = d.refobjid
LEFT JOIN pg_namespace rn ON rn.oid = r.relnamespace
LEFT JOIN pg_proc p ON d.refclassid = 'pg_proc'::regclass AND p.oid = d.refobjid
LEFT JOIN pg_namespace pn ON pn.oid = p.pronamespace
WHERE v.relkind = 'v' AND (r.oid IS NOT NULL AND r.oid <> v.oid OR p.oid IS NOT NULL) AND {scope vn}
ORDER BY 1, 2, 3, 4, 5`
	qTriggers = `
SELECT DISTINCT n.nspname, c.relname
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE (EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgrelid = c.oid AND NOT t.tgisinternal)
   OR (c.relkind <> 'v' AND EXISTS (SELECT 1 FROM pg_rewrite r WHERE r.ev_class = c.oid)))
  AND {scope n}
ORDER BY 1, 2`
	qFunctions = `
SELECT n.nspname, p.proname, p.provolatile::text, l.lanname, p.prokind::text
FROM pg_proc p
JOIN pg_namespace n ON n.oid = p.pronamespace
JOIN pg_language l ON l.oid = p.prolang
WHERE {scope n}
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
		var triggers, policyReads bool
		if err := r.Scan(&n.Schema, &n.Name, &kind, &cols, &types, &pk, &triggers, &policyReads); err != nil {
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
			tables[n] = &TableDesc{Schema: n.Schema, Name: n.Name, Columns: columns, PK: pk, Triggers: triggers, PolicyReads: policyReads}
		}
		order = append(order, n)
		return nil
	})
	if err != nil {
		return d, err
	}
	err = each(ctx, q, qViewDeps, sc, func(r pgx.Rows) error {
		var v, dep Name
		var kind string
		if err := r.Scan(&v.Schema, &v.Name, &kind, &dep.Schema, &dep.Name); err != nil {
			return err
		}
		vd, ok := views[v]
		if !ok {
			return nil
		}
		if kind == "r" {
			vd.Uses = append(vd.Uses, dep.String())
		} else {
			vd.Functions = append(vd.Functions, dep.String())
		}
		return nil
	})
	if err != nil {
		return d, err
	}
	err = each(ctx, q, qFunctions, sc, func(r pgx.Rows) error {
		var f FuncDesc
		var vol, lang, kind string
		if err := r.Scan(&f.Schema, &f.Name, &vol, &lang, &kind); err != nil {
			return err
		}
		f.Volatility = vol
		builtin := f.Schema == "pg_catalog" || f.Schema == "information_schema"
		switch {
		case builtin:
			f.ReadsData = execFunctions[f.Name]
		case kind == "p":
			f.ReadsData = true
		default:
			f.ReadsData = vol != "i"
		}
		d.Functions = append(d.Functions, f)
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
