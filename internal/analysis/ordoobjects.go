package analysis

import (
	"strings"

	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// OrdoSchema holds the node's own bookkeeping (proof rows of applied
// transactions, aborts, the cluster configuration, the DDL event
// triggers' functions); OrdoPublication and OrdoEventTriggers feed the
// capture. They are each node's own:
// rows a client wrote into _ordo.applied would tell the node it applied
// transactions it never saw, and it would skip them after a restart.
const (
	OrdoSchema      = "_ordo"
	OrdoPublication = "ordo"
)

// OrdoEventTriggers are the names of Ordo's event triggers
// (capture.DDLTriggerSQL).
var OrdoEventTriggers = map[string]bool{"ordo_ddl_end": true, "ordo_ddl_dropped": true, "ordo_ddl_rewrite": true}

// ordoObject names the object of Ordo's that statement n (already walked:
// writes and DDL targets known) writes or changes, or "" for none. Reading
// them is allowed.
func (w *walker) ordoObject(n *pg.Node) string {
	for name := range w.writes {
		if name.Schema == OrdoSchema {
			return "table " + name.String()
		}
	}
	for _, name := range w.st.DDLTargets {
		if name.Schema == OrdoSchema {
			return "relation " + name.String()
		}
	}
	if n == nil || w.st.Kind != KindDDL {
		return ""
	}
	switch x := n.Node.(type) {
	case *pg.Node_CreateSchemaStmt:
		if x.CreateSchemaStmt.Schemaname == OrdoSchema {
			return "schema " + OrdoSchema
		}
	case *pg.Node_CreateEventTrigStmt:
		if name := x.CreateEventTrigStmt.Trigname; OrdoEventTriggers[name] {
			w.st.KeptTag = "CREATE EVENT TRIGGER"
			w.st.KeptNotice = "ordo: event trigger " + name + " is Ordo's own and every node has it: kept as it is (not created again)"
			return "event trigger " + name
		}
	case *pg.Node_AlterEventTrigStmt:
		if OrdoEventTriggers[x.AlterEventTrigStmt.Trigname] {
			return "event trigger " + x.AlterEventTrigStmt.Trigname
		}

	case *pg.Node_CreatePublicationStmt:
		if x.CreatePublicationStmt.Pubname == OrdoPublication {
			return "publication " + OrdoPublication
		}
	case *pg.Node_AlterPublicationStmt:
		if x.AlterPublicationStmt.Pubname == OrdoPublication {
			return "publication " + OrdoPublication
		}
	case *pg.Node_DropStmt:
		for _, o := range x.DropStmt.Objects {
			name := qualifiedName(o)
			switch x.DropStmt.RemoveType {
			case pg.ObjectType_OBJECT_SCHEMA:
				if name == OrdoSchema {
					return "schema " + OrdoSchema
				}
			case pg.ObjectType_OBJECT_EVENT_TRIGGER:
				if OrdoEventTriggers[name] {
					return "event trigger " + name
				}
			case pg.ObjectType_OBJECT_PUBLICATION:
				if name == OrdoPublication {
					return "publication " + OrdoPublication
				}
			}
		}
	case *pg.Node_AlterObjectSchemaStmt:
		if x.AlterObjectSchemaStmt.Newschema == OrdoSchema {
			return "schema " + OrdoSchema
		}
	case *pg.Node_GrantStmt:
		// Privileges on Ordo's objects are Ordo's to set: a REVOKE … FROM
		// PUBLIC, replicated, would fail every session's commit.
		g := x.GrantStmt
		for _, o := range g.Objects {
			if name := qualifiedName(o); name == OrdoSchema || strings.HasPrefix(name, OrdoSchema+".") {
				return "schema " + OrdoSchema + " (its privileges)"
			}
			if rv := o.GetRangeVar(); rv != nil && rv.Schemaname == OrdoSchema {
				return "table " + OrdoSchema + "." + rv.Relname + " (its privileges)"
			}
		}
	case *pg.Node_RenameStmt:
		r := x.RenameStmt
		switch {
		case r.RenameType == pg.ObjectType_OBJECT_SCHEMA && r.Subname == OrdoSchema:
			return "schema " + OrdoSchema
		case r.RenameType == pg.ObjectType_OBJECT_EVENT_TRIGGER && OrdoEventTriggers[qualifiedName(r.Object)]:
			return "event trigger " + qualifiedName(r.Object)
		case r.RenameType == pg.ObjectType_OBJECT_PUBLICATION && qualifiedName(r.Object) == OrdoPublication:
			return "publication " + OrdoPublication
		}
	case *pg.Node_AlterOwnerStmt:
		o := x.AlterOwnerStmt
		switch name := qualifiedName(o.Object); {
		case o.ObjectType == pg.ObjectType_OBJECT_EVENT_TRIGGER && OrdoEventTriggers[name]:
			// pg_dump follows each CREATE EVENT TRIGGER with its owner.
			w.st.KeptTag = "ALTER EVENT TRIGGER"
			w.st.KeptNotice = "ordo: event trigger " + name + " is Ordo's own: its owner is kept as it is"
			return "event trigger " + name
		case o.ObjectType == pg.ObjectType_OBJECT_SCHEMA && name == OrdoSchema:
			return "schema " + OrdoSchema
		case o.ObjectType == pg.ObjectType_OBJECT_PUBLICATION && name == OrdoPublication:
			return "publication " + OrdoPublication
		}
	}
	// Functions, types and other objects named in _ordo (CREATE OR
	// REPLACE FUNCTION _ordo.…, DROP FUNCTION _ordo.…, ALTER …): any
	// qualified name in the statement that begins with the schema, other
	// than a call or a query (which only use them).
	if name := ordoName(n.ProtoReflect()); name != "" {
		return name
	}
	return ""
}

// ordoName finds a name list _ordo.… in m, outside function calls and
// queries (which only use them).
func ordoName(m protoreflect.Message) string {
	return finder{
		at: func(m protoreflect.Message) (string, bool) {
			switch x := m.Interface().(type) {
			case *pg.FuncCall, *pg.SelectStmt, *pg.ColumnRef:
				return "", false
			case *pg.List:
				return ordoNameList(x.Items), true
			}
			return "", true
		},
		list: ordoNameList,
	}.find(m)
}

// ordoNameList: items as a name list (Strings, the first _ordo), or "".
func ordoNameList(items []*pg.Node) string {
	if len(items) < 2 || items[0].GetString_().GetSval() != OrdoSchema {
		return ""
	}
	parts := make([]string, 0, len(items))
	for _, it := range items {
		parts = append(parts, it.GetString_().GetSval())
	}
	return "object " + strings.Join(parts, ".")
}

// finder searches a parse tree depth first for the first non-empty answer
// of at (descend false: not below that node), and of list for each
// repeated Node field (a name list, in a statement), before its items.
type finder struct {
	at   func(m protoreflect.Message) (found string, descend bool)
	list func(items []*pg.Node) string
}

func (f finder) find(m protoreflect.Message) string {
	found, descend := f.at(m)
	if found != "" || !descend {
		return found
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			l := v.List()
			if f.list != nil && fd.Message().FullName() == "pg_query.Node" {
				items := make([]*pg.Node, l.Len())
				for i := range items {
					items[i] = l.Get(i).Message().Interface().(*pg.Node)
				}
				found = f.list(items)
			}
			for i := 0; i < l.Len() && found == ""; i++ {
				found = f.find(l.Get(i).Message())
			}
		case fd.IsMap():
		case fd.Message() != nil:
			found = f.find(v.Message())
		}
		return found == ""
	})
	return found
}

// qualifiedName is the dotted name of a DROP's or RENAME's object node: a
// String, or a List of Strings.
func qualifiedName(n *pg.Node) string {
	if n == nil {
		return ""
	}
	if s := n.GetString_(); s != nil {
		return s.Sval
	}
	var parts []string
	for _, it := range n.GetList().GetItems() {
		parts = append(parts, it.GetString_().GetSval())
	}
	if len(parts) == 0 {
		if ow := n.GetObjectWithArgs(); ow != nil {
			for _, it := range ow.Objname {
				parts = append(parts, it.GetString_().GetSval())
			}
		}
	}
	return strings.Join(parts, ".")
}
