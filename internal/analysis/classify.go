package analysis

import (
	"fmt"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"sort"
	"strconv"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"

	"github.com/ordo-db/ordo/internal/catalog"
	"github.com/ordo-db/ordo/internal/txn"
)

const ddlReason = "DDL is ordered against every transaction"

// analyzeStmt classifies one parsed statement and collects its tables.
func analyzeStmt(cat *catalog.Catalog, sp []string, n *pg.Node, text string, offset, limit int) *Statement {
	st := &Statement{SQL: text, Offset: offset, Executes: true, limit: limit, GranuleSeqno: cat.GranuleSeqno()}
	w := &walker{cat: cat, sp: sp, st: st,
		reads: map[catalog.Name]bool{}, writes: map[catalog.Name]bool{}, locks: map[catalog.Name]bool{}}
	w.top(n)
	if n != nil {
		w.paramLocs = map[int32][]int32{}
		countParams(n.ProtoReflect(), w.paramLocs)
	}
	w.finish()
	if st.Kind != KindRefused {
		if obj := w.ordoObject(n); obj != "" {
			st.Kind, st.RefusedCode = KindRefused, "42501" // insufficient_privilege, superusers too
			st.Reason = "ordo: " + obj + " is Ordo's own (each node's bookkeeping of what it applied, or what feeds its capture), and clients may read it but not change it; " +
				"to restore a dump taken through a node, leave Ordo's objects out: pg_dump --exclude-schema=" + OrdoSchema + " --no-publications (docs/backups.md)"
		}
	}
	return st
}

// cursorOptHold is PostgreSQL's CURSOR_OPT_HOLD (DECLARE … WITH HOLD).
const cursorOptHold = 0x0020

func tagOf(n *pg.Node) string {
	if n == nil || n.Node == nil {
		return ""
	}
	t := fmt.Sprintf("%T", n.Node)
	t = strings.TrimPrefix(t, "*pg_query.Node_")
	return t
}

// noBlock names a statement PostgreSQL never runs in a transaction block
// as its errors name it (Statement.NoBlock), "" for any other.
func noBlock(n *pg.Node) string {
	switch x := n.Node.(type) {
	case *pg.Node_DiscardStmt:
		if x.DiscardStmt.Target == pg.DiscardMode_DISCARD_ALL {
			return "DISCARD ALL"
		}
	case *pg.Node_VacuumStmt:
		if x.VacuumStmt.IsVacuumcmd {
			return "VACUUM"
		}
	case *pg.Node_AlterSystemStmt:
		return "ALTER SYSTEM"
	case *pg.Node_CreatedbStmt:
		return "CREATE DATABASE"
	case *pg.Node_DropdbStmt:
		return "DROP DATABASE"
	case *pg.Node_CreateTableSpaceStmt:
		return "CREATE TABLESPACE"
	case *pg.Node_DropTableSpaceStmt:
		return "DROP TABLESPACE"
	}
	return ""
}

func (w *walker) top(n *pg.Node) {
	st := w.st
	st.Tag = tagOf(n)
	if n == nil || n.Node == nil {
		st.Kind = KindEmpty
		return
	}
	if largeObjectDDL(n) {
		// GRANT, COMMENT, ALTER … OWNER on a large object: part of the
		// object's state, which the session replicates with its content
		// (Statement.LargeObjects); not replayed as DDL.
		st.Kind = KindWrite
		w.largeObjects, w.largeObjectWrites = true, true
		return
	}
	switch x := n.Node.(type) {
	case *pg.Node_SelectStmt:
		st.Kind = KindRead
		if ic := x.SelectStmt.IntoClause; ic != nil && ic.Rel.GetRelpersistence() == "t" {
			st.Kind, st.TempNamespace = KindLocal, true
			st.Tag = "SelectInto"
			st.Reason = "temporary tables are local to the session and not replicated"
			w.selectStmt(x.SelectStmt, nil)
			return
		}
		if x.SelectStmt.IntoClause != nil {
			st.Kind = KindDDL
			st.Tag = "SelectInto"
			w.ddl(n)
			w.withNoData(n)
			return
		}
		w.selectStmt(x.SelectStmt, nil)
		w.notifyCall(x.SelectStmt)
	case *pg.Node_InsertStmt, *pg.Node_UpdateStmt, *pg.Node_DeleteStmt, *pg.Node_MergeStmt:
		st.Kind = KindWrite
		w.query(n, nil)
	case *pg.Node_TransactionStmt:
		w.txnStmt(x.TransactionStmt)
	case *pg.Node_VariableSetStmt:
		w.setStmt(x.VariableSetStmt)
	case *pg.Node_VariableShowStmt:
		st.Kind = KindSession
		name := strings.ToLower(x.VariableShowStmt.Name)
		st.Setting = &Setting{Name: name, Show: true, Ordo: strings.HasPrefix(name, "ordo.")}
	case *pg.Node_DiscardStmt, *pg.Node_DeallocateStmt, *pg.Node_ConstraintsSetStmt, *pg.Node_FetchStmt, *pg.Node_ClosePortalStmt:
		st.Kind = KindSession
		st.NoBlock = noBlock(n)
		if n.GetConstraintsSetStmt() != nil {
			st.WarnsOutsideBlock = "SET CONSTRAINTS"
		}
		if d := n.GetDiscardStmt(); d != nil && d.Target == pg.DiscardMode_DISCARD_ALL {
			st.DiscardsAll, st.FreesAll = true, true
		}
		if d := n.GetDeallocateStmt(); d != nil {
			st.FreesAll = d.Isall
			if !d.Isall {
				st.Deallocates = d.Name
			}
		}
	case *pg.Node_PrepareStmt:
		st.Kind = KindSession
		inner := &Statement{SQL: st.SQL, Offset: st.Offset, Executes: true, limit: st.limit}
		iw := &walker{cat: w.cat, sp: w.sp, st: inner,
			reads: map[catalog.Name]bool{}, writes: map[catalog.Name]bool{}, locks: map[catalog.Name]bool{}}
		iw.top(x.PrepareStmt.Query)
		for _, a := range x.PrepareStmt.Argtypes {
			iw.castTo(a.GetTypeName()) // each EXECUTE casts its values to them
		}
		iw.finish()
		st.Prepared, st.PreparedName = inner, x.PrepareStmt.Name
	case *pg.Node_ExecuteStmt:
		st.Kind = KindOpaque
		st.Reason = "EXECUTE runs a statement prepared with SQL PREPARE " + x.ExecuteStmt.Name + "; use that statement's analysis"
		w.escalate("EXECUTE of a SQL-level prepared statement")
		st.WritesAll = true
		w.exprs(x.ExecuteStmt.Params, nil)
	case *pg.Node_DeclareCursorStmt:
		st.Kind = KindRead
		st.Cursor = x.DeclareCursorStmt.Portalname
		if x.DeclareCursorStmt.Options&cursorOptHold == 0 {
			st.BlockOnly = "DECLARE CURSOR"
		}
		w.query(x.DeclareCursorStmt.Query, nil)
	case *pg.Node_ListenStmt, *pg.Node_UnlistenStmt:
		st.Kind = KindNotify
	case *pg.Node_NotifyStmt:
		st.Kind = KindNotify
		st.Notify = &Notification{Channel: x.NotifyStmt.Conditionname, Payload: x.NotifyStmt.Payload}
	case *pg.Node_LockStmt:
		st.Kind = KindLock
		st.BlockOnly = "LOCK TABLE"
		for _, r := range x.LockStmt.Relations {
			if rv := r.GetRangeVar(); rv != nil {
				w.lockTarget(rv)
			}
		}
	case *pg.Node_CopyStmt:
		w.copyStmt(x.CopyStmt)
	case *pg.Node_CallStmt:
		st.Kind = KindOpaque
		st.Reason = "CALL runs a procedure the analyzer cannot see into"
		w.escalate(st.Reason)
		st.WritesAll = true
		// Its body may run SET search_path, or set_config, or write a
		// table whose trigger does (which ChangesNames does not follow).
		w.setsSearchPath = true
		if fc := x.CallStmt.Funccall; fc != nil {
			w.exprs(fc.Args, nil)
		}
	case *pg.Node_DoStmt:
		st.Kind = KindOpaque
		st.Reason = "DO runs an anonymous code block the analyzer cannot see into"
		w.escalate(st.Reason)
		st.WritesAll = true
		w.setsSearchPath = true // it may run SET search_path, or set_config
	case *pg.Node_ExplainStmt:
		analyze := false
		for _, o := range x.ExplainStmt.Options {
			d := o.GetDefElem()
			if d != nil && d.Defname == "analyze" && defBool(d) {
				analyze = true
			}
		}
		if !analyze {
			st.Kind = KindExplain
			st.Explain = true
			st.Executes = false
			return
		}
		w.top(x.ExplainStmt.Query)
		st.Tag = "ExplainStmt"
		st.Explain = true
	case *pg.Node_VacuumStmt, *pg.Node_CheckPointStmt, *pg.Node_ClusterStmt, *pg.Node_ReindexStmt, *pg.Node_LoadStmt, *pg.Node_AlterSystemStmt:
		st.Kind = KindLocal
		st.NoBlock = noBlock(n)
	case *pg.Node_CreatedbStmt, *pg.Node_DropdbStmt, *pg.Node_CreateTableSpaceStmt, *pg.Node_DropTableSpaceStmt:
		// One database per node is replicated; other databases and
		// tablespaces (directories of this server) are the node's own.
		st.Kind = KindLocal
		st.Reason = "databases and tablespaces are created per node; only the configured database is replicated"
		st.NoBlock = noBlock(n)
	case *pg.Node_IndexStmt:
		st.Kind = KindDDL
		w.ddl(n)
		if x.IndexStmt.Concurrent {
			w.withoutConcurrently(n, "CREATE INDEX CONCURRENTLY", "writes to the table")
		}
	case *pg.Node_DropStmt:
		st.Kind = KindDDL
		w.ddl(n)
		if x.DropStmt.Concurrent {
			w.withoutConcurrently(n, "DROP INDEX CONCURRENTLY", "writes to the table")
		}
	case *pg.Node_RefreshMatViewStmt:
		st.Kind = KindDDL
		w.ddl(n)
		if rv := x.RefreshMatViewStmt.Relation; rv != nil && !x.RefreshMatViewStmt.SkipData {
			st.Materializes = catalog.Name{Schema: rv.Schemaname, Name: rv.Relname}
		}
		if x.RefreshMatViewStmt.Concurrent {
			w.withoutConcurrently(n, "REFRESH MATERIALIZED VIEW CONCURRENTLY", "reads of the view")
		}
	case *pg.Node_TruncateStmt:
		st.Kind = KindDDL
		w.ddl(n)
		for _, r := range x.TruncateStmt.Relations {
			if rv := r.GetRangeVar(); rv != nil {
				ref := w.relation(rv, nil, false, true)
				if ref.acc >= 0 {
					w.st.acc[ref.acc].tableOnly = true
				}
			}
		}
	case *pg.Node_CreateTableAsStmt:
		st.Kind = KindDDL
		st.TempNamespace = x.CreateTableAsStmt.Into.GetRel().GetRelpersistence() == "t"
		w.ddl(n)
		if x.CreateTableAsStmt.Into.GetRel().GetRelpersistence() == "u" {
			if n = w.asLogged(n); n == nil {
				return
			}
		}
		if x.CreateTableAsStmt.Objtype == pg.ObjectType_OBJECT_TABLE {
			w.withNoData(n)
		}
		if into := x.CreateTableAsStmt.Into; x.CreateTableAsStmt.Objtype == pg.ObjectType_OBJECT_MATVIEW && into != nil && into.Rel != nil && !into.SkipData {
			st.Materializes = catalog.Name{Schema: into.Rel.Schemaname, Name: into.Rel.Relname}
		}
	case *pg.Node_CreateStmt:
		if x.CreateStmt.Relation.GetRelpersistence() == "u" {
			st.Kind = KindDDL
			w.ddl(n)
			w.asLogged(n)
			return
		}
		if x.CreateStmt.Relation.GetRelpersistence() == "t" {
			st.Kind, st.TempNamespace = KindLocal, true
			st.Reason = "temporary tables are local to the session and not replicated"
			return
		}
		st.Kind = KindDDL
		w.ddl(n)
	case *pg.Node_AlterTableStmt:
		st.Kind = KindDDL
		w.ddl(n)
		if what := w.nodeDependentUsing(x.AlterTableStmt); what != "" {
			st.Kind = KindRefused
			st.Reason = "ordo: ALTER TABLE … TYPE … USING computes the column's new values with " + what +
				", which gives each node that replays the statement values of its own; compute them once: add a column of the new type, UPDATE it (replicated row by row), then drop the old one and rename the new"
			return
		}
		if st.FastDefaults = nonConstantDefaults(x.AlterTableStmt); len(st.FastDefaults) > 0 {
			if rv := x.AlterTableStmt.Relation; rv != nil {
				st.FastDefaultsTable = catalog.Name{Schema: rv.Schemaname, Name: rv.Relname}
			}
		}
		for _, c := range x.AlterTableStmt.Cmds {
			if c.GetAlterTableCmd().GetSubtype() == pg.AlterTableType_AT_SetUnLogged {
				w.asLogged(n)
				break
			}
		}
	default:
		st.Kind = KindDDL
		w.ddl(n)
	}
}

// largeObjectDDL reports whether n changes the privileges, comment,
// owner or security label of a large object.
func largeObjectDDL(n *pg.Node) bool {
	const lo = pg.ObjectType_OBJECT_LARGEOBJECT
	switch x := n.Node.(type) {
	case *pg.Node_GrantStmt:
		return x.GrantStmt.Objtype == lo
	case *pg.Node_CommentStmt:
		return x.CommentStmt.Objtype == lo
	case *pg.Node_AlterOwnerStmt:
		return x.AlterOwnerStmt.ObjectType == lo
	case *pg.Node_SecLabelStmt:
		return x.SecLabelStmt.Objtype == lo
	}
	return false
}

// noEventTrigger reports whether PostgreSQL fires no event trigger for
// the DDL statement n (EventTriggerSupportsObjectType and the commands
// event triggers do not cover).
func noEventTrigger(n *pg.Node) bool {
	global := func(t pg.ObjectType) bool {
		switch t {
		case pg.ObjectType_OBJECT_DATABASE, pg.ObjectType_OBJECT_TABLESPACE, pg.ObjectType_OBJECT_ROLE,
			pg.ObjectType_OBJECT_PARAMETER_ACL, pg.ObjectType_OBJECT_EVENT_TRIGGER:
			return true
		}
		return false
	}
	switch x := n.Node.(type) {
	case *pg.Node_TruncateStmt, *pg.Node_CreateRoleStmt, *pg.Node_AlterRoleStmt, *pg.Node_AlterRoleSetStmt,
		*pg.Node_DropRoleStmt, *pg.Node_GrantRoleStmt, *pg.Node_CreateEventTrigStmt, *pg.Node_AlterEventTrigStmt,
		*pg.Node_AlterDatabaseStmt, *pg.Node_AlterDatabaseSetStmt, *pg.Node_AlterDatabaseRefreshCollStmt,
		*pg.Node_ReassignOwnedStmt:
		return true
	case *pg.Node_GrantStmt:
		return global(x.GrantStmt.Objtype)
	case *pg.Node_CommentStmt:
		return global(x.CommentStmt.Objtype)
	case *pg.Node_SecLabelStmt:
		return global(x.SecLabelStmt.Objtype)
	case *pg.Node_RenameStmt:
		return global(x.RenameStmt.RenameType)
	case *pg.Node_AlterOwnerStmt:
		return global(x.AlterOwnerStmt.ObjectType)
	case *pg.Node_DropStmt:
		return global(x.DropStmt.RemoveType)
	}
	return false
}

// unloggedReason refuses unlogged tables.
const unloggedReason = "ordo: unlogged tables are not replicated (logical decoding does not carry their rows); create a regular table, or a temporary one for data local to the session"

// asLogged sets Rewrite to the statement with its table logged (CREATE
// UNLOGGED TABLE, CREATE UNLOGGED TABLE … AS, ALTER TABLE … SET UNLOGGED,
// which becomes SET LOGGED) and returns the rewritten node, or refuses
// the statement and returns nil. Logical decoding carries no rows of an
// unlogged table, so one would silently differ from node to node; a
// logged table only costs its WAL, and every node keeps it.
func (w *walker) asLogged(n *pg.Node) *pg.Node {
	c := proto.Clone(n).(*pg.Node)
	switch x := c.Node.(type) {
	case *pg.Node_CreateStmt:
		x.CreateStmt.Relation.Relpersistence = "p"
	case *pg.Node_CreateTableAsStmt:
		x.CreateTableAsStmt.Into.Rel.Relpersistence = "p"
	case *pg.Node_AlterTableStmt:
		for _, cmd := range x.AlterTableStmt.Cmds {
			if a := cmd.GetAlterTableCmd(); a != nil && a.Subtype == pg.AlterTableType_AT_SetUnLogged {
				a.Subtype = pg.AlterTableType_AT_SetLogged
			}
		}
	}
	sql, err := pg.Deparse(&pg.ParseResult{Stmts: []*pg.RawStmt{{Stmt: c}}})
	if err != nil {
		w.st.Kind, w.st.Reason = KindRefused, unloggedReason
		return nil
	}
	w.st.Rewrite, w.st.RewriteInBlock = sql, true
	w.st.Notice = "ordo: the table is created (or kept) logged, not UNLOGGED: logical decoding carries no rows of an unlogged table, so Ordo could not replicate it"
	return c
}

// withoutConcurrently sets Rewrite to the statement without CONCURRENTLY.
// A concurrent index build cannot run in a transaction block, and every
// node must build the index at the same point of the total order: Ordo
// runs it as a plain CREATE (DROP) INDEX inside its replicated
// transaction, which blocks writes to the table while it runs. A
// concurrent refresh of a materialized view builds its difference in a
// temporary table, and PostgreSQL cannot prepare a transaction that
// touched one: it runs as a plain refresh, which blocks reads of the view
// while it runs.
func (w *walker) withoutConcurrently(n *pg.Node, what, waiting string) {
	c := proto.Clone(n).(*pg.Node)
	switch x := c.Node.(type) {
	case *pg.Node_IndexStmt:
		x.IndexStmt.Concurrent = false
	case *pg.Node_DropStmt:
		x.DropStmt.Concurrent = false
	case *pg.Node_RefreshMatViewStmt:
		x.RefreshMatViewStmt.Concurrent = false
	}
	sql, err := pg.Deparse(&pg.ParseResult{Stmts: []*pg.RawStmt{{Stmt: c}}})
	if err != nil {
		w.st.Kind = KindRefused
		w.st.Reason = fmt.Sprintf("ordo: %s cannot be replicated here (%v); run it without CONCURRENTLY", what, err)
		return
	}
	w.st.Rewrite = sql
	w.st.Notice = fmt.Sprintf("ordo: %s runs without CONCURRENTLY, in total order on every node: %s wait until it is done", what, waiting)
}

// withNoData sets Replay to a CREATE TABLE … AS or SELECT … INTO as
// CREATE TABLE … AS … WITH NO DATA: the rows it inserts here are in the
// write set, and replaying the query on the other nodes would insert them
// a second time (or other rows, from a volatile query).
func (w *walker) withNoData(n *pg.Node) {
	var ctas *pg.CreateTableAsStmt
	switch x := proto.Clone(n).(*pg.Node).Node.(type) {
	case *pg.Node_CreateTableAsStmt:
		ctas = x.CreateTableAsStmt
	case *pg.Node_SelectStmt:
		into := x.SelectStmt.IntoClause
		x.SelectStmt.IntoClause = nil
		ctas = &pg.CreateTableAsStmt{Query: &pg.Node{Node: x}, Into: into, Objtype: pg.ObjectType_OBJECT_TABLE}
	default:
		return
	}
	ctas.Into.SkipData = true
	sql, err := pg.Deparse(&pg.ParseResult{Stmts: []*pg.RawStmt{{Stmt: &pg.Node{Node: &pg.Node_CreateTableAsStmt{CreateTableAsStmt: ctas}}}}})
	if err != nil {
		w.st.Kind = KindRefused
		w.st.Reason = fmt.Sprintf("ordo: this CREATE TABLE … AS cannot be replicated exactly (%v); create the table, then INSERT … SELECT", err)
		return
	}
	w.st.Replay = sql
}

func (w *walker) ddl(n *pg.Node) {
	w.st.NoEventTrigger = noEventTrigger(n)
	w.escalate(ddlReason)
	w.st.WritesAll = true
	w.st.DDLTargets = w.ddlTargets(n)
}

// ddlTargets names the relations a DDL statement mentions outside queries:
// every RangeVar in it (the table altered, created, indexed, referenced by
// a foreign key…) and the objects of a DROP of relations. Names are resolved with the search path; a name
// the catalog does not know (a table being created) is qualified with the
// schema it would be created in. Over-approximating is safe: each target
// becomes an X key in certification.
func (w *walker) ddlTargets(n *pg.Node) []catalog.Name {
	seen := map[catalog.Name]bool{}
	add := func(schema, name string) {
		if name == "" {
			return
		}
		if rel, ok := w.cat.Resolve(w.sp, schema, name); ok {
			seen[rel.Name] = true
			return
		}
		if schema == "" {
			schema = catalog.DefaultSchema(w.sp)
		}
		seen[catalog.Name{Schema: schema, Name: name}] = true
	}
	var walk func(m protoreflect.Message)
	walk = func(m protoreflect.Message) {
		switch x := m.Interface().(type) {
		case *pg.RangeVar:
			add(x.Schemaname, x.Relname)
			return
		case *pg.SelectStmt:
			// The query of a view or CREATE TABLE AS only reads its
			// tables; the statement does not change them.
			return
		case *pg.DropStmt:
			switch x.RemoveType {
			case pg.ObjectType_OBJECT_TABLE, pg.ObjectType_OBJECT_VIEW, pg.ObjectType_OBJECT_MATVIEW,
				pg.ObjectType_OBJECT_INDEX, pg.ObjectType_OBJECT_SEQUENCE, pg.ObjectType_OBJECT_FOREIGN_TABLE:
				for _, o := range x.Objects {
					var parts []string
					for _, it := range o.GetList().GetItems() {
						parts = append(parts, it.GetString_().GetSval())
					}
					switch len(parts) {
					case 1:
						add("", parts[0])
					case 2, 3:
						add(parts[len(parts)-2], parts[len(parts)-1])
					}
				}
			}
		}
		m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			switch {
			case fd.IsList() && fd.Message() != nil:
				l := v.List()
				for i := 0; i < l.Len(); i++ {
					walk(l.Get(i).Message())
				}
			case fd.IsMap():
			case fd.Message() != nil:
				walk(v.Message())
			}
			return true
		})
	}
	if n != nil {
		walk(n.ProtoReflect())
	}
	return sortedNames(seen)
}

func defBool(d *pg.DefElem) bool {
	if d.Arg == nil {
		return true
	}
	if c := d.Arg.GetAConst(); c != nil {
		if b := c.GetBoolval(); b != nil {
			return b.Boolval
		}
		if i := c.GetIval(); i != nil {
			return i.Ival != 0
		}
		if s := c.GetSval(); s != nil {
			v, ok := canonical("bool", s.Sval)
			return ok && v == "t"
		}
	}
	if s := d.Arg.GetString_(); s != nil {
		v, ok := canonical("bool", s.Sval)
		return ok && v == "t"
	}
	if b := d.Arg.GetBoolean(); b != nil {
		return b.Boolval
	}
	return true
}

func (w *walker) lockTarget(rv *pg.RangeVar) {
	rel, ok := w.cat.Resolve(w.sp, rv.Schemaname, rv.Relname)
	if !ok {
		w.markUnknown(rv.Relname)
		w.locks[catalog.Name{Schema: rv.Schemaname, Name: rv.Relname}] = true
		return
	}
	w.lockRef(relRef{rel: rel})
}

func (w *walker) copyStmt(c *pg.CopyStmt) {
	st := w.st
	if c.IsFrom {
		st.Kind = KindCopyFrom
		if c.Relation != nil {
			w.writing = 'i'
			ref := w.relation(c.Relation, nil, false, true)
			w.writing = 0
			if ref.acc >= 0 {
				w.st.acc[ref.acc].tableOnly = true
			}
		}
		w.expr(c.WhereClause, nil)
		return
	}
	st.Kind = KindCopyTo
	if c.Relation != nil {
		ref := w.relation(c.Relation, nil, true, false)
		if ref.acc >= 0 {
			w.st.acc[ref.acc].tableOnly = true
		}
	}
	if c.Query != nil {
		w.query(c.Query, nil)
	}
}

func (w *walker) txnStmt(t *pg.TransactionStmt) {
	st := w.st
	st.Kind = KindTxn
	tc := &TxnControl{Chain: t.Chain, Savepoint: t.SavepointName, GID: t.Gid}
	st.Txn = tc
	switch t.Kind {
	case pg.TransactionStmtKind_TRANS_STMT_BEGIN, pg.TransactionStmtKind_TRANS_STMT_START:
		tc.Op = TxnBegin
		txnOptions(tc, t.Options)
		tc.ConflictClasses, tc.Profile = leadingDirectives(st.SQL)
	case pg.TransactionStmtKind_TRANS_STMT_COMMIT:
		tc.Op = TxnCommit
	case pg.TransactionStmtKind_TRANS_STMT_ROLLBACK:
		tc.Op = TxnRollback
	case pg.TransactionStmtKind_TRANS_STMT_SAVEPOINT:
		tc.Op = TxnSavepoint
	case pg.TransactionStmtKind_TRANS_STMT_RELEASE:
		tc.Op = TxnRelease
	case pg.TransactionStmtKind_TRANS_STMT_ROLLBACK_TO:
		tc.Op = TxnRollbackTo
	case pg.TransactionStmtKind_TRANS_STMT_PREPARE:
		tc.Op = TxnPrepare
		st.Kind = KindRefused
		st.Reason = "ordo: PREPARE TRANSACTION is not allowed: Ordo runs two-phase commit itself to replicate every transaction; use COMMIT"
	case pg.TransactionStmtKind_TRANS_STMT_COMMIT_PREPARED:
		tc.Op = TxnCommitPrepared
		st.Kind = KindRefused
		st.Reason = "ordo: COMMIT PREPARED is not allowed: Ordo owns all prepared transactions and decides their outcome through the replication protocol"
	case pg.TransactionStmtKind_TRANS_STMT_ROLLBACK_PREPARED:
		tc.Op = TxnRollbackPrepared
		st.Kind = KindRefused
		st.Reason = "ordo: ROLLBACK PREPARED is not allowed: Ordo owns all prepared transactions and decides their outcome through the replication protocol"
	}
}

func txnOptions(tc *TxnControl, opts []*pg.Node) {
	for _, o := range opts {
		d := o.GetDefElem()
		if d == nil {
			continue
		}
		switch d.Defname {
		case "transaction_isolation":
			if c := d.Arg.GetAConst(); c != nil && c.GetSval() != nil {
				tc.Isolation = strings.ToLower(c.GetSval().Sval)
			}
		case "transaction_read_only":
			if defBool(d) {
				tc.ReadOnly = 1
			} else {
				tc.ReadOnly = -1
			}
		case "transaction_deferrable":
			if defBool(d) {
				tc.Deferrable = 1
			} else {
				tc.Deferrable = -1
			}
		}
	}
}

func (w *walker) setStmt(s *pg.VariableSetStmt) {
	st := w.st
	name := strings.ToLower(s.Name)
	if s.Kind == pg.VariableSetKind_VAR_SET_MULTI && name == "transaction" {
		st.Kind = KindTxn
		st.WarnsOutsideBlock = "SET TRANSACTION"
		tc := &TxnControl{Op: TxnSetTransaction}
		txnOptions(tc, s.Args)
		st.Txn = tc
		return
	}
	st.Kind = KindSession
	set := &Setting{Name: name, Local: s.IsLocal, Ordo: strings.HasPrefix(name, "ordo.")}
	switch {
	case s.IsLocal:
		st.WarnsOutsideBlock = "SET LOCAL"
	case s.Kind == pg.VariableSetKind_VAR_SET_MULTI && name == "transaction snapshot":
		st.WarnsOutsideBlock = "SET TRANSACTION"
	}
	switch s.Kind {
	case pg.VariableSetKind_VAR_SET_DEFAULT, pg.VariableSetKind_VAR_RESET:
		set.Reset = true
	case pg.VariableSetKind_VAR_RESET_ALL:
		set.Reset = true
		set.Name = "all"
	case pg.VariableSetKind_VAR_SET_VALUE:
		var vals []string
		for _, a := range s.Args {
			vals = append(vals, constText(a))
		}
		set.Value, set.Values = strings.Join(vals, ", "), vals
	}
	st.Setting = set
}

// constText renders a SET argument as PostgreSQL would store it.
func constText(n *pg.Node) string {
	if tc := n.GetTypeCast(); tc != nil {
		return constText(tc.Arg)
	}
	c := n.GetAConst()
	if c == nil {
		return ""
	}
	switch v := c.Val.(type) {
	case *pg.A_Const_Ival:
		return strconv.Itoa(int(v.Ival.Ival))
	case *pg.A_Const_Fval:
		return v.Fval.Fval
	case *pg.A_Const_Sval:
		return v.Sval.Sval
	case *pg.A_Const_Boolval:
		return strconv.FormatBool(v.Boolval.Boolval)
	}
	return ""
}

// finish turns the walker's findings into the Statement's fields.
func (w *walker) finish() {
	st := w.st
	if w.readsAll != "" {
		st.ReadsAll = true
		if st.Reason == "" {
			st.Reason = w.readsAll
		}
	}
	st.SetsSequence = w.setval
	st.SetsOrdoConfig = w.setsOrdoConfig
	st.SetsSearchPath = w.setsSearchPath
	st.LargeObjects, st.WritesLargeObjects = w.largeObjects, w.largeObjectWrites
	if w.refused != "" {
		st.Kind, st.Reason = KindRefused, w.refused
		return
	}
	switch st.Kind {
	case KindRead, KindCopyTo:
		// (COPY (query) TO runs its query as a read runs one: one that
		// calls what may write, or an INSERT … RETURNING, is an update.)
		if (w.setval || w.largeObjectWrites) && w.opaque == "" {
			st.Kind = KindWrite // sequence and large object state is replicated at commit
		}
		if w.opaque != "" {
			st.Kind = KindOpaque
			st.Reason = w.opaque
			st.WritesAll = true
		} else if w.dml || w.locking {
			st.Kind = KindWrite
		}
	case KindWrite, KindCopyFrom:
		if w.opaque != "" {
			st.WritesAll = true
			if st.Reason == "" || st.Reason == w.readsAll {
				st.Reason = w.opaque
			}
		}
	}
	st.Reads = sortedNames(w.reads)
	st.Writes = sortedNames(w.writes)
	st.Locks = sortedNames(w.locks)
	for u := range w.unknown {
		st.Unknown = append(st.Unknown, u)
	}
	sort.Strings(st.Unknown)
	st.UnknownRelations = sortedNames(w.unknownRels)
	if len(st.Reads) == 0 {
		st.Reads = nil
	}
	params := false
	for i := range st.acc {
		w.dropSharedParams(&st.acc[i])
		if st.acc[i].usesParams() {
			params = true
		}
	}
	if !params {
		st.static = st.footprint(nil)
	}
}

// dropSharedParams unfixes a's key columns whose values come from a $n
// that occurs anywhere else than as the value of a key column of the same
// type family. PostgreSQL gives an untyped $n the type its first use asks
// for: in "SELECT $1::float8, … WHERE id = $1" it is a float8, the client
// sends a float8's bytes, and id compares that value as a float8; in
// "WHERE ol_w_id = $1 AND s_w_id = $1" it is an integer wherever it is.
// (A type its Parse declared is checked at Bind: declaredAs.)
func (w *walker) dropSharedParams(a *access) {
	sameUse := func(vs []val, colType string) bool {
		fam := typeFamily(colType)
		for _, v := range vs {
			if v.kind != vParam && v.kind != vParamArray {
				continue
			}
			for _, loc := range w.paramLocs[int32(v.param)] {
				if f, ok := w.keyUses[loc]; !ok || f == "" || f != fam {
					return false
				}
			}
		}
		return true
	}
	t := a.table
	for j, vs := range a.pk {
		if c, ok := t.Column(t.PK[j]); vs != nil && (!ok || !sameUse(vs, c.Type)) {
			a.pk[j] = nil
		}
	}
	if a.granule != nil {
		if c, ok := t.Column(t.Granule); !ok || !sameUse(a.granule, c.Type) {
			a.granule = nil
		}
	}
}

func sortedNames(m map[catalog.Name]bool) []catalog.Name {
	if len(m) == 0 {
		return nil
	}
	out := make([]catalog.Name, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Schema != out[j].Schema {
			return out[i].Schema < out[j].Schema
		}
		return out[i].Name < out[j].Name
	})
	return out
}

var _ = txn.TableKey
