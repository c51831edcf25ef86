package analysis

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	pg "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/ordo-db/ordo/internal/catalog"
)

// FuzzAnalyze: arbitrary SQL never panics (nor fails internally), and
// every statement PostgreSQL's parser accepts that reads data yields a
// non-empty read set or an escalation to everything.
func FuzzAnalyze(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.txt")
	for _, path := range files {
		cases, _ := readGolden(&testing.T{}, path)
		for _, c := range cases {
			f.Add(c.sql)
		}
	}
	f.Add("SELECT * FROM item i WHERE (i.i_id, i.i_im_id) IN ((1,2),(3,4)) OR i.i_id = ANY('{\"1\"}')")
	cat := testCatalog(f)
	a := New(cat, Options{KeyLimit: 20, CacheSize: -1})
	env := NewEnv([]string{"public"})
	f.Fuzz(func(t *testing.T, sql string) {
		stmts, err := a.Analyze(sql, env)
		if errors.Is(err, ErrInternal) {
			t.Fatalf("internal error: %v", err)
		}
		if err != nil {
			return
		}
		for _, s := range stmts {
			checkReadsSomething(t, cat, s)
		}
	})
}

func checkReadsSomething(t *testing.T, cat *catalog.Catalog, s *Statement) {
	t.Helper()
	ps := make([]Param, s.NumParams)
	for i := range ps {
		ps[i] = Param{Value: []byte("1")}
	}
	fp, err := s.Bind(ps)
	if err != nil {
		t.Fatalf("%q: Bind: %v", s.SQL, err)
	}
	if fp.All || len(fp.Reads) > 0 || !s.Executes {
		return
	}
	switch s.Kind {
	case KindRead, KindWrite, KindCopyTo, KindOpaque:
	default:
		return
	}
	tree, err := pg.Parse(s.SQL)
	if err != nil || len(tree.Stmts) != 1 {
		return // the statement text alone is not parseable (e.g. a split edge case)
	}
	if rel := readRelation(cat, tree.Stmts[0].Stmt); rel != "" {
		t.Fatalf("%q reads %s but its read set is empty", s.SQL, rel)
	}
}

// readRelation independently finds a relation a statement reads: any
// RangeVar that is not an INSERT or COPY FROM target, a CTE name, or a view
// over nothing but system catalogs. It returns "" if there is none.
func readRelation(cat *catalog.Catalog, n *pg.Node) string {
	targets := map[*pg.RangeVar]bool{}
	ctes := map[string]bool{}
	var vars []*pg.RangeVar
	var visit func(m protoreflect.Message)
	visit = func(m protoreflect.Message) {
		switch x := m.Interface().(type) {
		case *pg.InsertStmt:
			targets[x.Relation] = true
		case *pg.CopyStmt:
			if x.IsFrom {
				targets[x.Relation] = true
			}
		case *pg.CommonTableExpr:
			ctes[x.Ctename] = true
		case *pg.RangeVar:
			vars = append(vars, x)
		}
		m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			if fd.Kind() != protoreflect.MessageKind {
				return true
			}
			if fd.IsList() {
				for i := 0; i < v.List().Len(); i++ {
					visit(v.List().Get(i).Message())
				}
			} else if !fd.IsMap() {
				visit(v.Message())
			}
			return true
		})
	}
	visit(proto.Message(n).ProtoReflect())
	for _, rv := range vars {
		if targets[rv] || (rv.Schemaname == "" && ctes[rv.Relname]) {
			continue
		}
		if r, ok := cat.Resolve([]string{"public"}, rv.Schemaname, rv.Relname); ok && r.Kind == catalog.KindView && len(r.Bases) == 0 && !r.Opaque {
			continue
		}
		return strings.TrimPrefix(rv.Schemaname+"."+rv.Relname, ".")
	}
	return ""
}

// TestFuzzOracle makes sure the fuzz oracle itself can fail.
func TestFuzzOracle(t *testing.T) {
	cat := testCatalog(t)
	for sql, want := range map[string]string{
		"SELECT * FROM item":                               "item",
		"WITH item AS (SELECT 1) SELECT * FROM item":       "",
		"INSERT INTO item VALUES (1)":                      "",
		"INSERT INTO item SELECT * FROM s1.t":              "s1.t",
		"SELECT * FROM pg_settings":                        "",
		"UPDATE stock SET s_quantity = 0 WHERE s_w_id = 1": "stock",
	} {
		tree, err := pg.Parse(sql)
		if err != nil {
			t.Fatal(err)
		}
		if got := readRelation(cat, tree.Stmts[0].Stmt); got != want {
			t.Errorf("readRelation(%q) = %q, want %q", sql, got, want)
		}
	}
}
