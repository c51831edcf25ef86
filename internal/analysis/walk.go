package analysis

import (
	"strconv"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/ordo-db/ordo/internal/catalog"
)

// walker fills one Statement from one parse tree.
type walker struct {
	cat *catalog.Catalog
	sp  []string
	st  *Statement

	reads, writes, locks map[catalog.Name]bool
	unknown              map[string]bool
	unknownRels          map[catalog.Name]bool // relations among unknown, as written
	dml                  bool                  // INSERT/UPDATE/DELETE/MERGE anywhere
	locking              bool                  // FOR UPDATE/SHARE anywhere
	opaque               string
	readsAll             string // reason, "" if none
	setval               bool   // calls pg_catalog.setval
	setsOrdoConfig       bool   // calls set_config on an ordo. setting, default_transaction_isolation, or one it cannot name
	setsSearchPath       bool   // calls set_config on search_path, role, session_authorization, or one it cannot name
	writing              byte   // relation: what writes the target: 'i' INSERT, 'u' UPDATE, 'd' DELETE, 'm' MERGE or INSERT … ON CONFLICT DO UPDATE (runsCode)
	// largeObjects: calls a function on large objects;
	// largeObjectWrites: one that changes one.
	largeObjects, largeObjectWrites bool
	refused                         string // why the statement cannot be replicated, "" if it can
	// paramLocs holds where each $n occurs in the statement, keyUses the
	// type family of the key column each occurrence that is a key value
	// is compared with ("" if not a table's column): see dropSharedParams.
	paramLocs map[int32][]int32
	keyUses   map[int32]string
}

// countParams notes where each $n occurs in m.
func countParams(m protoreflect.Message, locs map[int32][]int32) {
	if p, ok := m.Interface().(*pg.ParamRef); ok {
		locs[p.Number] = append(locs[p.Number], p.Location)
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap() || fd.Message() == nil:
		case fd.IsList():
			for l, i := v.List(), 0; i < l.Len(); i++ {
				countParams(l.Get(i).Message(), locs)
			}
		default:
			countParams(v.Message(), locs)
		}
		return true
	})
}

// largeObjectFunctions are pg_catalog's functions on large objects, true
// for those that change one. Logical decoding does not carry large
// objects: the session replicates the state its transaction left them in
// (Statement.LargeObjects).
var largeObjectFunctions = map[string]bool{
	"lo_create": true, "lo_creat": true, "lo_import": true, "lo_from_bytea": true, "lo_put": true,
	"lowrite": true, "lo_unlink": true, "lo_truncate": true, "lo_truncate64": true,
	"lo_open": false, "lo_close": false, "loread": false, "lo_get": false, "lo_export": false,
	"lo_lseek": false, "lo_lseek64": false, "lo_tell": false, "lo_tell64": false,
}

// relRef is one item of a FROM list (or a DML target) visible to column
// references of its scope.
type relRef struct {
	alias string            // the name column references qualify with
	rel   *catalog.Relation // nil for CTEs, subqueries, functions, unknown
	acc   int               // index into Statement.acc, -1 if none
	// inner are the relations a subquery or a join under this alias
	// reads: a locking clause naming the alias locks their rows.
	inner []*catalog.Relation
}

type scope struct {
	parent *scope
	rels   []relRef
	ctes   map[string]bool
}

func (sc *scope) isCTE(name string) bool {
	for s := sc; s != nil; s = s.parent {
		if s.ctes[name] {
			return true
		}
	}
	return false
}

func (w *walker) escalate(reason string) {
	if w.readsAll == "" {
		w.readsAll = reason
	}
}

func (w *walker) markUnknown(name string) {
	if w.unknown == nil {
		w.unknown = make(map[string]bool)
	}
	w.unknown[name] = true
}

func (w *walker) param(n int32) {
	if int(n) > w.st.NumParams {
		w.st.NumParams = int(n)
	}
}

// query walks a statement that produces or changes rows.
func (w *walker) query(n *pg.Node, sc *scope) {
	if n == nil {
		return
	}
	switch x := n.Node.(type) {
	case *pg.Node_SelectStmt:
		w.selectStmt(x.SelectStmt, sc)
	case *pg.Node_InsertStmt:
		w.insertStmt(x.InsertStmt, sc)
	case *pg.Node_UpdateStmt:
		w.updateStmt(x.UpdateStmt, sc)
	case *pg.Node_DeleteStmt:
		w.deleteStmt(x.DeleteStmt, sc)
	case *pg.Node_MergeStmt:
		w.mergeStmt(x.MergeStmt, sc)
	default:
		w.expr(n, sc)
	}
}

// with registers and walks a WITH clause into sc. Non-recursive CTE names
// become visible only after their own body, as in PostgreSQL, so a CTE that
// shadows a table name never hides a read of the table before it.
func (w *walker) with(wc *pg.WithClause, sc *scope) {
	if wc == nil {
		return
	}
	if sc.ctes == nil {
		sc.ctes = make(map[string]bool)
	}
	if wc.Recursive {
		for _, c := range wc.Ctes {
			if cte := c.GetCommonTableExpr(); cte != nil {
				sc.ctes[cte.Ctename] = true
			}
		}
	}
	for _, c := range wc.Ctes {
		cte := c.GetCommonTableExpr()
		if cte == nil {
			w.expr(c, sc)
			continue
		}
		inner := &scope{parent: sc}
		w.query(cte.Ctequery, inner)
		sc.ctes[cte.Ctename] = true
	}
}

// relation resolves a RangeVar of a FROM list or DML target and records
// the table accesses it implies. role: read and/or write.
func (w *walker) relation(rv *pg.RangeVar, sc *scope, read, write bool) relRef {
	ref := relRef{alias: rv.Relname, acc: -1}
	if rv.Alias != nil && rv.Alias.Aliasname != "" {
		ref.alias = rv.Alias.Aliasname
	}
	if rv.Schemaname == "" && rv.Catalogname == "" && sc != nil && sc.isCTE(rv.Relname) {
		return ref
	}
	rel, ok := w.cat.Resolve(w.sp, rv.Schemaname, rv.Relname)
	if !ok {
		name := rv.Relname
		if rv.Schemaname != "" {
			name = rv.Schemaname + "." + name
		}
		w.markUnknown(name)
		if w.unknownRels == nil {
			w.unknownRels = make(map[catalog.Name]bool)
		}
		w.unknownRels[catalog.Name{Schema: rv.Schemaname, Name: rv.Relname}] = true
		if read {
			w.escalate("unknown relation " + name)
		}
		if write {
			w.st.WritesAll = true
			w.writes[catalog.Name{Schema: rv.Schemaname, Name: rv.Relname}] = true
		}
		return ref
	}
	ref.rel = rel
	if rel.Kind == catalog.KindView {
		if rel.Opaque && read {
			w.escalate("view " + rel.Name.String() + " calls functions that may read anything")
		}
		if rel.MayWrite && read && w.opaque == "" {
			// As a call of the function would be (read, it wrote on
			// this node alone).
			w.opaque = "reads view " + rel.Name.String() + ", which calls a volatile function that may write"
		}
		if rel.Opaque && write {
			w.st.WritesAll = true
		}
		if write {
			w.writeCode(rel) // its own defaults, INSTEAD OF triggers, rules
		}
		for _, b := range rel.Bases {
			bt, _ := w.cat.Lookup(b)
			if write && bt != nil {
				w.writeCode(bt)
			}
			w.st.acc = append(w.st.acc, access{table: bt, read: read, write: write, tableOnly: true})
			if read {
				w.reads[b] = true
			}
			if write {
				w.writes[b] = true
			}
		}
		return ref
	}
	if rel.PolicyReads {
		// Row security adds its policies' conditions to a read, and
		// checks a written row with them: they read other tables or
		// call functions.
		w.escalate("table " + rel.Name.String() + " has row security policies that read other tables or call functions")
	}
	if rel.PolicyWrites && w.opaque == "" {
		// Read or written, its policies run (a read was taken for one
		// that writes nothing, and its writes committed on the node
		// alone).
		w.opaque = "table " + rel.Name.String() + " has row security policies that call a volatile function, which may write"
	}
	if write {
		w.writeCode(rel)
	}
	ref.acc = len(w.st.acc)
	a := access{table: rel, read: read, write: write}
	if len(rel.PK) > 0 {
		a.pk = make([][]val, len(rel.PK))
	}
	w.st.acc = append(w.st.acc, a)
	if read {
		w.reads[rel.Name] = true
	}
	if write {
		w.writes[rel.Name] = true
	}
	return ref
}

// fromItem adds one FROM item to sc; inner-join conditions are appended to
// quals (they restrict rows like WHERE does), all other expressions to later
// (walked once the whole FROM list is in scope).
func (w *walker) fromItem(n *pg.Node, sc *scope, quals, later *[]*pg.Node) {
	if n == nil {
		return
	}
	switch x := n.Node.(type) {
	case *pg.Node_RangeVar:
		sc.rels = append(sc.rels, w.relation(x.RangeVar, sc, true, false))
	case *pg.Node_JoinExpr:
		j := x.JoinExpr
		first := len(w.st.acc)
		w.fromItem(j.Larg, sc, quals, later)
		w.fromItem(j.Rarg, sc, quals, later)
		if j.Quals != nil {
			if j.Jointype == pg.JoinType_JOIN_INNER {
				*quals = append(*quals, j.Quals)
			} else {
				*later = append(*later, j.Quals)
			}
		}
		if j.Alias != nil {
			// Columns are then referenced through the join alias, which
			// resolves to nothing: no predicate refines these tables.
			sc.rels = append(sc.rels, relRef{alias: j.Alias.Aliasname, acc: -1, inner: w.accessedSince(first)})
		}
	case *pg.Node_RangeSubselect:
		first := len(w.st.acc)
		w.query(x.RangeSubselect.Subquery, &scope{parent: sc})
		sc.rels = append(sc.rels, relRef{alias: aliasName(x.RangeSubselect.Alias), acc: -1, inner: w.accessedSince(first)})
	case *pg.Node_RangeFunction:
		for _, f := range x.RangeFunction.Functions {
			w.expr(f, sc)
		}
		w.exprs(x.RangeFunction.Coldeflist, sc) // AS x(a capped): its types
		sc.rels = append(sc.rels, relRef{alias: aliasName(x.RangeFunction.Alias), acc: -1})
	case *pg.Node_RangeTableSample:
		w.fromItem(x.RangeTableSample.Relation, sc, quals, later)
		for _, a := range x.RangeTableSample.Args {
			w.expr(a, sc)
		}
		w.expr(x.RangeTableSample.Repeatable, sc)
	default:
		// XMLTABLE, JSON_TABLE …: walk everything, and let the item hide
		// unqualified columns (its column set is unknown).
		w.expr(n, sc)
		sc.rels = append(sc.rels, relRef{acc: -1})
	}
}

func aliasName(a *pg.Alias) string {
	if a == nil {
		return ""
	}
	return a.Aliasname
}

func (w *walker) selectStmt(s *pg.SelectStmt, parent *scope) {
	if s == nil {
		return
	}
	sc := &scope{parent: parent}
	w.with(s.WithClause, sc)
	if s.Op != pg.SetOperation_SETOP_NONE && s.Op != pg.SetOperation_SET_OPERATION_UNDEFINED {
		w.selectStmt(s.Larg, sc)
		w.selectStmt(s.Rarg, sc)
		w.exprs(s.SortClause, sc)
		w.expr(s.LimitCount, sc)
		w.expr(s.LimitOffset, sc)
		w.lockingClause(s.LockingClause, sc)
		return
	}
	var quals, later []*pg.Node
	for _, f := range s.FromClause {
		w.fromItem(f, sc, &quals, &later)
	}
	if s.WhereClause != nil {
		quals = append(quals, s.WhereClause)
	}
	w.applyFixes(sc, quals)
	w.exprs(quals, sc)
	w.exprs(later, sc)
	w.exprs(s.TargetList, sc)
	w.exprs(s.DistinctClause, sc)
	w.exprs(s.GroupClause, sc)
	w.expr(s.HavingClause, sc)
	w.exprs(s.WindowClause, sc)
	w.exprs(s.ValuesLists, sc)
	w.exprs(s.SortClause, sc)
	w.expr(s.LimitCount, sc)
	w.expr(s.LimitOffset, sc)
	w.lockingClause(s.LockingClause, sc)
}

// lockingClause records SELECT … FOR UPDATE/SHARE: the named relations, or
// every table of the FROM list.
func (w *walker) lockingClause(lcs []*pg.Node, sc *scope) {
	for _, n := range lcs {
		lc := n.GetLockingClause()
		if lc == nil {
			continue
		}
		w.locking = true
		if len(lc.LockedRels) == 0 {
			for _, r := range sc.rels {
				w.lockRef(r)
			}
			continue
		}
		for _, ln := range lc.LockedRels {
			rv := ln.GetRangeVar()
			if rv == nil {
				continue
			}
			for _, r := range sc.rels {
				if r.alias == rv.Relname {
					w.lockRef(r)
				}
			}
		}
	}
}

// accessedSince returns the relations of the accesses recorded since
// the first-th.
func (w *walker) accessedSince(first int) []*catalog.Relation {
	var out []*catalog.Relation
	for _, a := range w.st.acc[first:] {
		out = append(out, a.table)
	}
	return out
}

func (w *walker) lockRef(r relRef) {
	if r.rel == nil {
		// A subquery's or a join's: PostgreSQL locks the rows of every
		// table it reads (not a WITH query's, which takes a clause of
		// its own).
		for _, t := range r.inner {
			w.lockRef(relRef{rel: t})
		}
		return
	}
	if r.rel.Kind == catalog.KindView {
		for _, b := range r.rel.Bases {
			w.locks[b] = true
		}
		return
	}
	w.locks[r.rel.Name] = true
}

func (w *walker) insertStmt(s *pg.InsertStmt, parent *scope) {
	w.dml = true
	sc := &scope{parent: parent}
	w.with(s.WithClause, sc)
	conflict := s.OnConflictClause != nil
	w.writing = 'i'
	if conflict && s.OnConflictClause.Action == pg.OnConflictAction_ONCONFLICT_UPDATE {
		w.writing = 'm'
	}
	target := w.relation(s.Relation, sc, conflict, true)
	w.writing = 0
	// Predict the written rows from VALUES lists.
	if sel := s.SelectStmt.GetSelectStmt(); sel != nil && len(sel.ValuesLists) > 0 && sel.WithClause == nil && target.acc >= 0 {
		w.insertValues(&w.st.acc[target.acc], s.Cols, sel.ValuesLists)
	} else if sel != nil && target.acc >= 0 && sel.Op == pg.SetOperation_SETOP_NONE {
		// INSERT … SELECT $1, $2 WHERE NOT EXISTS (… WHERE id = $1): a $n
		// the SELECT's list gives a column takes the column's type.
		t := w.st.acc[target.acc].table
		targets := sel.TargetList
		for _, rt := range targets {
			if cr := rt.GetResTarget().GetVal().GetColumnRef(); cr != nil && len(cr.Fields) > 0 && cr.Fields[len(cr.Fields)-1].GetAStar() != nil {
				targets = nil // a * makes the positions unknown
			}
		}
		for i, rt := range targets {
			name := ""
			if len(s.Cols) > 0 {
				if i < len(s.Cols) {
					name = s.Cols[i].GetResTarget().GetName()
				}
			} else if i < len(t.Columns) {
				name = t.Columns[i].Name
			}
			if c, ok := t.Column(name); ok && name != "" {
				w.keyUse(rt.GetResTarget().GetVal(), c.Type)
			}
		}
	}
	if conflict && target.acc >= 0 && !inferIsPK(s.OnConflictClause.Infer, target.rel) {
		w.st.acc[target.acc].readTable = true
	}
	w.query(s.SelectStmt, sc)
	tsc := &scope{parent: sc, rels: []relRef{target, {alias: "excluded", acc: -1}}}
	if oc := s.OnConflictClause; oc != nil {
		if oc.Infer != nil {
			w.exprs(oc.Infer.IndexElems, tsc)
			w.expr(oc.Infer.WhereClause, tsc)
		}
		w.exprs(oc.TargetList, tsc)
		w.expr(oc.WhereClause, tsc)
	}
	w.exprs(s.ReturningList, tsc)
}

// inferIsPK reports whether an ON CONFLICT arbiter is exactly the primary
// key columns (then the conflicting row is the one with the inserted key).
func inferIsPK(ic *pg.InferClause, rel *catalog.Relation) bool {
	if ic == nil || ic.Conname != "" || ic.WhereClause != nil || rel == nil || len(rel.PK) == 0 || len(ic.IndexElems) != len(rel.PK) {
		return false
	}
	want := make(map[string]bool, len(rel.PK))
	for _, c := range rel.PK {
		want[c] = true
	}
	for _, e := range ic.IndexElems {
		ie := e.GetIndexElem()
		if ie == nil || ie.Name == "" || !want[ie.Name] {
			return false
		}
		delete(want, ie.Name)
	}
	return len(want) == 0
}

// insertValues fixes the primary key and granule of an INSERT target from
// its VALUES rows (constants and parameters only).
func (w *walker) insertValues(a *access, cols []*pg.Node, rows []*pg.Node) {
	t := a.table
	names := make([]string, 0, len(t.Columns))
	if len(cols) == 0 {
		for _, c := range t.Columns {
			names = append(names, c.Name)
		}
	} else {
		for _, c := range cols {
			names = append(names, c.GetResTarget().GetName())
		}
	}
	fixCol := func(col string) []val {
		pos := -1
		for i, n := range names {
			if n == col {
				pos = i
			}
		}
		if pos < 0 {
			return nil
		}
		var out []val
		for _, r := range rows {
			items := r.GetList().GetItems()
			if pos >= len(items) {
				return nil
			}
			v, ok := value(items[pos])
			if !ok || v.kind == vParamArray {
				return nil
			}
			c, ok := t.Column(col)
			if !ok {
				return nil
			}
			if (c.Type == "text" || c.Type == "varchar") && items[pos].GetAConst().GetFval() != nil {
				return nil // 1e3 is stored as '1000'
			}
			w.keyUse(items[pos], c.Type)
			out = append(out, v)
		}
		return out
	}
	for i, c := range t.PK {
		a.pk[i] = fixCol(c)
	}
	if t.Granule != "" {
		a.granule = fixCol(t.Granule)
	}
}

func (w *walker) updateStmt(s *pg.UpdateStmt, parent *scope) {
	if r := s.Relation; r != nil && r.Relname == "pg_settings" && (r.Schemaname == "" || r.Schemaname == "pg_catalog") {
		// pg_settings' rule runs set_config for each row it updates: any
		// setting, search_path and Ordo's own among them. (A table of
		// that name of the user's is taken for it: a re-read too many.)
		w.setsSearchPath, w.setsOrdoConfig = true, true
	}
	sc := w.changeRows(s.WithClause, s.Relation, s.FromClause, s.WhereClause, parent, 'u')
	w.exprs(s.TargetList, sc)
	w.exprs(s.ReturningList, sc)
}

// writeCode notes what a write of table rel (w.writing) makes PostgreSQL
// run unseen: its triggers and rules (or, through partitions, children
// and foreign keys' actions, other tables'), whose reads and writes are
// unknown (decoding still captures the writes); a default, a check or a
// domain's check calling a user function that may read data.
func (w *walker) writeCode(rel *catalog.Relation) {
	kind := "table "
	if rel.Kind == catalog.KindView {
		kind = "view "
	}
	switch {
	case rel.WriteCode && w.writing != 'd':
		w.escalate(kind + rel.Name.String() + " has a default or check that calls a function which may read any table")
	case rel.DeleteCode && (w.writing == 'd' || w.writing == 'm'):
		w.escalate("a foreign key's action on deleting from " + rel.Name.String() + " runs a default or check that calls a function which may read any table")
	}
	if rel.Triggers || rel.CascadeTriggers && w.writing != 'i' {
		if rel.Triggers {
			w.escalate(kind + rel.Name.String() + " has triggers or rules")
		} else {
			w.escalate("a foreign key's action on changing " + rel.Name.String() + " fires triggers")
		}
		w.st.WritesAll = true
		if rel.TriggersChangeNames {
			w.setsSearchPath = true
		}
	}
}

func (w *walker) deleteStmt(s *pg.DeleteStmt, parent *scope) {
	sc := w.changeRows(s.WithClause, s.Relation, s.UsingClause, s.WhereClause, parent, 'd')
	w.exprs(s.ReturningList, sc)
}

// changeRows walks what UPDATE and DELETE share: the WITH clause, the
// target (read and written), the FROM/USING items and the WHERE clause,
// whose equalities fix the target's keys. It returns the statement's scope.
func (w *walker) changeRows(with *pg.WithClause, target *pg.RangeVar, from []*pg.Node, where *pg.Node, parent *scope, writing byte) *scope {
	w.dml = true
	sc := &scope{parent: parent}
	w.with(with, sc)
	w.writing = writing
	sc.rels = append(sc.rels, w.relation(target, sc, true, true))
	w.writing = 0
	var quals, later []*pg.Node
	for _, f := range from {
		w.fromItem(f, sc, &quals, &later)
	}
	if where != nil {
		quals = append(quals, where)
	}
	w.applyFixes(sc, quals)
	w.exprs(quals, sc)
	w.exprs(later, sc)
	return sc
}

func (w *walker) mergeStmt(s *pg.MergeStmt, parent *scope) {
	w.dml = true
	sc := &scope{parent: parent}
	w.with(s.WithClause, sc)
	w.writing = 'm'
	target := w.relation(s.Relation, sc, true, true)
	w.writing = 0
	if target.acc >= 0 {
		w.st.acc[target.acc].tableOnly = true
	}
	sc.rels = append(sc.rels, target)
	var quals, later []*pg.Node
	w.fromItem(s.SourceRelation, sc, &quals, &later)
	w.exprs(quals, sc)
	w.exprs(later, sc)
	w.expr(s.JoinCondition, sc)
	w.exprs(s.MergeWhenClauses, sc)
	w.exprs(s.ReturningList, sc)
}

// funcCall checks a function the statement calls.
// funcName is a call's function name: its schema ("" unqualified), its
// name ("?" for a name the analyzer does not read) and both as written.
func funcName(fc *pg.FuncCall) (schema, name, full string) {
	switch len(fc.Funcname) {
	case 1:
		name = fc.Funcname[0].GetString_().GetSval()
	case 2:
		schema = fc.Funcname[0].GetString_().GetSval()
		name = fc.Funcname[1].GetString_().GetSval()
	default:
		name = "?"
	}
	full = name
	if schema != "" {
		full = schema + "." + name
	}
	return schema, name, full
}

// qualified returns the schema ("" if none) and name of a parse tree's
// qualified name (its last two parts).
func qualified(names []*pg.Node) (schema, name string) {
	name = names[len(names)-1].GetString_().GetSval()
	if len(names) > 1 {
		schema = names[len(names)-2].GetString_().GetSval()
	}
	return schema, name
}

// castTo notes a cast to t: to a domain whose check calls a user
// function that may read data (catalog.ReadingType), or a composite type
// holding one, it reads anything.
func (w *walker) castTo(t *pg.TypeName) {
	if t == nil || len(t.Names) == 0 {
		return
	}
	schema, name := qualified(t.Names)
	if w.cat.ReadingType(w.sp, schema, name) {
		w.escalate("casts to " + name + ", whose check calls a function which may read any table")
	}
}

// operator notes the use of an operator (its name as the parse tree
// holds it: the symbol, after its schema if qualified) whose function may
// read data (catalog.Operator); every other operator reads nothing, as
// the built-in ones. The catalog holds none named like a built-in one,
// so the operators PostgreSQL applies unnamed (the = of IN (SELECT …), of
// CASE x WHEN, of JOIN … USING; BETWEEN's) are never such.
func (w *walker) operator(names []*pg.Node) {
	if len(names) == 0 {
		return
	}
	schema, symbol := qualified(names)
	f, ok := w.cat.Operator(w.sp, schema, symbol)
	if !ok || !f.ReadsData {
		return
	}
	if f.ChangesNames {
		w.setsSearchPath = true
	}
	w.escalate("uses operator " + f.Name.String() + ", whose function may read any table")
	if f.Volatility == catalog.Volatile && w.opaque == "" {
		w.opaque = "uses operator " + f.Name.String() + ", whose volatile function may write"
	}
}

func (w *walker) funcCall(fc *pg.FuncCall, sc *scope) {
	schema, name, full := funcName(fc)
	f, ok := w.cat.Func(w.sp, schema, name)
	if ok && f.ChangesNames {
		// Its body may set search_path or the role for the session.
		w.setsSearchPath = true
	}
	if ok && f.Name.Schema == "pg_catalog" && f.Name.Name == "setval" {
		w.setval = true
	}
	if ok && f.Name.Schema == "pg_catalog" && f.Name.Name == "set_config" {
		// Which setting it sets is read from the text: a template of
		// another setting's call must not stand for it.
		if c := settingNameConst(fc); c != nil {
			w.st.pinned = append(w.st.pinned, c.Location)
		}
		w.setsOrdoConfig = w.setsOrdoConfig || setsOrdoConfig(fc)
		w.setsSearchPath = w.setsSearchPath || setsSearchPath(fc)
	}
	loWrites, lo := largeObjectFunctions[name]
	lo = lo && (schema == "" || schema == "pg_catalog") // pg_catalog's, even where the catalog was not loaded
	if ok {
		loWrites, lo = largeObjectFunctions[f.Name.Name]
		lo = lo && f.Name.Schema == "pg_catalog"
	}
	if lo {
		w.largeObjects = true
		w.largeObjectWrites = w.largeObjectWrites || loWrites
		ok, f = true, &catalog.Function{Name: catalog.Name{Schema: "pg_catalog", Name: name}, Volatility: catalog.Volatile}
	}
	switch {
	case !ok:
		w.setsSearchPath = true // as one whose body may (created since the catalog was read)
		w.markUnknown(full + "()")
		w.escalate("unknown function " + full)
		if w.opaque == "" {
			w.opaque = "calls unknown function " + full + ", which may write"
		}
	case f.ReadsData:
		w.escalate("calls " + f.Name.String() + ", which may read any table")
		if f.Volatility == catalog.Volatile && w.opaque == "" {
			w.opaque = "calls volatile function " + f.Name.String() + ", which may write"
		}
	}
	w.exprs(fc.Args, sc)
	w.exprs(fc.AggOrder, sc)
	w.expr(fc.AggFilter, sc)
	if fc.Over != nil {
		w.msg(fc.Over, sc)
	}
}

// setsOrdoConfig reports whether a call of set_config may set one of
// Ordo's settings: its first argument names one ("ordo.…", any case), or
// is not a string constant.
func setsOrdoConfig(fc *pg.FuncCall) bool {
	name, known := setConfigName(fc)
	return !known || strings.HasPrefix(name, "ordo.") || name == "default_transaction_isolation"
}

// setsSearchPath reports whether a call of set_config may change how
// names resolve: its first argument names search_path, role or
// session_authorization (which "$user" in the path follows), or is not a
// string constant.
func setsSearchPath(fc *pg.FuncCall) bool {
	switch name, known := setConfigName(fc); {
	case !known:
		return true
	default:
		return name == "search_path" || name == "role" || name == "session_authorization"
	}
}

// setConfigName returns the setting a call of set_config sets, lowercased
// ("" for a call without arguments); known false if its first argument is
// not a string constant.
func setConfigName(fc *pg.FuncCall) (string, bool) {
	if len(fc.Args) == 0 {
		return "", true
	}
	c := settingNameConst(fc)
	if c == nil {
		return "", false
	}
	return strings.ToLower(strings.TrimSpace(c.GetSval().GetSval())), true
}

// settingNameConst returns set_config's first argument if it is a string
// constant (cast or not), else nil.
func settingNameConst(fc *pg.FuncCall) *pg.A_Const {
	if len(fc.Args) == 0 {
		return nil
	}
	a := fc.Args[0]
	if tc := a.GetTypeCast(); tc != nil {
		a = tc.Arg
	}
	if c := a.GetAConst(); c != nil && c.GetSval() != nil {
		return c
	}
	return nil
}

func (w *walker) exprs(ns []*pg.Node, sc *scope) {
	for _, n := range ns {
		w.expr(n, sc)
	}
}

// expr walks any node for what matters inside expressions: subqueries,
// function calls, parameters and stray relations. Unknown node types are
// walked generically, so nothing is ever skipped.
func (w *walker) expr(n *pg.Node, sc *scope) {
	if n == nil {
		return
	}
	switch x := n.Node.(type) {
	case nil:
	case *pg.Node_ColumnRef, *pg.Node_AConst, *pg.Node_String_, *pg.Node_Integer, *pg.Node_Float, *pg.Node_Boolean, *pg.Node_AStar, *pg.Node_SqlvalueFunction:
	case *pg.Node_ParamRef:
		w.param(x.ParamRef.Number)
	case *pg.Node_SelectStmt, *pg.Node_InsertStmt, *pg.Node_UpdateStmt, *pg.Node_DeleteStmt, *pg.Node_MergeStmt:
		w.query(n, sc)
	case *pg.Node_SubLink:
		w.operator(x.SubLink.OperName)
		w.expr(x.SubLink.Testexpr, sc)
		w.query(x.SubLink.Subselect, sc)
	case *pg.Node_FuncCall:
		w.funcCall(x.FuncCall, sc)
	case *pg.Node_RangeVar:
		w.relation(x.RangeVar, sc, true, false)
	case *pg.Node_AExpr:
		w.operator(x.AExpr.Name)
		w.expr(x.AExpr.Lexpr, sc)
		w.expr(x.AExpr.Rexpr, sc)
	case *pg.Node_BoolExpr:
		w.exprs(x.BoolExpr.Args, sc)
	case *pg.Node_TypeCast:
		w.castTo(x.TypeCast.TypeName)
		w.expr(x.TypeCast.Arg, sc)
	case *pg.Node_ResTarget:
		w.expr(x.ResTarget.Val, sc)
		w.exprs(x.ResTarget.Indirection, sc)
	case *pg.Node_List:
		w.exprs(x.List.Items, sc)
	case *pg.Node_SortBy:
		w.operator(x.SortBy.UseOp)
		w.expr(x.SortBy.Node, sc)
	default:
		w.generic(n.ProtoReflect(), sc)
	}
}

// msg dispatches a message found by the generic walk.
func (w *walker) msg(m proto.Message, sc *scope) {
	switch x := m.(type) {
	case *pg.Node:
		w.expr(x, sc)
	case *pg.SelectStmt:
		w.selectStmt(x, sc)
	case *pg.RangeVar:
		w.relation(x, sc, true, false)
	case *pg.FuncCall:
		w.funcCall(x, sc)
	case *pg.ParamRef:
		w.param(x.Number)
	case *pg.TypeName:
		// A type a value is converted to outside a cast: JSON's
		// RETURNING, XMLTABLE's columns (a cast's own is castTo's).
		w.castTo(x)
	case *pg.WithClause:
		w.with(x, sc)
	default:
		w.generic(m.ProtoReflect(), sc)
	}
}

func (w *walker) generic(m protoreflect.Message, sc *scope) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Kind() != protoreflect.MessageKind {
			return true
		}
		if fd.IsList() {
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				w.msg(l.Get(i).Message().Interface(), sc)
			}
			return true
		}
		if fd.IsMap() {
			return true
		}
		w.msg(v.Message().Interface(), sc)
		return true
	})
}

// value returns the value a node fixes a column to: a literal, a
// parameter, or either under a cast (the cast is checked against the
// column type later).
func value(n *pg.Node) (val, bool) {
	if n == nil {
		return val{}, false
	}
	switch x := n.Node.(type) {
	case *pg.Node_AConst:
		c := x.AConst
		if c.Isnull {
			return val{}, false
		}
		switch v := c.Val.(type) {
		case *pg.A_Const_Ival:
			return val{kind: vConst, text: strconv.FormatInt(int64(v.Ival.Ival), 10), loc: c.Location}, true
		case *pg.A_Const_Fval:
			return val{kind: vConst, text: v.Fval.Fval, loc: c.Location}, true
		case *pg.A_Const_Sval:
			return val{kind: vConst, text: v.Sval.Sval, loc: c.Location}, true
		case *pg.A_Const_Boolval:
			if v.Boolval.Boolval {
				return val{kind: vConst, text: "true", loc: c.Location}, true
			}
			return val{kind: vConst, text: "false", loc: c.Location}, true
		}
	case *pg.Node_ParamRef:
		return val{kind: vParam, param: int(x.ParamRef.Number), loc: -1}, true
	}
	return val{}, false
}

// castType returns the base type name of a cast and whether it is an
// array type.
func castType(tn *pg.TypeName) (string, bool) {
	if tn == nil || len(tn.Names) == 0 || len(tn.Typmods) > 0 || tn.PctType || tn.Setof {
		return "", false
	}
	name := tn.Names[len(tn.Names)-1].GetString_().GetSval()
	if len(tn.Names) == 2 && tn.Names[0].GetString_().GetSval() != "pg_catalog" {
		return "", false
	}
	if len(tn.Names) > 2 {
		return "", false
	}
	switch strings.ToLower(name) {
	case "int", "integer":
		name = "int4"
	case "smallint":
		name = "int2"
	case "bigint":
		name = "int8"
	case "boolean":
		name = "bool"
	case "character varying":
		name = "varchar"
	}
	return name, len(tn.ArrayBounds) > 0
}
