package analysis

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	pg "github.com/pganalyze/pg_query_go/v6"

	"github.com/ordo-db/ordo/internal/catalog"
)

// CatalogSource gives the current catalog snapshot (*catalog.Cache; a
// *catalog.Catalog is its own fixed source).
type CatalogSource interface {
	Current() *catalog.Catalog
}

// defaultKeyLimit is Options.KeyLimit's default.
const defaultKeyLimit = 1000

// Options configure an Analyzer.
type Options struct {
	// KeyLimit is the largest number of row or granule keys one table access
	// of one statement may produce before it escalates to the table key
	// (the paper's read-set limit). 0 means 1000.
	KeyLimit int
	// CacheSize bounds the number of cached texts, and that of cached
	// templates (one per fingerprint). 0 means 4096; negative disables
	// both.
	CacheSize int
}

// Env is a session's name-resolution environment. Build it with NewEnv
// when the session's search_path changes, not per statement.
type Env struct {
	searchPath []string
	key        string
}

// NewEnv returns the environment for an effective search path (see
// catalog.SearchPath).
func NewEnv(searchPath []string) Env {
	return Env{searchPath: searchPath, key: strings.Join(searchPath, "\x00")}
}

// SearchPath returns the schemas of the environment.
func (e Env) SearchPath() []string { return e.searchPath }

// Key identifies the environment (Statement.Env).
func (e Env) Key() string { return e.key }

// Analyzer analyzes SQL text against the current catalog and caches the
// results by text and environment. Safe for concurrent use.
type Analyzer struct {
	src   CatalogSource
	opts  Options
	mu    sync.RWMutex
	cache map[cacheKey]cacheEntry
	// shapes holds the templates of texts by fingerprint (template.go).
	shapes map[cacheKey]*template

	parses, exactHits, templateHits atomic.Uint64
}

// Stats counts how Analyze found its results since the analyzer was made.
type Stats struct {
	Parses       uint64 // texts parsed and analyzed (pg_query)
	ExactHits    uint64 // texts found in the cache of exact texts
	TemplateHits uint64 // texts analyzed through the template of their fingerprint
}

// Stats returns the analyzer's counters.
func (a *Analyzer) Stats() Stats {
	return Stats{Parses: a.parses.Load(), ExactHits: a.exactHits.Load(), TemplateHits: a.templateHits.Load()}
}

type cacheKey struct {
	sql string
	env string
}

type cacheEntry struct {
	version uint64
	stmts   []*Statement
}

// ErrSyntax wraps the parser's message for text PostgreSQL would reject.
var ErrSyntax = errors.New("syntax error")

// ErrInternal is returned by Analyze when the analyzer itself failed on
// the text (a bug: it is reported, never a crash of the session).
var ErrInternal = errors.New("analysis: internal error")

// ErrNoCatalog is returned by Analyze before the catalog is loaded.
var ErrNoCatalog = errors.New("analysis: no catalog loaded")

// New returns an analyzer reading the catalog from src.
func New(src CatalogSource, opts Options) *Analyzer {
	if opts.KeyLimit == 0 {
		opts.KeyLimit = defaultKeyLimit
	}
	if opts.CacheSize == 0 {
		opts.CacheSize = 4096
	}
	return &Analyzer{src: src, opts: opts, cache: make(map[cacheKey]cacheEntry), shapes: make(map[cacheKey]*template)}
}

// Analyze splits sql into statements and analyzes each. It is called once
// per Parse message (one statement) or simple Query (possibly several).
// Results are cached by exact text and env, and invalidated when the
// catalog version changes; the returned statements are shared and must not
// be modified. Syntax errors wrap ErrSyntax.
//
// A text not in the cache whose fingerprint (the text with its literals
// replaced by placeholders, fingerprint.go) matches one analyzed before
// gets that analysis with its own literals bound in (template.go), without
// being parsed: the same result as analyzing it, at a fraction of the
// cost. Such results are not added to the cache of exact texts.
func (a *Analyzer) Analyze(sql string, env Env) ([]*Statement, error) {
	cat := a.src.Current()
	if cat == nil {
		return nil, ErrNoCatalog
	}
	if a.opts.CacheSize <= 0 {
		return a.analyze(cat, sql, env)
	}
	key := cacheKey{sql, env.key}
	a.mu.RLock()
	e, ok := a.cache[key]
	a.mu.RUnlock()
	if ok && e.version == cat.Version() {
		a.exactHits.Add(1)
		return e.stmts, nil
	}
	fp, lits, fpOK := fingerprint(sql)
	shape := cacheKey{fp, env.key}
	if fpOK && len(lits) > 0 {
		a.mu.RLock()
		t := a.shapes[shape]
		a.mu.RUnlock()
		if t != nil && t.version == cat.Version() {
			if t.stmt == nil {
				fpOK = false // analyzed from the text every time
			} else if stmts := t.instantiate(sql, lits); stmts != nil {
				a.templateHits.Add(1)
				return stmts, nil
			}
		}
	}
	stmts, err := a.analyze(cat, sql, env)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	evict(a.cache, a.opts.CacheSize)
	a.cache[key] = cacheEntry{version: cat.Version(), stmts: stmts}
	a.mu.Unlock()
	if fpOK && len(lits) > 0 {
		t := newTemplate(sql, lits, stmts, cat.Version())
		a.mu.Lock()
		evict(a.shapes, a.opts.CacheSize)
		a.shapes[shape] = t
		a.mu.Unlock()
	}
	return stmts, nil
}

// evict removes about an eighth of a full cache, at random (map order).
func evict[V any](m map[cacheKey]V, size int) {
	if len(m) < size {
		return
	}
	n := len(m)/8 + 1
	for k := range m {
		delete(m, k)
		if n--; n == 0 {
			break
		}
	}
}

// AnalyzeUncached is Analyze without the cache (benchmarks, tools).
func (a *Analyzer) AnalyzeUncached(sql string, env Env) ([]*Statement, error) {
	cat := a.src.Current()
	if cat == nil {
		return nil, ErrNoCatalog
	}
	return a.analyze(cat, sql, env)
}

func (a *Analyzer) analyze(cat *catalog.Catalog, sql string, env Env) (stmts []*Statement, err error) {
	a.parses.Add(1)
	defer func() {
		// The parser is C code behind cgo and the tree is walked
		// generically; a malformed tree must become an error, not a crash.
		if r := recover(); r != nil {
			stmts, err = nil, fmt.Errorf("%w on %.60q: %v", ErrInternal, sql, r)
		}
	}()
	tree, err := pg.Parse(sql)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSyntax, err)
	}
	out := make([]*Statement, 0, len(tree.Stmts))
	for _, raw := range tree.Stmts {
		start := int(raw.StmtLocation)
		end := len(sql)
		if raw.StmtLen > 0 {
			end = start + int(raw.StmtLen)
		}
		if start < 0 || start > len(sql) || end > len(sql) || end < start {
			start, end = 0, len(sql)
		}
		text := sql[start:end]
		// Report the statement from its first token (leading comments are
		// kept: they may carry directives).
		trimmed := strings.TrimLeft(text, " \t\r\n;")
		off := start + len(text) - len(trimmed)
		out = append(out, analyzeStmt(cat, env.searchPath, raw.Stmt, strings.TrimRight(trimmed, " \t\r\n"), off, a.opts.KeyLimit))
	}
	if len(out) == 0 {
		out = append(out, &Statement{SQL: "", Kind: KindEmpty, static: &Footprint{}})
	}
	for _, st := range out {
		st.CatalogVersion, st.Env = cat.Version(), env.key
	}
	return out, nil
}

// leadingDirectives finds ordo.conflict_classes and ordo.profile in the
// comments before the first token of text:
//
//	/* ordo.conflict_classes = 'district[w=1], stock' */ BEGIN
//	-- ordo.profile=neworder
func leadingDirectives(text string) (classes, profile string) {
	i := 0
	for i < len(text) {
		switch {
		case text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r':
			i++
		case strings.HasPrefix(text[i:], "--"):
			j := strings.IndexByte(text[i:], '\n')
			if j < 0 {
				j = len(text) - i
			}
			directives(text[i+2:i+j], &classes, &profile)
			i += j
		case strings.HasPrefix(text[i:], "/*"):
			j := strings.Index(text[i+2:], "*/")
			if j < 0 {
				return
			}
			directives(text[i+2:i+2+j], &classes, &profile)
			i += j + 4
		default:
			return
		}
	}
	return
}

func directives(comment string, classes, profile *string) {
	for _, d := range []struct {
		name string
		out  *string
	}{{"ordo.conflict_classes", classes}, {"ordo.profile", profile}} {
		k := strings.Index(comment, d.name)
		if k < 0 {
			continue
		}
		rest := strings.TrimLeft(comment[k+len(d.name):], " \t")
		if rest == "" || (rest[0] != '=' && rest[0] != ':') {
			continue
		}
		rest = strings.TrimLeft(rest[1:], " \t")
		if strings.HasPrefix(rest, "'") {
			if e := strings.IndexByte(rest[1:], '\''); e >= 0 {
				*d.out = rest[1 : 1+e]
			}
			continue
		}
		e := strings.IndexAny(rest, " \t\r\n")
		if e < 0 {
			e = len(rest)
		}
		*d.out = rest[:e]
	}
}
