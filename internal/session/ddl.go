package session

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-db/ordo/internal/analysis"
	"github.com/ordo-db/ordo/internal/capture"
	"github.com/ordo-db/ordo/internal/catalog"
	"github.com/ordo-db/ordo/internal/txn"
	"github.com/ordo-db/ordo/internal/wire"
)

// DDL is replicated from what commits (DESIGN.md "DDL: captured from what
// commits"). The session notes every DDL statement a client sends
// (ddlStmt), but only the event triggers' records in the decoded write set
// (capture.DDLRecord) prove which of them ran and were not rolled back:
// joinDDL joins the two when the transaction is terminated.

// ddlStmt is a DDL statement the client sent in the transaction.
type ddlStmt struct {
	sql  string // what the other nodes replay
	sent string // the query text PostgreSQL ran it in: current_query() for its trigger
	// seen: event triggers fire for it. For the few kinds they never see
	// (TRUNCATE, roles, databases, event triggers) nothing proves it ran;
	// it is replayed as sent, as before DDL was captured.
	seen bool
	// bind and portal: for a statement event triggers never see, bound
	// by a client's Bind, where it stands between its Bind and its
	// Execute (bindState). PostgreSQL runs a statement at its Execute: a
	// role bound and never run was created on the other nodes alone.
	bind   bindState
	portal string
	keys   []txn.Key
	// fastDefaults, table: the columns it adds with a default that is not
	// a constant, and their table as written (analysis.LiteralDefaults).
	fastDefaults []string
	table        catalog.Name
	// materializes: the materialized view it fills (analysis.Statement).
	materializes catalog.Name
}

func newDDLStmt(a *analysis.Statement, sent string) ddlStmt {
	d := ddlStmt{sql: a.SQL, sent: sent, seen: !a.NoEventTrigger}
	switch {
	case a.Replay != "":
		d.sql = a.Replay // what the others run: the table WITH NO DATA, its rows are in the write set
	case a.Rewrite != "":
		d.sql = a.Rewrite // what ran (inside a block PostgreSQL refused the original)
	}
	for _, t := range a.DDLTargets {
		d.keys = append(d.keys, txn.TableKey(t.Schema, t.Name))
	}
	d.fastDefaults, d.table = a.FastDefaults, a.FastDefaultsTable
	d.materializes = a.Materializes
	return d
}

// bindState is where a statement bound into a portal stands. The
// transaction's DDL list is also the log of its portals' Binds and
// Executes as the client sent them: PostgreSQL may skip any of them after
// an error in its batch, and the transaction goes on only after a
// ROLLBACK TO a savepoint set before that error, which drops every entry
// sent after the savepoint (savepointOp). So an entry that stands for
// something PostgreSQL skipped is gone before it can matter.
type bindState uint8

const (
	// bindRan: a statement that ran where it stands (a Query's, or one
	// event triggers see, which their records prove).
	bindRan bindState = iota
	// bindUnrun: bound into portal, where it stays; it is not replayed
	// (ranDDL). Its Execute appends a bindExecuted copy (Executed).
	bindUnrun
	// bindExecuted: a copy of the bindUnrun statement before it, where
	// its portal's Execute was sent: replayed there, and undone with what
	// a ROLLBACK TO undoes after it.
	bindExecuted
	// bindRebound: a later Bind of portal, of anything; an Execute after
	// it runs that, not a statement bound before it.
	bindRebound
)

// Executed implements wire.PortalWatcher: the client's Execute of portal
// is being sent. Transaction control bound into it runs (txState.bound).
// If the last thing bound into portal is a statement waiting for it
// (bindUnrun), it runs here, after what was sent since its Bind: a
// SAVEPOINT set in between is before it, and a ROLLBACK TO that
// savepoint undoes it. An Execute of a portal whose statement ran
// already, or that holds something else, adds nothing (PostgreSQL fails
// the first, or runs the other).
func (s *session) Executed(portal string) {
	if t := s.boundInto(portal); t != nil {
		// (Taken as run even where PostgreSQL skips or fails it, after
		// an error earlier in the batch, or a portal closed: a ROLLBACK
		// TO may then restore a block the session forgot;
		// compatibility.md.)
		// Run once: a second Execute fails, after a ROLLBACK TO too.
		s.tx.bound[s.lastBound(portal)].done = true
		s.boundRan(t)
		if len(s.tx.savepoints) == 0 {
			s.settleBound()
		}
		return
	}
	for i := len(s.tx.ddl) - 1; i >= 0; i-- {
		d := s.tx.ddl[i]
		if d.bind == bindRan || d.portal != portal {
			continue
		}
		if d.bind == bindUnrun {
			d.bind = bindExecuted
			s.tx.ddl = append(s.tx.ddl, d)
		}
		return
	}
}

// rebound notes a client's Bind into portal, whatever it binds: a
// statement bound into it before and waiting for its Execute no longer
// runs at one (if PostgreSQL ran this Bind).
func (s *session) rebound(portal string) {
	for _, d := range s.tx.ddl {
		if d.bind == bindUnrun && d.portal == portal {
			s.tx.ddl = append(s.tx.ddl, ddlStmt{bind: bindRebound, portal: portal})
			return
		}
	}
}

// ranDDL is the transaction's DDL as it ran: without the statements
// bound into portals as they were bound, and Binds of other things
// (bindUnrun, bindRebound), but with their Executes (bindExecuted).
func ranDDL(stmts []ddlStmt) []ddlStmt {
	notRun := func(d ddlStmt) bool { return d.bind == bindUnrun || d.bind == bindRebound }
	if slices.ContainsFunc(stmts, notRun) {
		return slices.DeleteFunc(slices.Clone(stmts), notRun)
	}
	return stmts
}

// matviewDepsSQL lists what a materialized view's query reads directly
// (views are expanded through the catalog).
const matviewDepsSQL = `SELECT DISTINCT rn.nspname, r.relname FROM pg_catalog.pg_rewrite rw
JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass AND d.objid = rw.oid
JOIN pg_catalog.pg_class r ON d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass AND r.oid = d.refobjid
JOIN pg_catalog.pg_namespace rn ON rn.oid = r.relnamespace
WHERE rw.ev_class = pg_catalog.to_regclass(%s) AND r.oid <> rw.ev_class AND r.relkind IN ('r', 'p', 'm', 'f', 'v')`

// materializedKeys gives each statement of the transaction that filled a
// materialized view from its query an X key on every table the query
// reads. Every node computes the view's rows itself, the origin from its
// transaction's snapshot and the others at the transaction's point of the
// order: a write to those tables committed in between would give the
// view different rows on different nodes (it did), so certification must
// not let one be concurrent. It runs in the transaction, before the
// PREPARE.
func (s *session) materializedKeys(ctx context.Context) error {
	cat := s.h.cfg.Catalog.Current()
	for i := range s.tx.ddl {
		d := &s.tx.ddl[i]
		if d.materializes.Name == "" {
			continue
		}
		rel := quoteName(d.materializes)
		res, err := s.execOwn(ctx, "reading what materialized view "+rel+" reads", fmt.Sprintf(matviewDepsSQL, quoteLiteral(rel)))
		if err != nil {
			return err
		}
		for _, r := range res.Rows {
			if len(r) != 2 {
				continue
			}
			n := catalog.Name{Schema: r[0], Name: r[1]}
			d.keys = append(d.keys, txn.TableKey(n.Schema, n.Name))
			if cat == nil {
				continue
			}
			if v, ok := cat.Lookup(n); ok && v.Kind == catalog.KindView {
				for _, b := range v.Bases {
					d.keys = append(d.keys, txn.TableKey(b.Schema, b.Name))
				}
			}
		}
	}
	return nil
}

// literalDefaults gives the other nodes the values this node kept for the
// existing rows of the columns the transaction's ALTER TABLEs added with
// a default that is not a constant (now(), current_user): replayed as
// written, each node would compute its own (analysis.LiteralDefaults).
// It runs in the transaction, after its statements, before the PREPARE.
func (s *session) literalDefaults(ctx context.Context) error {
	for i := range s.tx.ddl {
		d := &s.tx.ddl[i]
		if len(d.fastDefaults) == 0 || d.table.Name == "" {
			continue
		}
		rel := quoteName(d.table)
		cols := make([]string, len(d.fastDefaults))
		for j, c := range d.fastDefaults {
			cols[j] = quoteLiteral(c)
		}
		res, err := s.execOwn(ctx, "reading the values ALTER TABLE gave the existing rows of "+rel,
			`SELECT a.attname, (a.attmissingval::pg_catalog.text::pg_catalog.text[])[1] FROM pg_catalog.pg_attribute a
WHERE a.attrelid = pg_catalog.to_regclass(`+quoteLiteral(rel)+`) AND a.atthasmissing AND NOT a.attisdropped
AND a.attname = ANY (ARRAY[`+strings.Join(cols, ", ")+`]::pg_catalog.name[])`,
			`SELECT EXISTS (SELECT 1 FROM `+rel+`)`)
		if err != nil {
			return err
		}
		values, nonEmpty := map[string]string{}, false
		for _, r := range res.Rows {
			switch len(r) {
			case 2: // a column's kept value
				values[r[0]] = r[1]
			case 1: // whether the table has rows
				nonEmpty = r[0] == "t"
			}
		}
		if nonEmpty {
			for _, c := range d.fastDefaults {
				if _, ok := values[c]; !ok {
					return pgErr(codeFeatureNotSupported, "ordo: the value ALTER TABLE gave column %s of the existing rows of %s cannot be read (the table was rewritten, or the column changed, later in the same transaction), so the other nodes could not give them the same; run the ALTER TABLE in a transaction of its own; the transaction was rolled back", c, rel)
				}
			}
		}
		if len(values) == 0 {
			continue
		}
		sql, err := analysis.LiteralDefaults(d.sql, values)
		if err != nil {
			return fmt.Errorf("ordo: replaying ALTER TABLE with the values of its defaults (the transaction was rolled back): %w", err)
		}
		d.sql = sql
	}
	return nil
}

// blockRuns counts the runs of one query text that may run DDL inside a
// block or function.
type blockRuns struct {
	runs     int
	extended bool // run through the extended protocol (it may have parameters)
}

// noteBlock counts a run of the message m, which holds a statement that
// may run DDL inside it.
func (tx *txState) noteBlock(m at) {
	if tx.blocks == nil {
		tx.blocks = map[string]blockRuns{}
	}
	sum := md5.Sum([]byte(m.sent))
	h := hex.EncodeToString(sum[:])
	b := tx.blocks[h]
	b.runs++
	b.extended = b.extended || m.kind != wire.KindQuery
	tx.blocks[h] = b
}

// withoutExtensionScripts drops the records of commands PostgreSQL ran
// for an extension's scripts. CREATE EXTENSION and ALTER EXTENSION …
// UPDATE run the scripts inside the statement, and the statement's own
// record follows theirs, under the same query. The triggers skip script
// commands that report objects (in_extension), but a DROP reports none
// and is recorded (the update scripts of hstore, cube and intarray drop
// operators): such records, as many as the query has beyond the
// statements sent in it, just before the extension's record, belong to
// it and are replayed with it.
func withoutExtensionScripts(records []capture.DDLRecord, sent map[string]int) []capture.DDLRecord {
	ran := map[string]int{}
	for _, r := range records {
		ran[r.QueryHash]++
	}
	var drop map[int]bool
	for k, r := range records {
		if r.Tag != "CREATE EXTENSION" && r.Tag != "ALTER EXTENSION" {
			continue
		}
		extra := ran[r.QueryHash] - sent[r.QueryHash]
		for i := k - 1; i >= 0 && extra > 0; i-- {
			p := records[i]
			if p.QueryHash != r.QueryHash || !strings.HasPrefix(p.Tag, "DROP ") || drop[i] {
				break
			}
			if drop == nil {
				drop = map[int]bool{}
			}
			drop[i] = true
			extra--
			ran[r.QueryHash]--
		}
	}
	if drop == nil {
		return records
	}
	out := make([]capture.DDLRecord, 0, len(records)-len(drop))
	for i, r := range records {
		if !drop[i] {
			out = append(out, r)
		}
	}
	return out
}

// errDDL is returned by joinDDL for DDL that cannot be replicated exactly.
type errDDL struct{ msg string }

func (e *errDDL) Error() string { return e.msg }

// joined is the DDL to replicate: the statements, the settings each ran
// under (nil for none), how many of the write set's rows each ran after,
// and the keys they take.
type joined struct {
	ddl        []string
	settings   [][]capture.Setting
	rowsBefore []int
	keys       []txn.Key
}

func (j *joined) add(sql string, settings []capture.Setting, rowsBefore int, keys ...txn.Key) {
	j.ddl = append(j.ddl, sql)
	j.settings = append(j.settings, settings)
	j.rowsBefore = append(j.rowsBefore, rowsBefore)
	j.keys = append(j.keys, keys...)
}

// joinDDL returns, in the order it ran, the DDL the other nodes replay
// (each under the settings its record gives) and the keys it takes:
//
//   - a statement the client sent is replayed by its text if a record
//     proves it ran and was not rolled back (matched by the query text it
//     was sent in, in order); one without a record (rolled back to a
//     savepoint, or failed and rolled back) is not;
//   - a record no statement accounts for comes from a DO block, function
//     or procedure: its top-level query is replayed once, provided the
//     transaction wrote no rows (otherwise the rows would be applied twice,
//     once by the replay and once from the write set);
//   - statements event triggers never see are replayed as sent.
//
// Each kept command takes X on the tables (and other objects) it touched.
// DDL whose join is ambiguous (one query string that both ran DDL as
// statements and inside a function, or rolled back only some of several
// different DDL statements) is refused rather than guessed.
func joinDDL(stmts []ddlStmt, records []capture.DDLRecord, blocks map[string]blockRuns, writesRows bool) (*joined, error) {
	hashes := make([]string, len(stmts))
	sent := map[string]int{}
	texts := map[string]map[string]bool{}
	for i, s := range stmts {
		if !s.seen {
			continue
		}
		sum := md5.Sum([]byte(s.sent))
		hashes[i] = hex.EncodeToString(sum[:])
		sent[hashes[i]]++
		if texts[hashes[i]] == nil {
			texts[hashes[i]] = map[string]bool{}
		}
		texts[hashes[i]][s.sql] = true
	}
	records = withoutExtensionScripts(records, sent)
	ran := map[string]int{}
	for _, r := range records {
		ran[r.QueryHash]++
	}
	for h, n := range ran {
		switch {
		case sent[h] > 0 && n > sent[h]:
			return nil, &errDDL{"ordo: one query string ran DDL both as statements and inside a DO block, function or procedure; send them as separate statements"}
		case n > 0 && n < sent[h] && len(texts[h]) > 1:
			return nil, &errDDL{"ordo: some DDL statements of one query string were rolled back and others not; send them as separate statements so Ordo can tell which ran"}
		}
	}
	out := &joined{}
	i := 0
	lastBlock := ""
	// at: the rows the statements so far ran after (a statement event
	// triggers never see takes the position of the record before it).
	at := 0
	for _, r := range records {
		j := i
		for j < len(stmts) && !(stmts[j].seen && hashes[j] == r.QueryHash) {
			j++
		}
		if r.NoOp {
			// It did nothing: nothing to replay. A statement's keeps its
			// keys (it read that its object existed, or not).
			if j < len(stmts) {
				for ; i < j; i++ {
					if !stmts[i].seen {
						out.add(stmts[i].sql, nil, at, stmts[i].keys...)
					}
				}
				out.keys = append(out.keys, stmts[j].keys...)
				i = j + 1
			}
			continue
		}
		if j == len(stmts) {
			if b := blocks[r.QueryHash]; b.runs != 1 || b.extended {
				return nil, &errDDL{fmt.Sprintf("ordo: DDL run inside a DO block, function or procedure (%s, in %q) can be replicated only when the statement that ran it was sent once in the transaction, as a simple query without parameters; run the DDL as plain statements", r.Tag, abbreviate(r.Query))}
			}
			if writesRows {
				return nil, &errDDL{fmt.Sprintf("ordo: DDL run inside a DO block, function or procedure (%s, in %q) cannot be replicated exactly in a transaction that also writes rows; run the DDL as plain statements, or in a transaction of its own", r.Tag, abbreviate(r.Query))}
			}
			if r.Query != lastBlock {
				out.add(r.Query, replaySettings(r), r.RowsBefore)
				lastBlock = r.Query
			}
			out.keys = append(out.keys, objectKeys(r.Objects)...)
			at = r.RowsBefore
			continue
		}
		for ; i < j; i++ {
			if !stmts[i].seen {
				out.add(stmts[i].sql, nil, at, stmts[i].keys...)
			}
		}
		out.add(stmts[j].sql, replaySettings(r), r.RowsBefore, stmts[j].keys...)
		out.keys = append(out.keys, objectKeys(r.Objects)...)
		at = r.RowsBefore
		lastBlock = ""
		i = j + 1
	}
	for ; i < len(stmts); i++ {
		if !stmts[i].seen {
			out.add(stmts[i].sql, nil, at, stmts[i].keys...)
		}
	}
	return out, nil
}

// replaySettings are what a replay of r runs under: as the user and role
// that ran it (never with more privilege than the origin's session had:
// objects get the same owner, and a block's privilege checks answer the
// same), then the settings it ran under.
func replaySettings(r capture.DDLRecord) []capture.Setting {
	var out []capture.Setting
	if r.SessionUser != "" {
		out = append(out, capture.Setting{Name: capture.SettingSessionAuthorization, Value: r.SessionUser})
		if r.Role != "" && r.Role != "none" {
			out = append(out, capture.Setting{Name: capture.SettingRole, Value: r.Role})
		}
	}
	return append(out, r.Settings...)
}

// objectKeys returns a table-level key for each object with a schema: a
// relation's own key for tables, columns and constraints on tables, the
// object's qualified name for others (types, indexes, functions…): an
// over-approximation that can only cost aborts.
func objectKeys(objs []capture.DDLObject) []txn.Key {
	var keys []txn.Key
	for _, o := range objs {
		if o.Schema == "" {
			continue
		}
		id := o.Identity
		if _, on, ok := strings.Cut(id, " on "); ok { // "table constraint c on s.t", "trigger tr on s.t"
			id = on
		}
		parts := splitIdentity(id)
		if len(parts) < 2 {
			continue
		}
		keys = append(keys, txn.TableKey(parts[0], parts[1]))
	}
	return keys
}

// splitIdentity splits a qualified identity such as public."My Table".c
// into its unquoted parts.
func splitIdentity(id string) []string {
	var parts []string
	var b strings.Builder
	quoted := false
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c == '"' && quoted && i+1 < len(id) && id[i+1] == '"':
			b.WriteByte('"')
			i++
		case c == '"':
			quoted = !quoted
		case c == '.' && !quoted:
			parts = append(parts, b.String())
			b.Reset()
		case c == '(' && !quoted: // a function's argument list
			parts = append(parts, b.String())
			return parts
		default:
			b.WriteByte(c)
		}
	}
	return append(parts, b.String())
}

func abbreviate(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 80 {
		return s[:77] + "..."
	}
	return s
}

// quoteName quotes a relation's name as written (Schema "": unqualified).
func quoteName(n catalog.Name) string {
	if n.Schema == "" {
		return pgx.Identifier{n.Name}.Sanitize()
	}
	return pgx.Identifier{n.Schema, n.Name}.Sanitize()
}
