package catalog

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Name is a schema-qualified object name.
type Name struct {
	Schema string `json:"schema"`
	Name   string `json:"name"`
}

// String returns "schema.name" (unquoted); just the name when the schema
// is unknown (a relation the catalog does not have).
func (n Name) String() string {
	if n.Schema == "" {
		return n.Name
	}
	return n.Schema + "." + n.Name
}

// ParseName splits "schema.name"; a name without a dot gets schema "public".
func ParseName(s string) Name {
	if sch, nm, ok := strings.Cut(s, "."); ok {
		return Name{sch, nm}
	}
	return Name{"public", s}
}

// Kind is the kind of a relation.
type Kind uint8

// Relation kinds. Materialized views are tables for the analyzer: reading
// one reads its stored rows, and REFRESH is ordered like other DDL.
const (
	KindTable Kind = iota + 1
	KindView
)

// Column is a column and the name of its type (pg_type.typname, e.g.
// "int4", "text", "bpchar"). Type is empty when the column's values have no
// canonical text form the analyzer may rely on (e.g. a nondeterministic
// collation).
type Column struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// Relation is a table or a view.
type Relation struct {
	Name    Name
	Kind    Kind
	Columns []Column
	// PK lists the primary key columns in key order (tables only; empty if
	// the table has no primary key).
	PK []string
	// Granule is the configured granule column ("" for none).
	Granule string
	// Bases are, for a view, the tables it reads, through views over views.
	Bases []Name
	// Opaque is set on a view that calls a function which may read data the
	// catalog cannot attribute; reading it reads everything. MayWrite is
	// set on one that calls a volatile function which may (or one the
	// catalog does not know): reading it may write anything.
	Opaque, MayWrite bool
	// Triggers is set on a table with user triggers or rules: writing it
	// runs code that may read and write anything; TriggersChangeNames
	// (TableDesc) may change the session's names too.
	Triggers, TriggersChangeNames bool
	// WriteCode is set on a table (or view) an INSERT or UPDATE of which
	// may run a user function that may read data, DeleteCode on one a
	// DELETE of which may (TableDesc).
	WriteCode, DeleteCode bool
	// CascadeTriggers is set on a table an UPDATE or DELETE of which may
	// fire user triggers through foreign keys' actions (TableDesc).
	CascadeTriggers bool
	// PolicyReads is set on a table with row security whose policies use
	// other relations or user functions: reading it may read anything.
	// PolicyWrites on one whose policies call a volatile user function
	// (not C): reading it may write anything.
	PolicyReads, PolicyWrites bool
}

// Column returns the named column.
func (r *Relation) Column(name string) (Column, bool) {
	for _, c := range r.Columns {
		if c.Name == name {
			return c, true
		}
	}
	return Column{}, false
}

// Volatility is a function's provolatile.
type Volatility byte

// Function volatilities, as in pg_proc.provolatile.
const (
	Immutable Volatility = 'i'
	Stable    Volatility = 's'
	Volatile  Volatility = 'v'
)

// Function describes all overloads of a function name together (the
// analyzer does not resolve argument types): the worst volatility, and
// whether any overload may read or write user data.
type Function struct {
	Name       Name
	Volatility Volatility
	// ReadsData: calling it may read (or write) user tables the analyzer
	// cannot see, so a statement calling it reads everything.
	ReadsData bool
	// ChangesNames: its body may change how the session resolves names
	// (search_path, the role), or runs SQL it builds (FuncDesc).
	ChangesNames bool
}

// TableDesc, ViewDesc and FuncDesc form a Description.
type TableDesc struct {
	Schema  string   `json:"schema"`
	Name    string   `json:"name"`
	Columns []Column `json:"columns"`
	PK      []string `json:"pk,omitempty"`
	// Triggers: the table has user (non-internal) triggers or rules;
	// TriggersChangeNames: one of them runs a function whose body may
	// change the session's search path or role (FuncDesc.ChangesNames).
	Triggers            bool `json:"triggers,omitempty"`
	TriggersChangeNames bool `json:"triggers_change_names,omitempty"`
	// WriteCode: an INSERT or UPDATE of it may run a user function that
	// may read data (a column default's, a check constraint's, a
	// column domain's check; or those of a partition or child, or of a
	// table a foreign key carries the update to); DeleteCode: a DELETE
	// may (a foreign key's ON DELETE SET NULL or SET DEFAULT).
	WriteCode  bool `json:"write_code,omitempty"`
	DeleteCode bool `json:"delete_code,omitempty"`
	// CascadeTriggers: an UPDATE or DELETE of it may fire user triggers
	// through foreign keys' actions (Triggers covers its own, and its
	// partitions' and children's).
	CascadeTriggers bool `json:"cascade_triggers,omitempty"`
	// PolicyReads: row security is on, and a policy uses another
	// relation or a user function (or a user operator not in C).
	// PolicyFunctions and PolicyUses are those functions (an operator's
	// function) and relations, "schema.name": a policy that calls one
	// that may write (as a query would: a volatile function, an aggregate
	// whose support function is, a view that calls one) makes the table
	// write when read (Relation.PolicyWrites).
	PolicyReads     bool     `json:"policy_reads,omitempty"`
	PolicyFunctions []string `json:"policy_functions,omitempty"`
	PolicyUses      []string `json:"policy_uses,omitempty"`
}

// ViewDesc is a view and what its definition uses directly.
type ViewDesc struct {
	Schema string `json:"schema"`
	Name   string `json:"name"`
	// Uses are the relations (tables or views) its query reads, "schema.name".
	Uses []string `json:"uses"`
	// Functions are the functions its query calls, "schema.name".
	Functions []string `json:"functions,omitempty"`
	Columns   []Column `json:"columns,omitempty"`
	// WriteCode: an INSERT or UPDATE through it may run a user function
	// that may read data in a column default of its own; Triggers: it
	// has INSTEAD OF triggers or rules of its own.
	WriteCode bool `json:"write_code,omitempty"`
	Triggers  bool `json:"triggers,omitempty"`
}

// FuncDesc describes one function name.
type FuncDesc struct {
	Schema     string `json:"schema"`
	Name       string `json:"name"`
	Volatility string `json:"volatility"` // "immutable", "stable" or "volatile"
	ReadsData  bool   `json:"reads_data,omitempty"`
	// ChangesNames: its body (as Load reads it) may set search_path or
	// the role for the session, runs SQL it builds as text, or calls a
	// user function that does.
	ChangesNames bool `json:"changes_names,omitempty"`
}

// Description is the plain form of a catalog: what Load reads from
// PostgreSQL, or a fixed catalog written by hand for tests.
type Description struct {
	Tables    []TableDesc `json:"tables"`
	Views     []ViewDesc  `json:"views,omitempty"`
	Functions []FuncDesc  `json:"functions,omitempty"`
	// Operators are the operators, by symbol, whose function may read
	// data (Load keeps no other): Name is the operator's symbol and
	// Schema its schema, the rest is its function's.
	Operators []FuncDesc `json:"operators,omitempty"`
	// ReadingTypes are the domains, and composite types holding one, a
	// cast to which runs a check calling a user function that may read
	// data.
	ReadingTypes []Name `json:"reading_types,omitempty"`
	// Granules maps "schema.table" to its granule column (cluster
	// configuration, e.g. TPC-C's warehouse id columns); GranuleSeqno is
	// the epoch of that configuration (classes.GranuleSeqnoAt).
	Granules     map[string]string `json:"granules,omitempty"`
	GranuleSeqno uint64            `json:"granule_seqno,omitempty"`
}

// Catalog is an immutable snapshot of a database's schema.
type Catalog struct {
	version      uint64
	granuleSeqno uint64
	rels         map[Name]*Relation
	funcs        map[Name]*Function
	ops          map[Name]*Function
	readingTypes map[Name]bool
}

// GranuleSeqno is the epoch of the granule configuration the catalog's
// relations have (Description.GranuleSeqno).
func (c *Catalog) GranuleSeqno() uint64 { return c.granuleSeqno }

// ErrInvalid is returned by New for a Description that contradicts itself
// (a view cycle, a primary key or granule column that is not a column, a
// granule configured for an unknown table).
var ErrInvalid = errors.New("catalog: invalid description")

// New builds a catalog from d. version distinguishes successive snapshots
// (analysis results cached under one version are not used under another).
func New(d Description, version uint64) (*Catalog, error) {
	c := &Catalog{version: version, granuleSeqno: d.GranuleSeqno, rels: make(map[Name]*Relation), funcs: make(map[Name]*Function), ops: make(map[Name]*Function)}
	for _, t := range d.Tables {
		n := Name{t.Schema, t.Name}
		r := &Relation{Name: n, Kind: KindTable, Columns: t.Columns, PK: t.PK, Triggers: t.Triggers, TriggersChangeNames: t.TriggersChangeNames, WriteCode: t.WriteCode, DeleteCode: t.DeleteCode, CascadeTriggers: t.CascadeTriggers, PolicyReads: t.PolicyReads}
		for _, pk := range t.PK {
			if _, ok := r.Column(pk); !ok {
				return nil, fmt.Errorf("%w: primary key column %q is not a column of %s", ErrInvalid, pk, n)
			}
		}
		c.rels[n] = r
	}
	for tbl, col := range d.Granules {
		r, ok := c.rels[ParseName(tbl)]
		if !ok || r.Kind != KindTable {
			return nil, fmt.Errorf("%w: granule column configured for unknown table %q", ErrInvalid, tbl)
		}
		if _, ok := r.Column(col); !ok {
			return nil, fmt.Errorf("%w: granule column %q is not a column of %s", ErrInvalid, col, r.Name)
		}
		r.Granule = col
	}
	if err := addFunctions(c.funcs, d.Functions, "function"); err != nil {
		return nil, err
	}
	if err := addFunctions(c.ops, d.Operators, "operator"); err != nil {
		return nil, err
	}
	for _, t := range d.Tables {
		c.rels[Name{t.Schema, t.Name}].PolicyWrites = c.mayWrite(t.PolicyFunctions)
	}
	for _, t := range d.ReadingTypes {
		if c.readingTypes == nil {
			c.readingTypes = make(map[Name]bool)
		}
		c.readingTypes[t] = true
	}
	views := make(map[Name]ViewDesc)
	for _, v := range d.Views {
		n := Name{v.Schema, v.Name}
		views[n] = v
		c.rels[n] = &Relation{Name: n, Kind: KindView, Columns: v.Columns, WriteCode: v.WriteCode, Triggers: v.Triggers}
	}
	for n := range views {
		bases := make(map[Name]bool)
		opaque, mayWrite, err := c.expand(n, views, bases, map[Name]bool{})
		if err != nil {
			return nil, err
		}
		r := c.rels[n]
		r.Opaque, r.MayWrite = opaque, mayWrite
		for b := range bases {
			r.Bases = append(r.Bases, b)
		}
		sort.Slice(r.Bases, func(i, j int) bool { return r.Bases[i].String() < r.Bases[j].String() })
	}
	for _, t := range d.Tables {
		// A policy that reads a view that may write (one level: a view
		// over such a table, read by another table's policy, is not
		// followed further).
		r := c.rels[Name{t.Schema, t.Name}]
		for _, u := range t.PolicyUses {
			if v, ok := c.rels[ParseName(u)]; ok && v.MayWrite {
				r.PolicyWrites = true
			}
		}
	}
	return c, nil
}

// mayWrite reports whether calling one of the functions named
// ("schema.name") may write: one the catalog does not know, or a
// volatile one that may read data (as a call in a query is taken).
func (c *Catalog) mayWrite(functions []string) bool {
	for _, f := range functions {
		fn, ok := c.funcs[ParseName(f)]
		if !ok || fn.ReadsData && fn.Volatility == Volatile {
			return true
		}
	}
	return false
}

// addFunctions adds descs to m, merging those of one name (overloads) to
// the worst of them.
func addFunctions(m map[Name]*Function, descs []FuncDesc, what string) error {
	for _, f := range descs {
		n := Name{f.Schema, f.Name}
		v := Volatility(0)
		switch f.Volatility {
		case "immutable", "i":
			v = Immutable
		case "stable", "s":
			v = Stable
		case "volatile", "v":
			v = Volatile
		default:
			return fmt.Errorf("%w: %s %s has volatility %q", ErrInvalid, what, n, f.Volatility)
		}
		if old, ok := m[n]; ok {
			*old = old.merge(&Function{Volatility: v, ReadsData: f.ReadsData, ChangesNames: f.ChangesNames})
			continue
		}
		m[n] = &Function{Name: n, Volatility: v, ReadsData: f.ReadsData, ChangesNames: f.ChangesNames}
	}
	return nil
}

// merge returns f as volatile, as likely to read data and to change
// names as the worse of f and g (f's name).
func (f *Function) merge(g *Function) Function {
	m := *f
	m.Volatility = worse(f.Volatility, g.Volatility)
	m.ReadsData = f.ReadsData || g.ReadsData
	m.ChangesNames = f.ChangesNames || g.ChangesNames
	return m
}

func worse(a, b Volatility) Volatility {
	rank := map[Volatility]int{Immutable: 0, Stable: 1, Volatile: 2}
	if rank[b] > rank[a] {
		return b
	}
	return a
}

// expand adds the base tables of view n to bases and reports whether any
// view on the way is opaque, and whether any may write.
func (c *Catalog) expand(n Name, views map[Name]ViewDesc, bases map[Name]bool, onPath map[Name]bool) (opaque, mayWrite bool, err error) {
	if onPath[n] {
		return false, false, fmt.Errorf("%w: view %s depends on itself", ErrInvalid, n)
	}
	onPath[n] = true
	defer delete(onPath, n)
	v := views[n]
	for _, f := range v.Functions {
		if fn, ok := c.funcs[ParseName(f)]; !ok || fn.ReadsData {
			opaque = true
		}
	}
	mayWrite = c.mayWrite(v.Functions)
	for _, u := range v.Uses {
		un := ParseName(u)
		if _, isView := views[un]; isView {
			o, w, err := c.expand(un, views, bases, onPath)
			if err != nil {
				return false, false, err
			}
			opaque, mayWrite = opaque || o, mayWrite || w
			continue
		}
		base, ok := c.rels[un]
		if !ok {
			// A base the catalog does not know: the view cannot be attributed.
			opaque = true
			continue
		}
		// Its row security policies run in the view's read too.
		opaque, mayWrite = opaque || base.PolicyReads, mayWrite || base.PolicyWrites
		bases[un] = true
	}
	return opaque, mayWrite, nil
}

// Version returns the version given to New.
func (c *Catalog) Version() uint64 { return c.version }

// Lookup returns the relation with exactly this qualified name.
func (c *Catalog) Lookup(n Name) (*Relation, bool) {
	r, ok := c.rels[n]
	return r, ok
}

// Resolve finds relation name as PostgreSQL would for a session whose
// effective search path is searchPath (see SearchPath): a qualified name is
// looked up directly; an unqualified one in pg_catalog first (unless the
// path names it explicitly), then each schema of the path in order.
func (c *Catalog) Resolve(searchPath []string, schema, name string) (*Relation, bool) {
	return resolve(c.rels, searchPath, schema, name)
}

// resolve finds name in m as Resolve finds a relation.
func resolve[V any](m map[Name]V, searchPath []string, schema, name string) (V, bool) {
	if schema != "" {
		v, ok := m[Name{schema, name}]
		return v, ok
	}
	for _, s := range effectivePath(searchPath) {
		if v, ok := m[Name{s, name}]; ok {
			return v, true
		}
	}
	var zero V
	return zero, false
}

// Func finds a function like Resolve finds a relation. An unqualified
// name found in several schemas of the path is the first of them, as
// volatile and as likely to read data as the worst of them: PostgreSQL
// picks among them by the arguments' types (public.upper(int) over
// pg_catalog.upper(text) for upper(5)), which the analysis does not know.
func (c *Catalog) Func(searchPath []string, schema, name string) (*Function, bool) {
	return lookupFunc(c.funcs, searchPath, schema, name)
}

// ReadingType reports whether a cast to the named type (resolved as a
// relation is) runs a check calling a user function that may read data
// (Description.ReadingTypes).
func (c *Catalog) ReadingType(searchPath []string, schema, name string) bool {
	if len(c.readingTypes) == 0 {
		return false
	}
	_, ok := resolve(c.readingTypes, searchPath, schema, name)
	return ok
}

// Operator finds an operator whose function may read data
// (Description.Operators) by its symbol, like Func: false for every
// other operator.
func (c *Catalog) Operator(searchPath []string, schema, symbol string) (*Function, bool) {
	if len(c.ops) == 0 {
		return nil, false
	}
	return lookupFunc(c.ops, searchPath, schema, symbol)
}

func lookupFunc(m map[Name]*Function, searchPath []string, schema, name string) (*Function, bool) {
	if schema != "" {
		f, ok := m[Name{schema, name}]
		return f, ok
	}
	var found *Function
	for _, s := range effectivePath(searchPath) {
		f, ok := m[Name{s, name}]
		switch {
		case !ok:
		case found == nil:
			found = f
		default:
			if merged := found.merge(f); merged != *found {
				found = &merged
			}
		}
	}
	return found, found != nil
}

// DefaultSchema returns the schema an unqualified CREATE would use: the
// first schema of the path, "" if none.
func DefaultSchema(searchPath []string) string {
	for _, s := range searchPath {
		if s != "pg_catalog" {
			return s
		}
	}
	return ""
}

func effectivePath(p []string) []string {
	for _, s := range p {
		if s == "pg_catalog" {
			return p
		}
	}
	out := make([]string, 0, len(p)+1)
	out = append(out, "pg_catalog")
	return append(out, p...)
}

// SearchPath turns a search_path setting ("\"$user\", public") into a list
// of schema names, replacing $user by user and dropping empty entries.
// Whether a schema exists is not checked: a missing schema simply holds no
// relation of the catalog.
func SearchPath(setting, user string) []string {
	var out []string
	for _, part := range strings.Split(setting, ",") {
		p := strings.TrimSpace(part)
		if len(p) >= 2 && p[0] == '"' && p[len(p)-1] == '"' {
			p = strings.ReplaceAll(p[1:len(p)-1], `""`, `"`)
		} else {
			p = strings.ToLower(p)
		}
		if p == "$user" {
			p = user
		}
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Current returns c itself, so a fixed *Catalog can stand where a Cache is
// expected.
func (c *Catalog) Current() *Catalog { return c }
