package analysis

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ordo-db/ordo/internal/catalog"
	"github.com/ordo-db/ordo/internal/txn"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the golden files in testdata/ with the current output")

// testCatalog is the fixed catalog of testdata/catalog.json: TPC-C and
// pgbench with warehouse/branch granules, ORM schemas, views over views,
// functions, a subset of pg_catalog.
func testCatalog(t testing.TB) *catalog.Catalog {
	t.Helper()
	b, err := os.ReadFile("testdata/catalog.json")
	if err != nil {
		t.Fatal(err)
	}
	var d catalog.Description
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	c, err := catalog.New(d, 1)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A golden case file is a sequence of blocks:
//
//	analyze [params=v1|v2|NULL] [search_path=s1,s2]
//	<SQL, one or more lines>
//	----
//	<output lines>
//	<blank line>
//
// Lines starting with '#' between blocks are comments.
type goldenCase struct {
	header string
	sql    string
	output string
}

func readGolden(t *testing.T, path string) (cases []goldenCase, comments map[int][]string) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	comments = map[int][]string{}
	for i := 0; i < len(lines); {
		l := lines[i]
		switch {
		case strings.TrimSpace(l) == "":
			i++
		case strings.HasPrefix(l, "#"):
			comments[len(cases)] = append(comments[len(cases)], l)
			i++
		case strings.HasPrefix(l, "analyze"):
			c := goldenCase{header: l}
			i++
			var sql []string
			for i < len(lines) && lines[i] != "----" {
				sql = append(sql, lines[i])
				i++
			}
			if i == len(lines) {
				t.Fatalf("%s: block %q has no ----", path, c.header)
			}
			i++
			var out []string
			for i < len(lines) && strings.TrimSpace(lines[i]) != "" {
				out = append(out, lines[i])
				i++
			}
			c.sql = strings.Join(sql, "\n")
			c.output = strings.Join(out, "\n")
			cases = append(cases, c)
		default:
			t.Fatalf("%s:%d: unexpected line %q", path, i+1, l)
		}
	}
	return cases, comments
}

func writeGolden(t *testing.T, path string, cases []goldenCase, comments map[int][]string) {
	var b strings.Builder
	for i, c := range cases {
		for _, cm := range comments[i] {
			b.WriteString(cm + "\n")
		}
		b.WriteString(c.header + "\n" + c.sql + "\n----\n" + c.output + "\n\n")
	}
	for _, cm := range comments[len(cases)] {
		b.WriteString(cm + "\n")
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

func parseHeader(t *testing.T, h string) (params []Param, env Env) {
	env = NewEnv([]string{"public"})
	for _, f := range strings.Fields(h)[1:] {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "params":
			for _, p := range strings.Split(v, "|") {
				if p == "NULL" {
					params = append(params, Param{})
				} else {
					params = append(params, Param{Value: []byte(p)})
				}
			}
		case "search_path":
			env = NewEnv(strings.Split(v, ","))
		default:
			t.Fatalf("unknown directive %q", f)
		}
	}
	return params, env
}

// render formats the analysis of one case for the golden files.
func render(a *Analyzer, sql string, params []Param, env Env) string {
	stmts, err := a.AnalyzeUncached(sql, env)
	if err != nil {
		return "error: " + err.Error()
	}
	var b strings.Builder
	for i, s := range stmts {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "[%d] %s %s", i+1, s.Kind, s.Tag)
		if len(stmts) > 1 {
			fmt.Fprintf(&b, " @%d", s.Offset)
		}
		if s.Explain {
			fmt.Fprintf(&b, " explain executes=%v", s.Executes)
		}
		if s.Kind == KindRefused || s.Kind == KindOpaque || s.ReadsAll {
			fmt.Fprintf(&b, "\n  reason: %s", s.Reason)
		}
		if s.Rewrite != "" {
			fmt.Fprintf(&b, "\n  rewrite: %s", s.Rewrite)
		}
		if n := s.NotifyCall; n != nil {
			fmt.Fprintf(&b, "\n  notify-call: channel %+v, payload %+v", n.Channel, n.Payload)
		}
		if s.Replay != "" {
			fmt.Fprintf(&b, "\n  replay: %s", s.Replay)
		}
		if s.SetsSequence {
			fmt.Fprintf(&b, "\n  sets-sequence")
		}
		if s.SetsSearchPath {
			fmt.Fprintf(&b, "\n  sets-search-path")
		}
		if s.WritesLargeObjects {
			fmt.Fprintf(&b, "\n  large-objects: writes")
		} else if s.LargeObjects {
			fmt.Fprintf(&b, "\n  large-objects: reads")
		}
		if s.Txn != nil {
			tc := s.Txn
			fmt.Fprintf(&b, "\n  txn: %s", tc.Op)
			if tc.Isolation != "" {
				fmt.Fprintf(&b, " isolation=%q", tc.Isolation)
			}
			if tc.ReadOnly != 0 {
				fmt.Fprintf(&b, " read_only=%d", tc.ReadOnly)
			}
			if tc.Deferrable != 0 {
				fmt.Fprintf(&b, " deferrable=%d", tc.Deferrable)
			}
			if tc.Chain {
				b.WriteString(" chain")
			}
			if tc.Savepoint != "" {
				fmt.Fprintf(&b, " savepoint=%s", tc.Savepoint)
			}
			if tc.GID != "" {
				fmt.Fprintf(&b, " gid=%s", tc.GID)
			}
			if tc.ConflictClasses != "" {
				fmt.Fprintf(&b, " classes=%q", tc.ConflictClasses)
			}
			if tc.Profile != "" {
				fmt.Fprintf(&b, " profile=%q", tc.Profile)
			}
		}
		if st := s.Setting; st != nil {
			fmt.Fprintf(&b, "\n  setting: %s", st.Name)
			if st.Value != "" {
				fmt.Fprintf(&b, " = %q", st.Value)
			}
			for _, f := range []struct {
				on bool
				s  string
			}{{st.Local, "local"}, {st.Reset, "reset"}, {st.Show, "show"}, {st.Ordo, "ordo"}} {
				if f.on {
					b.WriteString(" " + f.s)
				}
			}
		}
		if s.Prepared != nil {
			fmt.Fprintf(&b, "\n  prepared: %s %s reads=%v writes=%v", s.Prepared.Kind, s.Prepared.Tag, names(s.Prepared.Reads), names(s.Prepared.Writes))
			if s.Prepared.ReadsAll {
				fmt.Fprintf(&b, " reads-all (%s)", s.Prepared.Reason)
			}
		}
		fp, err := s.Bind(params)
		if err != nil {
			fmt.Fprintf(&b, "\n  bind error: %v", err)
			continue
		}
		if fp.All {
			b.WriteString("\n  reads: ALL")
		} else if len(fp.Reads) > 0 {
			fmt.Fprintf(&b, "\n  reads: %s", keys(fp.Reads))
		}
		if len(s.Writes) > 0 {
			fmt.Fprintf(&b, "\n  writes: %s", names(s.Writes))
		}
		if fp.WritesAll {
			b.WriteString("\n  write-keys: ALL")
		} else if len(fp.Writes) > 0 {
			fmt.Fprintf(&b, "\n  write-keys: %s", keys(fp.Writes))
		}
		if len(s.Locks) > 0 {
			fmt.Fprintf(&b, "\n  locks: %s", names(s.Locks))
		}
		if len(s.DDLTargets) > 0 {
			fmt.Fprintf(&b, "\n  ddl-targets: %s", names(s.DDLTargets))
		}
		if len(s.Unknown) > 0 {
			fmt.Fprintf(&b, "\n  unknown: %s", strings.Join(s.Unknown, " "))
		}
	}
	return b.String()
}

func keys(ks []txn.Key) string {
	s := make([]string, len(ks))
	for i, k := range ks {
		s[i] = k.String()
	}
	return strings.Join(s, " ")
}

func names(ns []catalog.Name) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = n.String()
	}
	return strings.Join(s, " ")
}

// TestGolden runs every testdata/*.txt corpus file. Regenerate with
// go test ./internal/analysis -rewrite (then review the diff).
func TestGolden(t *testing.T) {
	a := New(testCatalog(t), Options{KeyLimit: 50})
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	total := 0
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			cases, comments := readGolden(t, path)
			total += len(cases)
			for i := range cases {
				c := &cases[i]
				params, env := parseHeader(t, c.header)
				got := render(a, c.sql, params, env)
				if *rewrite {
					c.output = got
					continue
				}
				if got != c.output {
					t.Errorf("%s: %s\n%s\n--- got:\n%s\n--- want:\n%s", path, c.header, c.sql, got, c.output)
				}
			}
			if *rewrite {
				writeGolden(t, path, cases, comments)
			}
		})
	}
	if total < 300 {
		t.Errorf("golden corpus has %d statements, want at least 300", total)
	}
}
