// Package schemacheck fingerprints the user schema of a node's database,
// object by object, so that nodes can compare their schemas after every
// schema change and on demand, and name the objects that differ.
//
// A fingerprint is built only from names and definitions (never OIDs,
// which differ between nodes) and leaves out what is legitimately per
// node: sequence positions and parameters (normalized per node, see
// internal/sequences), statistics, storage, and Ordo's own schema.
//
// It must never change anything: it only reads the catalog. It must never
// wait long for a lock: PostgreSQL's functions that print a definition
// (pg_get_expr, pg_get_indexdef, pg_get_viewdef…) lock the relation, and
// a prepared transaction that changes its schema holds that lock until
// the node decides it, which may wait for this fingerprint. Such an
// object is reported Unreadable and left out of comparisons.
package schemacheck

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Querier is the part of a connection Fingerprint uses (*pgx.Conn).
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Snapshot is a schema fingerprint: every object by name ("table
// public.t", "function public.f(integer)", …) with a hash of its
// definition, and a hash of the whole.
type Snapshot struct {
	Hash    string
	Objects map[string]string
}

// Unreadable is the hash of an object whose definition could not be read
// without waiting for a lock that another transaction holds (one that is
// changing it, not yet committed). Diff does not compare its definition.
const Unreadable = "unreadable"

// objectsSQL lists user objects with their definitions, or NULL for a
// relation locked against reading its definition (AccessExclusiveLock,
// held or awaited: a lock request queues behind a waiting one; every
// schema change of an existing relation but a few takes it) and a view,
// index or row security policy that depends on one. A lock taken after the query
// started makes it wait (lock_timeout, then Fingerprint tries again).
const objectsSQL = `
WITH ns AS (
  SELECT oid, nspname FROM pg_namespace
  WHERE nspname NOT IN ('pg_catalog', 'information_schema', '_ordo', 'pg_toast') AND nspname NOT LIKE 'pg_temp_%' AND nspname NOT LIKE 'pg_toast_temp_%'
), locked AS MATERIALIZED (
  SELECT relation FROM pg_locks
  WHERE locktype = 'relation' AND mode = 'AccessExclusiveLock'
    AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
    AND pid IS DISTINCT FROM pg_backend_pid()
)
SELECT 'schema ' || quote_ident(nspname), coalesce(array_to_string(n.nspacl, ','), '') || ' ' || pg_get_userbyid(n.nspowner)
  FROM pg_namespace n WHERE n.oid IN (SELECT oid FROM ns)
UNION ALL
SELECT (CASE c.relkind WHEN 'r' THEN 'table ' WHEN 'p' THEN 'table ' WHEN 'v' THEN 'view ' WHEN 'm' THEN 'materialized view '
          WHEN 'S' THEN 'sequence ' WHEN 'f' THEN 'foreign table ' WHEN 'c' THEN 'type ' ELSE 'relation ' END)
       || quote_ident(ns.nspname) || '.' || quote_ident(c.relname),
  CASE WHEN c.oid IN (SELECT relation FROM locked) OR EXISTS (
      SELECT 1 FROM pg_rewrite rw JOIN pg_depend dp ON dp.classid = 'pg_rewrite'::regclass AND dp.objid = rw.oid
       WHERE rw.ev_class = c.oid AND dp.refclassid = 'pg_class'::regclass AND dp.refobjid IN (SELECT relation FROM locked))
    OR EXISTS (
      SELECT 1 FROM pg_policy po JOIN pg_depend dp ON dp.classid = 'pg_policy'::regclass AND dp.objid = po.oid
       WHERE po.polrelid = c.oid AND dp.refclassid = 'pg_class'::regclass AND dp.refobjid IN (SELECT relation FROM locked))
    THEN NULL ELSE
  concat_ws(E'\n',
    c.relkind::text, c.relpersistence::text, c.relrowsecurity::text, coalesce(array_to_string(c.relacl, ','), ''),
    coalesce(obj_description(c.oid, 'pg_class'), ''),
    (SELECT string_agg(format('%s %s %s %s %s %s', quote_ident(a.attname), format_type(a.atttypid, a.atttypmod), a.attnotnull,
                              coalesce(pg_get_expr(d.adbin, d.adrelid), ''), a.attgenerated, a.attidentity), E'\n' ORDER BY a.attnum)
       FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
      WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND c.relkind <> 'S'),
    (SELECT string_agg(quote_ident(co.conname) || ' ' || pg_get_constraintdef(co.oid), E'\n' ORDER BY co.conname)
       FROM pg_constraint co WHERE co.conrelid = c.oid),
    (SELECT string_agg(quote_ident(t.tgname) || ' ' || pg_get_triggerdef(t.oid) || ' ' || t.tgenabled::text, E'\n' ORDER BY t.tgname)
       FROM pg_trigger t WHERE t.tgrelid = c.oid AND NOT t.tgisinternal),
    (SELECT string_agg(quote_ident(p.polname) || ' ' || p.polcmd::text || ' ' || coalesce(pg_get_expr(p.polqual, p.polrelid), '') || ' ' ||
                       coalesce(pg_get_expr(p.polwithcheck, p.polrelid), ''), E'\n' ORDER BY p.polname)
       FROM pg_policy p WHERE p.polrelid = c.oid),
    CASE WHEN c.relkind IN ('v', 'm') THEN pg_get_viewdef(c.oid) END) END
  FROM pg_class c JOIN ns ON ns.oid = c.relnamespace
 WHERE c.relkind IN ('r', 'p', 'v', 'm', 'S', 'f', 'c')
UNION ALL
SELECT 'index ' || quote_ident(ns.nspname) || '.' || quote_ident(c.relname),
  CASE WHEN c.oid IN (SELECT relation FROM locked) OR i.indrelid IN (SELECT relation FROM locked) THEN NULL
    ELSE pg_get_indexdef(c.oid) || ' valid=' || i.indisvalid END
  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN ns ON ns.oid = c.relnamespace
UNION ALL
SELECT 'function ' || quote_ident(ns.nspname) || '.' || quote_ident(p.proname) || '(' || pg_get_function_identity_arguments(p.oid) || ')',
  concat_ws(E'\n', p.prokind::text, pg_get_function_result(p.oid), p.prosrc, p.provolatile::text, p.prosecdef::text,
            coalesce(array_to_string(p.proacl, ','), ''), coalesce(array_to_string(p.proconfig, ','), ''), l.lanname)
  FROM pg_proc p JOIN ns ON ns.oid = p.pronamespace JOIN pg_language l ON l.oid = p.prolang
UNION ALL
SELECT 'type ' || quote_ident(ns.nspname) || '.' || quote_ident(t.typname),
  concat_ws(E'\n', t.typtype::text,
    (SELECT string_agg(quote_literal(e.enumlabel), ',' ORDER BY e.enumsortorder) FROM pg_enum e WHERE e.enumtypid = t.oid),
    CASE WHEN t.typtype = 'd' THEN format_type(t.typbasetype, t.typtypmod) || ' ' || t.typnotnull END,
    (SELECT string_agg(pg_get_constraintdef(co.oid), E'\n' ORDER BY co.conname) FROM pg_constraint co WHERE co.contypid = t.oid))
  FROM pg_type t JOIN ns ON ns.oid = t.typnamespace
 WHERE t.typtype IN ('e', 'd', 'r', 'm')
UNION ALL
SELECT 'extension ' || quote_ident(e.extname), e.extversion FROM pg_extension e
UNION ALL
SELECT 'role ' || quote_ident(r.rolname), concat_ws(' ', r.rolsuper, r.rolinherit, r.rolcreaterole, r.rolcreatedb, r.rolcanlogin, r.rolreplication, r.rolbypassrls)
  FROM pg_roles r WHERE r.rolname NOT LIKE 'pg\_%'`

// lockRetries bounds the tries of a fingerprint that met a lock taken
// after it started (SQLSTATE 55P03, under the caller's lock_timeout).
const lockRetries = 20

// Fingerprint reads the schema of the database q is connected to. The
// caller should set a short lock_timeout on q: a lock taken while the
// fingerprint runs makes it wait that long, then try again (the lock is
// then seen, and the object Unreadable).
func Fingerprint(ctx context.Context, q Querier) (Snapshot, error) {
	for try := 1; ; try++ {
		snap, err := fingerprint(ctx, q)
		var pgErr *pgconn.PgError
		if try < lockRetries && errors.As(err, &pgErr) && pgErr.Code == "55P03" {
			continue
		}
		return snap, err
	}
}

func fingerprint(ctx context.Context, q Querier) (Snapshot, error) {
	rows, err := q.Query(ctx, objectsSQL)
	if err != nil {
		return Snapshot{}, fmt.Errorf("schemacheck: %w", err)
	}
	objs := map[string]string{}
	for rows.Next() {
		var name string
		var def *string
		if err := rows.Scan(&name, &def); err != nil {
			rows.Close()
			return Snapshot{}, fmt.Errorf("schemacheck: %w", err)
		}
		if def == nil {
			objs[name] = Unreadable
			continue
		}
		h := sha256.Sum256([]byte(*def))
		objs[name] = hex.EncodeToString(h[:8])
	}
	if err := rows.Err(); err != nil {
		return Snapshot{}, fmt.Errorf("schemacheck: %w", err)
	}
	return New(objs), nil
}

// New returns the snapshot of the given objects (name → hash).
func New(objs map[string]string) Snapshot {
	names := make([]string, 0, len(objs))
	for n := range objs {
		names = append(names, n)
	}
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		fmt.Fprintf(h, "%s\x00%s\n", n, objs[n])
	}
	return Snapshot{Hash: hex.EncodeToString(h.Sum(nil)[:16]), Objects: objs}
}

// Difference is one object that differs between two snapshots.
type Difference struct {
	Object string
	// What: "missing here", "only here", or "different definition".
	What string
}

func (d Difference) String() string { return d.Object + " (" + d.What + ")" }

// Diff returns the objects that differ between here and there, sorted.
// An object Unreadable on either side differs only if the other lacks it.
func Diff(here, there Snapshot) []Difference {
	var out []Difference
	for n, h := range here.Objects {
		switch o, ok := there.Objects[n]; {
		case !ok:
			out = append(out, Difference{n, "only here"})
		case o != h && o != Unreadable && h != Unreadable:
			out = append(out, Difference{n, "different definition"})
		}
	}
	for n := range there.Objects {
		if _, ok := here.Objects[n]; !ok {
			out = append(out, Difference{n, "missing here"})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Object < out[j].Object })
	return out
}
