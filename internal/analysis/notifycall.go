package analysis

import (
	"fmt"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
)

// NotifyCall is a statement that only calls pg_notify: SELECT
// pg_notify(channel, payload), each argument a string constant, NULL or
// a parameter. PostgreSQL refuses to PREPARE a transaction that sent a
// notification, so Ordo runs a no-op in its place (Statement.Rewrite:
// the same result, one row of type void, and the same parameters) and
// sends the notification itself when the transaction commits, on every
// node.
type NotifyCall struct {
	Channel, Payload NotifyArg
}

// NotifyArg is one argument of a NotifyCall: a constant (Null when it is
// NULL) or parameter $Param (Param > 0).
type NotifyArg struct {
	Text  string
	Null  bool
	Param int
}

// Value returns the argument's value given the statement's parameters,
// and whether it is NULL.
func (a NotifyArg) Value(params []Param) (string, bool, error) {
	if a.Param == 0 {
		return a.Text, a.Null, nil
	}
	if a.Param > len(params) {
		return "", false, fmt.Errorf("%w: statement uses $%d, %d given", ErrParams, a.Param, len(params))
	}
	p := params[a.Param-1]
	// A text parameter's binary form is its text.
	return string(p.Value), p.Value == nil, nil
}

// notifyCall recognises sel as a NotifyCall, and sets the statement's
// rewrite.
func (w *walker) notifyCall(sel *pg.SelectStmt) {
	if len(sel.TargetList) != 1 || sel.FromClause != nil || sel.WhereClause != nil || sel.GroupClause != nil ||
		sel.HavingClause != nil || sel.WindowClause != nil || sel.DistinctClause != nil || sel.SortClause != nil ||
		sel.LimitCount != nil || sel.LimitOffset != nil || sel.LockingClause != nil || sel.WithClause != nil ||
		sel.ValuesLists != nil || sel.Op != pg.SetOperation_SETOP_NONE || sel.IntoClause != nil {
		return
	}
	rt := sel.TargetList[0].GetResTarget()
	if rt == nil {
		return
	}
	fc := rt.GetVal().GetFuncCall()
	if fc == nil || len(fc.Args) != 2 || fc.AggOrder != nil || fc.AggFilter != nil || fc.Over != nil ||
		fc.AggStar || fc.AggDistinct || fc.FuncVariadic || fc.AggWithinGroup {
		return
	}
	var name []string
	for _, n := range fc.Funcname {
		name = append(name, n.GetString_().GetSval())
	}
	if q := strings.Join(name, "."); q != "pg_notify" && q != "pg_catalog.pg_notify" {
		return
	}
	var args [2]NotifyArg
	for i, a := range fc.Args {
		if tc := a.GetTypeCast(); tc != nil {
			if !isTextType(tc.TypeName) {
				return
			}
			a = tc.Arg
		}
		switch {
		case a.GetParamRef() != nil:
			args[i].Param = int(a.GetParamRef().Number)
		case a.GetAConst() != nil:
			c := a.GetAConst()
			switch {
			case c.Isnull:
				args[i].Null = true
			case c.GetSval() != nil:
				args[i].Text = c.GetSval().GetSval()
			default:
				return
			}
		default:
			return
		}
	}
	col := rt.Name
	if col == "" {
		col = "pg_notify"
	}
	var conds []string
	for _, a := range args {
		if a.Param > 0 {
			conds = append(conds, fmt.Sprintf("($%d::text IS NULL OR true)", a.Param))
		}
	}
	sql := "SELECT ''::void AS " + quoteIdent(col)
	if len(conds) > 0 {
		sql += " WHERE " + strings.Join(conds, " AND ")
	}
	w.st.NotifyCall = &NotifyCall{Channel: args[0], Payload: args[1]}
	w.st.Rewrite, w.st.RewriteInBlock = sql, true
}

// isTextType reports whether tn names text or varchar (with no typmod).
func isTextType(tn *pg.TypeName) bool {
	if tn == nil || tn.Typmods != nil || tn.ArrayBounds != nil || tn.Setof {
		return false
	}
	var name []string
	for _, n := range tn.Names {
		name = append(name, n.GetString_().GetSval())
	}
	switch strings.Join(name, ".") {
	case "text", "pg_catalog.text", "varchar", "pg_catalog.varchar":
		return true
	}
	return false
}

func quoteIdent(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}
