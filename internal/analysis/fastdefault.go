package analysis

import (
	"fmt"
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/ordo-db/ordo/internal/catalog"
)

// Fast defaults. ALTER TABLE … ADD COLUMN c … DEFAULT e, where e is not
// volatile, does not rewrite the table: PostgreSQL evaluates e once and
// keeps the value for every existing row (pg_attribute.attmissingval).
// Replayed on another node, e is evaluated there: now() at that node's
// apply, current_user as the applying role, pg_backend_pid() of another
// backend. The rows would silently differ from node to node. So the node
// that ran the statement reads the values it kept (the session, after
// the statement ran, before its transaction is prepared), and the others
// replay it with those values as constant defaults, followed by the
// column's default as written, for the rows inserted later:
//
//	ALTER TABLE t ADD COLUMN c timestamptz DEFAULT '2026-11-28 23:40:00+00'::timestamptz,
//	    ALTER COLUMN c SET DEFAULT now()
//
// (A volatile default, random() or nextval(), rewrites the table with a
// value per row; the DDL event trigger refuses that on a table with rows.)

// nonConstantDefaults lists the columns that alter (an ALTER TABLE) adds
// with a default that is not a constant.
func nonConstantDefaults(alter *pg.AlterTableStmt) []string {
	var out []string
	for _, def := range addedColumns(alter) {
		if e := columnDefault(def); e != nil && !isConstant(e) {
			out = append(out, def.Colname)
		}
	}
	return out
}

// addedColumns are the definitions of the columns alter adds.
func addedColumns(alter *pg.AlterTableStmt) []*pg.ColumnDef {
	var out []*pg.ColumnDef
	for _, c := range alter.Cmds {
		cmd := c.GetAlterTableCmd()
		if cmd == nil || cmd.Subtype != pg.AlterTableType_AT_AddColumn {
			continue
		}
		if def := cmd.GetDef().GetColumnDef(); def != nil {
			out = append(out, def)
		}
	}
	return out
}

// columnDefault is the DEFAULT expression of a column definition.
func columnDefault(def *pg.ColumnDef) *pg.Node {
	if def.RawDefault != nil {
		return def.RawDefault
	}
	for _, c := range def.Constraints {
		if k := c.GetConstraint(); k != nil && k.Contype == pg.ConstrType_CONSTR_DEFAULT {
			return k.RawExpr
		}
	}
	return nil
}

// isConstant: a literal, possibly cast or negated.
func isConstant(n *pg.Node) bool {
	switch {
	case n.GetAConst() != nil:
		return true
	case n.GetTypeCast() != nil:
		return isConstant(n.GetTypeCast().Arg)
	case n.GetAExpr() != nil:
		e := n.GetAExpr()
		return e.Lexpr == nil && len(e.Name) == 1 && e.Name[0].GetString_().GetSval() == "-" && isConstant(e.Rexpr)
	}
	return false
}

// LiteralDefaults rewrites the ALTER TABLE sql so that each column in
// values (name → the value PostgreSQL kept for the existing rows, in its
// text form; see above) is added with that value as a constant default,
// then given its default as written. Columns not in values are left as
// they are.
func LiteralDefaults(sql string, values map[string]string) (string, error) {
	tree, err := pg.Parse(sql)
	if err != nil {
		return "", err
	}
	if len(tree.Stmts) != 1 || tree.Stmts[0].Stmt.GetAlterTableStmt() == nil {
		return "", fmt.Errorf("analysis: not one ALTER TABLE: %q", sql)
	}
	alter := tree.Stmts[0].Stmt.GetAlterTableStmt()
	var later []*pg.Node
	changed := false
	for _, def := range addedColumns(alter) {
		v, ok := values[def.Colname]
		if !ok {
			continue
		}
		lit := &pg.Node{Node: &pg.Node_TypeCast{TypeCast: &pg.TypeCast{
			Arg:      &pg.Node{Node: &pg.Node_AConst{AConst: &pg.A_Const{Val: &pg.A_Const_Sval{Sval: &pg.String{Sval: v}}}}},
			TypeName: proto.Clone(def.TypeName).(*pg.TypeName),
		}}}
		var orig *pg.Node
		if def.RawDefault != nil {
			orig, def.RawDefault = def.RawDefault, lit
		} else {
			for _, k := range def.Constraints {
				if kc := k.GetConstraint(); kc != nil && kc.Contype == pg.ConstrType_CONSTR_DEFAULT {
					orig, kc.RawExpr = kc.RawExpr, lit
					break
				}
			}
		}
		if orig == nil {
			continue
		}
		changed = true
		later = append(later, &pg.Node{Node: &pg.Node_AlterTableCmd{AlterTableCmd: &pg.AlterTableCmd{
			Subtype: pg.AlterTableType_AT_ColumnDefault, Name: def.Colname, Def: orig, Behavior: pg.DropBehavior_DROP_RESTRICT,
		}}})
	}
	if !changed {
		return sql, nil
	}
	alter.Cmds = append(alter.Cmds, later...)
	return pg.Deparse(tree)
}

// nodeDependentUsing names what makes an ALTER TABLE … ALTER COLUMN …
// TYPE … USING e compute different values on different nodes: a call of a
// volatile function (random(), clock_timestamp()), of one that reads
// tables, or of a stable one that answers with the node's or the
// session's state (now(), current_setting(), pg_backend_pid()), CURRENT_USER,
// CURRENT_TIMESTAMP and the like, or a subquery. Each node that replays
// the statement rewrites the table with its own values. "" if none.
// Other stable functions (length(), to_char() of a column) depend only on
// the settings the statement is replayed under, and casts are not calls.
// (The catalog knows a name's worst volatility over its overloads.)
func (w *walker) nodeDependentUsing(alter *pg.AlterTableStmt) string {
	for _, c := range alter.Cmds {
		cmd := c.GetAlterTableCmd()
		if cmd == nil || cmd.Subtype != pg.AlterTableType_AT_AlterColumnType {
			continue
		}
		def := cmd.GetDef().GetColumnDef()
		if def == nil || def.RawDefault == nil {
			continue
		}
		if what := w.nodeDependent(def.RawDefault.ProtoReflect()); what != "" {
			return what
		}
	}
	return ""
}

func (w *walker) nodeDependent(m protoreflect.Message) string {
	return finder{at: func(m protoreflect.Message) (string, bool) {
		switch x := m.Interface().(type) {
		case *pg.SQLValueFunction:
			return "a value of the session (" + strings.TrimPrefix(x.Op.String(), "SVFOP_") + ")", false
		case *pg.FuncCall:
			schema, name, full := funcName(x)
			f, ok := w.cat.Func(w.sp, schema, name)
			if !ok || f.Volatility == catalog.Volatile || f.ReadsData ||
				f.Volatility == catalog.Stable && (f.Name.Schema != "pg_catalog" || nodeStateFunctions[f.Name.Name]) {
				return full + "()", false
			}
		case *pg.SelectStmt, *pg.SubLink:
			return "a subquery", false
		}
		return "", true
	}}.find(m)
}

// nodeStateFunctions are pg_catalog's stable functions whose answer is the
// node's or the session's state rather than a function of their
// arguments and settings.
var nodeStateFunctions = map[string]bool{
	"now": true, "transaction_timestamp": true, "statement_timestamp": true,
	"current_setting": true, "current_schema": true, "current_schemas": true,
	"pg_backend_pid": true, "inet_client_addr": true, "inet_client_port": true,
	"inet_server_addr": true, "inet_server_port": true, "pg_postmaster_start_time": true,
	"pg_conf_load_time": true, "pg_current_xact_id_if_assigned": true, "txid_current_if_assigned": true,
	"pg_current_snapshot": true, "txid_current_snapshot": true, "pg_my_temp_schema": true,
	"pg_trigger_depth": true, "pg_current_logfile": true, "version": true,
	"pg_last_committed_xact": true, "pg_last_wal_receive_lsn": true, "pg_last_wal_replay_lsn": true,
	"pg_current_wal_lsn": true, "pg_current_wal_insert_lsn": true, "pg_current_wal_flush_lsn": true,
}
