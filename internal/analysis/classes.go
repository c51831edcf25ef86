package analysis

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/ordo-db/ordo/internal/catalog"
	"github.com/ordo-db/ordo/internal/txn"
)

// ClassDef defines a conflict class: a named set of tables, optionally
// split by a granule column ("district by d_w_id": district[w=1],
// district[w=2] …).
type ClassDef struct {
	Name   string
	Tables []catalog.Name
	// Label names the split in declarations ("w" in district[w=1]); empty
	// for a class that is not split.
	Label string
	// Columns gives, per table, the column whose value selects the
	// partition. Every table of a split class must have one.
	Columns map[catalog.Name]string
}

// Classes is the cluster's conflict-class configuration: definitions and
// named transaction profiles. A table that no class names forms an
// implicit class of its own, named "schema.table" (the paper's "one class
// per table"). Immutable once built; safe for concurrent use.
type Classes struct {
	defs     map[string]*ClassDef
	order    []string
	byTable  map[catalog.Name][]*ClassDef
	profiles map[string][]txn.ClassRef
}

// AllClasses is the class name that stands for every class: a
// declaration "*" lets a transaction touch anything, and Derive returns it
// for a statement that may.
const AllClasses = "*"

// ErrClassConfig is returned by NewClasses for an inconsistent
// configuration and by ParseClasses / Profile for a bad declaration.
var ErrClassConfig = errors.New("conflict classes")

// ErrUndeclaredClass is wrapped by the *ClassError Check returns.
var ErrUndeclaredClass = errors.New("statement touches a conflict class the transaction did not declare")

// ClassError says which table and class a statement touched outside the
// transaction's declaration.
type ClassError struct {
	Table    catalog.Name // zero when the statement may touch everything
	Class    txn.ClassRef
	Declared []txn.ClassRef
	Reason   string // why everything, when Table is zero
}

func (e *ClassError) Error() string {
	decl := make([]string, len(e.Declared))
	for i, d := range e.Declared {
		decl[i] = d.String()
	}
	if e.Table == (catalog.Name{}) {
		return fmt.Sprintf("%v: the statement may touch every class (%s); declared: %s", ErrUndeclaredClass, e.Reason, strings.Join(decl, ", "))
	}
	return fmt.Sprintf("%v: table %s is in class %s; declared: %s", ErrUndeclaredClass, e.Table, e.Class, strings.Join(decl, ", "))
}

func (e *ClassError) Unwrap() error { return ErrUndeclaredClass }

// NewClasses checks and indexes class definitions and profiles (profile
// name → declaration, e.g. "neworder" → "district[w=1], stock").
func NewClasses(defs []ClassDef, profiles map[string]string) (*Classes, error) {
	c := &Classes{defs: map[string]*ClassDef{}, byTable: map[catalog.Name][]*ClassDef{}, profiles: map[string][]txn.ClassRef{}}
	for i := range defs {
		d := defs[i]
		if d.Name == "" || strings.ContainsAny(d.Name, "[],= \t") || strings.Contains(d.Name, ".") {
			return nil, fmt.Errorf("%w: bad class name %q (no dots, brackets, commas, '=' or spaces)", ErrClassConfig, d.Name)
		}
		if _, dup := c.defs[d.Name]; dup {
			return nil, fmt.Errorf("%w: class %q defined twice", ErrClassConfig, d.Name)
		}
		if len(d.Tables) == 0 {
			return nil, fmt.Errorf("%w: class %q has no tables", ErrClassConfig, d.Name)
		}
		for _, t := range d.Tables {
			if d.Label != "" && d.Columns[t] == "" {
				return nil, fmt.Errorf("%w: class %q is split by %q but table %s has no column for it", ErrClassConfig, d.Name, d.Label, t)
			}
			c.byTable[t] = append(c.byTable[t], &d)
		}
		c.defs[d.Name] = &d
		c.order = append(c.order, d.Name)
	}
	for name, decl := range profiles {
		refs, err := c.ParseClasses(decl)
		if err != nil {
			return nil, fmt.Errorf("profile %q: %w", name, err)
		}
		c.profiles[name] = refs
	}
	return c, nil
}

// ParseClasses parses a declaration as written in SET LOCAL
// ordo.conflict_classes or a BEGIN comment: a comma-separated list of
// "name", "name[label=value]" or "schema.table" (an implicit class).
func (c *Classes) ParseClasses(decl string) ([]txn.ClassRef, error) {
	var out []txn.ClassRef
	for _, part := range splitDecl(decl) {
		p := strings.TrimSpace(part)
		if p == "" {
			continue
		}
		if p == AllClasses {
			out = append(out, txn.ClassRef{Name: AllClasses})
			continue
		}
		name, rest, split := strings.Cut(p, "[")
		name = strings.TrimSpace(name)
		ref := txn.ClassRef{Name: name}
		def, ok := c.defs[name]
		if !ok && !strings.Contains(name, ".") {
			return nil, fmt.Errorf("%w: unknown conflict class %q", ErrClassConfig, name)
		}
		if split {
			if !strings.HasSuffix(rest, "]") {
				return nil, fmt.Errorf("%w: %q: missing ']'", ErrClassConfig, p)
			}
			label, value, ok2 := strings.Cut(strings.TrimSuffix(rest, "]"), "=")
			label, value = strings.TrimSpace(label), strings.Trim(strings.TrimSpace(value), `'"`)
			if !ok2 || label == "" || value == "" {
				return nil, fmt.Errorf("%w: %q: want %s[label=value]", ErrClassConfig, p, name)
			}
			if !ok || def.Label == "" {
				return nil, fmt.Errorf("%w: class %q is not split by a granule column", ErrClassConfig, name)
			}
			if label != def.Label {
				return nil, fmt.Errorf("%w: class %q is split by %q, not %q", ErrClassConfig, name, def.Label, label)
			}
			ref.Label, ref.Value = label, value
		}
		out = append(out, ref)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: empty declaration", ErrClassConfig)
	}
	return out, nil
}

func splitDecl(s string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			depth++
		case ']':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

// Profile returns the classes of a named transaction profile.
func (c *Classes) Profile(name string) ([]txn.ClassRef, error) {
	refs, ok := c.profiles[name]
	if !ok {
		return nil, fmt.Errorf("%w: unknown transaction profile %q", ErrClassConfig, name)
	}
	return refs, nil
}

// Use is one class a statement needs, with the table that needs it.
type Use struct {
	Table catalog.Name
	Class txn.ClassRef
}

// Derive returns the classes statement s needs given its footprint f (from
// Bind): for its written and locked tables, and, when withReads (the
// serializable protocols), its read tables. A class split by a granule
// column is narrowed to partitions when the keys fix the column. all is
// set (with a reason) when the statement may touch anything; uses is then
// the single class AllClasses.
func (c *Classes) Derive(cat *catalog.Catalog, s *Statement, f *Footprint, withReads bool) (uses []Use, all bool, reason string) {
	if f.WritesAll || (withReads && f.All) {
		return []Use{{Class: txn.ClassRef{Name: AllClasses}}}, true, s.Reason
	}
	seen := map[Use]bool{}
	add := func(u Use) {
		if !seen[u] {
			seen[u] = true
			uses = append(uses, u)
		}
	}
	locked := map[catalog.Name]bool{}
	for _, t := range s.Locks {
		locked[t] = true
	}
	keyed := map[catalog.Name]bool{}
	consider := func(k txn.Key) {
		t := catalog.Name{Schema: k.Schema, Name: k.Table}
		keyed[t] = true
		for _, u := range c.classesOf(cat, t, k) {
			add(u)
		}
	}
	for _, k := range f.Writes {
		consider(k)
	}
	for _, k := range f.Reads {
		if withReads || locked[catalog.Name{Schema: k.Schema, Name: k.Table}] {
			consider(k)
		}
	}
	tables := append(append([]catalog.Name{}, s.Writes...), s.Locks...)
	if withReads {
		tables = append(tables, s.Reads...)
	}
	for _, t := range tables {
		if !keyed[t] {
			for _, u := range c.classesOf(cat, t, txn.TableKey(t.Schema, t.Name)) {
				add(u)
			}
		}
	}
	sort.Slice(uses, func(i, j int) bool { return uses[i].Class.String() < uses[j].Class.String() })
	return uses, false, ""
}

// classesOf returns the classes key k of table t falls in.
func (c *Classes) classesOf(cat *catalog.Catalog, t catalog.Name, k txn.Key) []Use {
	defs := c.byTable[t]
	if len(defs) == 0 {
		return []Use{{Table: t, Class: txn.ClassRef{Name: t.String()}}}
	}
	out := make([]Use, 0, len(defs))
	for _, d := range defs {
		ref := txn.ClassRef{Name: d.Name}
		if d.Label != "" {
			if v, ok := granuleValue(cat, t, d.Columns[t], k); ok {
				ref.Label, ref.Value = d.Label, v
			}
		}
		out = append(out, Use{Table: t, Class: ref})
	}
	return out
}

// granuleValue extracts the value of column col from a granule or row key.
func granuleValue(cat *catalog.Catalog, t catalog.Name, col string, k txn.Key) (string, bool) {
	switch k.Level {
	case txn.LevelGranule:
		if k.Column == col {
			if vals, err := k.Values(); err == nil && len(vals) == 1 {
				return vals[0], true // decoded, as a row key's
			}
		}
	case txn.LevelRow:
		rel, ok := cat.Lookup(t)
		if !ok {
			return "", false
		}
		vals, err := k.Values()
		if err != nil || len(vals) != len(rel.PK) {
			return "", false
		}
		for i, pk := range rel.PK {
			if pk == col {
				return vals[i], true
			}
		}
	}
	return "", false
}

// Check verifies that statement s, with footprint f, stays within the
// declared classes. It returns a *ClassError (wrapping ErrUndeclaredClass)
// naming the first offending table and class.
func (c *Classes) Check(cat *catalog.Catalog, declared []txn.ClassRef, s *Statement, f *Footprint, withReads bool) error {
	uses, all, reason := c.Derive(cat, s, f, withReads)
	if all {
		if !covered(declared, uses[0].Class) {
			return &ClassError{Declared: declared, Class: uses[0].Class, Reason: reason}
		}
		return nil
	}
	for _, u := range uses {
		if !covered(declared, u.Class) {
			return &ClassError{Table: u.Table, Class: u.Class, Declared: declared}
		}
	}
	return nil
}

func covered(declared []txn.ClassRef, r txn.ClassRef) bool {
	for _, d := range declared {
		if d.Name == AllClasses || d.Covers(r) {
			return true
		}
	}
	return false
}
