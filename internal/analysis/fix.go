package analysis

import (
	pg "github.com/pganalyze/pg_query_go/v6"
)

// colVal is a value list for one column, with the cast applied to the
// values (if any) so it can be checked against the column type.
type colVal struct {
	vals []val
	cast string // "" when no cast
}

// fixes maps a relation (index into its scope's rels) to the columns the
// predicate fixes and their possible values: every row of that relation
// the statement depends on has one of these values in that column.
type fixes map[int]map[string]colVal

// and combines the fixes of two conjuncts: a column fixed by either is
// fixed (keep the shorter list: both are supersets of the truth). A lower
// bound alone and an upper bound alone of one column ("col >= lo", "col <
// hi") make a range of it; a bound alone fixes nothing by itself (values
// refuses it), so a list or a range of the column wins over one.
func and(a, b fixes) fixes {
	if a == nil {
		return b
	}
	for rel, cols := range b {
		ac := a[rel]
		if ac == nil {
			a[rel] = cols
			continue
		}
		for c, v := range cols {
			old, ok := ac[c]
			switch ob, vb := old.bound(), v.bound(); {
			case !ok:
				ac[c] = v
			case ob != 0 && vb != 0:
				if ob.lower() && !vb.lower() && old.cast == v.cast {
					ac[c] = colVal{vals: []val{old.vals[0], v.vals[0]}, cast: v.cast}
				} else if !ob.lower() && vb.lower() && old.cast == v.cast {
					ac[c] = colVal{vals: []val{v.vals[0], old.vals[0]}, cast: v.cast}
				} // (two bounds on one side: either is a superset)
			case ob != 0:
				ac[c] = v
			case vb != 0:
			case len(v.vals) < len(old.vals):
				ac[c] = v
			}
		}
	}
	return a
}

// bound returns the kind of the bound cv is if it is one bound alone of a
// range ("col >= lo"), 0 otherwise.
func (cv colVal) bound() rangeBound {
	if len(cv.vals) == 1 {
		return cv.vals[0].rng
	}
	return 0
}

// or combines the fixes of two disjuncts: only columns fixed in both stay
// fixed, with the union of their values (a superset of the truth: the
// correlation between columns is dropped). A value list is made of single
// values and ranges (a lower bound followed by its upper bound); a bound
// alone is never part of a longer list.
func or(a, b fixes) fixes {
	out := fixes{}
	for rel, acols := range a {
		bcols := b[rel]
		if bcols == nil {
			continue
		}
		for c, av := range acols {
			bv, ok := bcols[c]
			if !ok || av.cast != bv.cast || av.bound() != 0 || bv.bound() != 0 {
				// (A bound alone beside another's would read as a
				// range: "id >= 2 OR id <= 5" is every id, not 2..5.)
				continue
			}
			if out[rel] == nil {
				out[rel] = make(map[string]colVal)
			}
			vals := make([]val, 0, len(av.vals)+len(bv.vals))
			vals = append(append(vals, av.vals...), bv.vals...)
			out[rel][c] = colVal{vals: vals, cast: av.cast}
		}
	}
	return out
}

// cond returns what predicate n, when true, fixes about the relations of
// sc. Anything it does not understand fixes nothing, which is safe.
func (w *walker) cond(n *pg.Node, sc *scope) fixes {
	if n == nil {
		return nil
	}
	switch x := n.Node.(type) {
	case *pg.Node_BoolExpr:
		b := x.BoolExpr
		switch b.Boolop {
		case pg.BoolExprType_AND_EXPR:
			var f fixes
			for _, a := range b.Args {
				f = and(f, w.cond(a, sc))
			}
			return f
		case pg.BoolExprType_OR_EXPR:
			if len(b.Args) == 0 {
				return nil
			}
			f := w.cond(b.Args[0], sc)
			for _, a := range b.Args[1:] {
				if len(f) == 0 {
					return nil
				}
				f = or(f, w.cond(a, sc))
			}
			return f
		}
	case *pg.Node_AExpr:
		e := x.AExpr
		if e.Kind == pg.A_Expr_Kind_AEXPR_BETWEEN {
			return w.between(e, sc)
		}
		if e.Kind == pg.A_Expr_Kind_AEXPR_OP && len(e.Name) == 1 {
			if b, ok := comparisons[e.Name[0].GetString_().GetSval()]; ok {
				return w.compare(e, b, sc)
			}
		}
		if len(e.Name) != 1 || e.Name[0].GetString_().GetSval() != "=" {
			return nil
		}
		switch e.Kind {
		case pg.A_Expr_Kind_AEXPR_OP:
			if lr, rr := e.Lexpr.GetRowExpr(), e.Rexpr.GetRowExpr(); lr != nil && rr != nil {
				return w.rowEq(lr.Args, rr.Args, sc)
			}
			if f := w.eq(e.Lexpr, e.Rexpr, sc); f != nil {
				return f
			}
			return w.eq(e.Rexpr, e.Lexpr, sc)
		case pg.A_Expr_Kind_AEXPR_IN:
			items := e.Rexpr.GetList().GetItems()
			if len(items) == 0 {
				return nil
			}
			if lr := e.Lexpr.GetRowExpr(); lr != nil {
				var f fixes
				for i, it := range items {
					rr := it.GetRowExpr()
					if rr == nil {
						return nil
					}
					g := w.rowEq(lr.Args, rr.Args, sc)
					if i == 0 {
						f = g
					} else {
						f = or(f, g)
					}
				}
				return f
			}
			rel, col, ok := w.column(e.Lexpr, sc)
			if !ok {
				return nil
			}
			cv := colVal{}
			for i, it := range items {
				v, cast, ok := castValue(it)
				if !ok || (i > 0 && cast != cv.cast) {
					return nil
				}
				cv.cast = cast
				cv.vals = append(cv.vals, v)
			}
			w.keyUseList(items, w.columnType(rel, col, sc))
			return fixes{rel: {col: cv}}
		case pg.A_Expr_Kind_AEXPR_OP_ANY:
			rel, col, ok := w.column(e.Lexpr, sc)
			if !ok {
				return nil
			}
			cv, ok := w.arrayValues(e.Rexpr)
			if !ok {
				return nil
			}
			typ := w.columnType(rel, col, sc)
			w.keyUse(e.Rexpr, typ) // = ANY($n)
			if ae := unCast(e.Rexpr).GetAArrayExpr(); ae != nil {
				w.keyUseList(ae.Elements, typ)
			}
			return fixes{rel: {col: cv}}
		}
	}
	return nil
}

func (w *walker) rowEq(l, r []*pg.Node, sc *scope) fixes {
	if len(l) != len(r) {
		return nil
	}
	var f fixes
	for i := range l {
		g := w.eq(l[i], r[i], sc)
		if g == nil {
			g = w.eq(r[i], l[i], sc)
		}
		f = and(f, g)
	}
	return f
}

// eq handles "column = value".
func (w *walker) eq(colNode, valNode *pg.Node, sc *scope) fixes {
	return w.one(colNode, valNode, 0, sc)
}

// one is the fix of a column to one value, or to one bound b of a range.
func (w *walker) one(colNode, valNode *pg.Node, b rangeBound, sc *scope) fixes {
	rel, col, ok := w.column(colNode, sc)
	if !ok {
		return nil
	}
	v, cast, ok := castValue(valNode)
	if !ok || v.kind == vParamArray {
		return nil
	}
	w.keyUse(valNode, w.columnType(rel, col, sc))
	v.rng = b
	return fixes{rel: {col: {vals: []val{v}, cast: cast}}}
}

// between handles "column BETWEEN lo AND hi" (not NOT BETWEEN, nor
// BETWEEN SYMMETRIC): the column's values are the integers from lo to hi,
// which Bind expands into keys when the column is an integer one and they
// are few enough (values); otherwise the range fixes nothing.
func (w *walker) between(e *pg.A_Expr, sc *scope) fixes {
	rel, col, ok := w.column(e.Lexpr, sc)
	if !ok {
		return nil
	}
	bounds := e.Rexpr.GetList().GetItems()
	if len(bounds) != 2 {
		return nil
	}
	lo, loCast, ok1 := castValue(bounds[0])
	hi, hiCast, ok2 := castValue(bounds[1])
	if !ok1 || !ok2 || loCast != hiCast || lo.kind == vParamArray || hi.kind == vParamArray {
		return nil
	}
	typ := w.columnType(rel, col, sc)
	w.keyUse(bounds[0], typ)
	w.keyUse(bounds[1], typ)
	lo.rng, hi.rng = rangeLo, rangeHi
	return fixes{rel: {col: {vals: []val{lo, hi}, cast: loCast}}}
}

// comparisons are the operators that bound a column's values from one
// side ("col >= value"), with the bound each makes.
var comparisons = map[string]rangeBound{">=": rangeLo, ">": rangeLoExcl, "<=": rangeHi, "<": rangeHiExcl}

// compare handles "column op value" and "value op column" for the
// comparisons: one bound of a range of the column, which fixes something
// only once and combines it with a bound on the other side (and).
func (w *walker) compare(e *pg.A_Expr, b rangeBound, sc *scope) fixes {
	colNode, valNode := e.Lexpr, e.Rexpr
	if _, _, ok := w.column(colNode, sc); !ok {
		colNode, valNode = valNode, colNode
		b = b.flipped() // "5 < id" is "id > 5"
	}
	return w.one(colNode, valNode, b, sc)
}

// keyUse notes that valNode, if it is a $n (under a cast or not), is the
// value of a key column of type typ ("" if unknown) where it occurs; under
// a cast, of the cast's type ($1::float8 is a float8 wherever else $1 is).
func (w *walker) keyUse(valNode *pg.Node, typ string) {
	if tc := valNode.GetTypeCast(); tc != nil {
		typ, _ = castType(tc.TypeName)
	}
	if p := unCast(valNode).GetParamRef(); p != nil {
		if w.keyUses == nil {
			w.keyUses = map[int32]string{}
		}
		w.keyUses[p.Location] = typeFamily(typ)
	}
}

// keyUseList notes the $n items of an IN list or an ARRAY[…] that fixed
// a key column of type typ, once the whole list was taken. PostgreSQL
// gives the items their common type: numeric if one of them is a number
// that is not an integer (an untyped $1 in "id IN ($1, 1.5)" is a
// numeric, and its bytes are a numeric's).
func (w *walker) keyUseList(items []*pg.Node, typ string) {
	for _, it := range items {
		if isDecimalConst(it) {
			typ = "numeric"
		}
	}
	for _, it := range items {
		w.keyUse(it, typ)
	}
}

// isDecimalConst reports whether n is a number constant (with or without
// a minus sign) that is not an int4 literal: a numeric, or an integer
// PostgreSQL types int8 or numeric. (Never by its value: texts that
// differ only in literals share one analysis, template.go.)
func isDecimalConst(n *pg.Node) bool {
	if e := n.GetAExpr(); e != nil && e.Lexpr == nil {
		n = e.Rexpr
	}
	c := n.GetAConst()
	return c != nil && c.GetFval() != nil
}

// unCast returns n without a cast around it.
func unCast(n *pg.Node) *pg.Node {
	if tc := n.GetTypeCast(); tc != nil {
		return tc.Arg
	}
	return n
}

// columnType is the type of column col of relation rel of sc, "" if rel
// is not a table's.
func (w *walker) columnType(rel int, col string, sc *scope) string {
	if rel < 0 || rel >= len(sc.rels) || sc.rels[rel].acc < 0 {
		return ""
	}
	if c, ok := w.st.acc[sc.rels[rel].acc].table.Column(col); ok {
		return c.Type
	}
	return ""
}

// castValue is value, also accepting one cast to a scalar type.
func castValue(n *pg.Node) (val, string, bool) {
	if tc := n.GetTypeCast(); tc != nil {
		t, isArray := castType(tc.TypeName)
		if t == "" || isArray {
			return val{}, "", false
		}
		v, ok := value(tc.Arg)
		return v, t, ok
	}
	if e := n.GetAExpr(); e != nil && e.Lexpr == nil && len(e.Name) == 1 && e.Name[0].GetString_().GetSval() == "-" {
		// Unary minus on a numeric literal.
		v, ok := value(e.Rexpr)
		if ok && v.kind == vConst && e.Rexpr.GetAConst() != nil && e.Rexpr.GetAConst().GetSval() == nil {
			v.text = "-" + v.text
			return v, "", true
		}
		return val{}, "", false
	}
	v, ok := value(n)
	return v, "", ok
}

// arrayValues handles the right side of "column = ANY(…)". An array
// literal decides how many values the column has, or that it has none:
// its location is recorded in Statement.pinned.
func (w *walker) arrayValues(n *pg.Node) (colVal, bool) {
	cast := ""
	if tc := n.GetTypeCast(); tc != nil {
		t, isArray := castType(tc.TypeName)
		if t == "" || !isArray {
			return colVal{}, false
		}
		cast = t
		n = tc.Arg
	}
	if p := n.GetParamRef(); p != nil {
		return colVal{vals: []val{{kind: vParamArray, param: int(p.Number), loc: -1}}, cast: cast}, true
	}
	if c := n.GetAConst(); c != nil && c.GetSval() != nil {
		w.st.pinned = append(w.st.pinned, c.Location)
		elems, ok := TextArray(c.GetSval().Sval)
		if !ok {
			return colVal{}, false
		}
		cv := colVal{cast: cast}
		for _, e := range elems {
			cv.vals = append(cv.vals, val{kind: vConst, text: e, loc: c.Location, elem: true})
		}
		return cv, true
	}
	if ae := n.GetAArrayExpr(); ae != nil && cast == "" {
		cv := colVal{}
		for i, el := range ae.Elements {
			v, c, ok := castValue(el)
			if !ok || (i > 0 && c != cv.cast) {
				return colVal{}, false
			}
			cv.cast = c
			cv.vals = append(cv.vals, v)
		}
		return cv, true
	}
	return colVal{}, false
}

// column resolves a column reference to a relation of sc (not of an outer
// scope) and the column name. It refuses whenever the reference could
// belong to something else.
func (w *walker) column(n *pg.Node, sc *scope) (int, string, bool) {
	cr := n.GetColumnRef()
	if cr == nil {
		return 0, "", false
	}
	var parts []string
	for _, f := range cr.Fields {
		s := f.GetString_()
		if s == nil {
			return 0, "", false
		}
		parts = append(parts, s.Sval)
	}
	switch len(parts) {
	case 1:
		found := -1
		for i, r := range sc.rels {
			if r.rel == nil || len(r.rel.Columns) == 0 {
				return 0, "", false // a relation with unknown columns might own it
			}
			if _, ok := r.rel.Column(parts[0]); ok {
				if found >= 0 {
					return 0, "", false
				}
				found = i
			}
		}
		if found < 0 {
			return 0, "", false
		}
		return found, parts[0], true
	case 2, 3:
		qual := parts[len(parts)-2]
		found := -1
		for i, r := range sc.rels {
			if r.alias != qual {
				continue
			}
			if len(parts) == 3 && (r.rel == nil || r.rel.Name.Schema != parts[0]) {
				continue
			}
			if found >= 0 {
				return 0, "", false
			}
			found = i
		}
		if found < 0 {
			return 0, "", false
		}
		return found, parts[len(parts)-1], true
	}
	return 0, "", false
}

// applyFixes records on each table access of sc what quals fix about it.
func (w *walker) applyFixes(sc *scope, quals []*pg.Node) {
	var f fixes
	for _, q := range quals {
		f = and(f, w.cond(q, sc))
	}
	f = w.propagate(f, quals, sc)
	for i, r := range sc.rels {
		if r.acc < 0 || f[i] == nil {
			continue
		}
		a := &w.st.acc[r.acc]
		t := a.table
		get := func(name string) []val {
			cv, ok := f[i][name]
			if !ok || len(cv.vals) == 0 {
				return nil
			}
			col, ok := t.Column(name)
			if !ok || (cv.cast != "" && !castKeeps(cv.cast, col.Type)) {
				return nil
			}
			return cv.vals
		}
		for j, name := range t.PK {
			a.pk[j] = get(name)
		}
		if t.Granule != "" {
			a.granule = get(t.Granule)
		}
	}
}

type colRef struct {
	rel int
	col string
}

// propagate copies fixed values across top-level join equalities
// ("a.x = b.y AND a.x = 1" fixes b.y to 1 as well).
func (w *walker) propagate(f fixes, quals []*pg.Node, sc *scope) fixes {
	var eqs [][2]colRef
	var collect func(n *pg.Node)
	collect = func(n *pg.Node) {
		if b := n.GetBoolExpr(); b != nil && b.Boolop == pg.BoolExprType_AND_EXPR {
			for _, a := range b.Args {
				collect(a)
			}
			return
		}
		e := n.GetAExpr()
		if e == nil || e.Kind != pg.A_Expr_Kind_AEXPR_OP || len(e.Name) != 1 || e.Name[0].GetString_().GetSval() != "=" {
			return
		}
		lr, lc, lok := w.column(e.Lexpr, sc)
		rr, rc, rok := w.column(e.Rexpr, sc)
		if lok && rok {
			// Only between columns of one type family: across a float8 and
			// an int8 column, or a bpchar and a text one, PostgreSQL
			// compares converted values, and one value of one column
			// matches other values of the other.
			lt, rt := w.columnType(lr, lc, sc), w.columnType(rr, rc, sc)
			if lt != "" && typeFamily(lt) == typeFamily(rt) {
				eqs = append(eqs, [2]colRef{{lr, lc}, {rr, rc}})
			}
		}
	}
	for _, q := range quals {
		collect(q)
	}
	if len(eqs) == 0 {
		return f
	}
	if f == nil {
		f = fixes{}
	}
	for changed, rounds := true, 0; changed && rounds < 8; rounds++ {
		changed = false
		for _, eq := range eqs {
			for d := 0; d < 2; d++ {
				from, to := eq[d], eq[1-d]
				v, ok := f[from.rel][from.col]
				if !ok {
					continue
				}
				if cur, has := f[to.rel][to.col]; has && cur.bound() == 0 {
					continue // (a bound alone fixes nothing: a value replaces it)
				}
				if f[to.rel] == nil {
					f[to.rel] = make(map[string]colVal)
				}
				f[to.rel][to.col] = v
				changed = true
			}
		}
	}
	return f
}
