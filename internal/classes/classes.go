// Package classes is the cluster's conflict-class configuration (DESIGN.md
// "Conflict classes"): the classes and transaction profiles in force, the
// change a ClassesEntry makes to them, and the check every node runs on
// the result. Class definitions are cluster configuration: changed only
// through the total order, so every node switches at the same seqno.
//
// Apply is a pure function of the configuration in force and the entry:
// every node reaches the same configuration, or refuses the same change.
// This package must never do I/O.
package classes

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/ordo-db/ordo/internal/analysis"
	"github.com/ordo-db/ordo/internal/catalog"
	"github.com/ordo-db/ordo/internal/txn"
	ordov1 "github.com/ordo-db/ordo/pkg/api/ordo/v1"
)

// ErrInvalid is returned by Apply and Build for a configuration that does
// not check out (a bad name, a table in no schema, a split class without
// a column for one of its tables, a profile naming an unknown class), and
// by Profile for a bad use of a profile.
var ErrInvalid = errors.New("conflict classes")

// Apply returns the configuration cfg (nil: none yet) becomes with the
// change e, delivered at seqno, after checking it; cfg is not modified.
func Apply(cfg *ordov1.ClassConfig, e *ordov1.ClassesEntry, seqno uint64) (*ordov1.ClassConfig, error) {
	out := &ordov1.ClassConfig{Seqno: seqno}
	if cfg != nil {
		out = proto.Clone(cfg).(*ordov1.ClassConfig)
		out.Seqno = seqno
	}
	for _, name := range e.DeleteClasses {
		i := slices.IndexFunc(out.Classes, func(c *ordov1.ClassDef) bool { return c.Name == name })
		if i < 0 {
			return nil, fmt.Errorf("%w: no class %q to delete", ErrInvalid, name)
		}
		out.Classes = slices.Delete(out.Classes, i, i+1)
	}
	for _, name := range e.DeleteProfiles {
		i := slices.IndexFunc(out.Profiles, func(p *ordov1.ProfileDef) bool { return p.Name == name })
		if i < 0 {
			return nil, fmt.Errorf("%w: no profile %q to delete", ErrInvalid, name)
		}
		out.Profiles = slices.Delete(out.Profiles, i, i+1)
	}
	for _, c := range e.Classes {
		c = proto.Clone(c).(*ordov1.ClassDef)
		if i := slices.IndexFunc(out.Classes, func(o *ordov1.ClassDef) bool { return o.Name == c.Name }); i >= 0 {
			out.Classes[i] = c
		} else {
			out.Classes = append(out.Classes, c)
		}
	}
	for _, p := range e.Profiles {
		p = proto.Clone(p).(*ordov1.ProfileDef)
		if i := slices.IndexFunc(out.Profiles, func(o *ordov1.ProfileDef) bool { return o.Name == p.Name }); i >= 0 {
			out.Profiles[i] = p
		} else {
			out.Profiles = append(out.Profiles, p)
		}
	}
	if e.CatchAll != "" {
		out.CatchAll = strings.TrimSpace(e.CatchAll)
		if out.CatchAll == analysis.AllClasses {
			out.CatchAll = "" // the default
		}
	}
	slices.SortFunc(out.Classes, func(a, b *ordov1.ClassDef) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(out.Profiles, func(a, b *ordov1.ProfileDef) int { return strings.Compare(a.Name, b.Name) })
	if _, err := Build(out); err != nil {
		return nil, err
	}
	if !maps.Equal(Granules(cfg), Granules(out)) {
		// Every change is kept (8 bytes each; they are rare): a restarted
		// node replays entries from before the latest one and must find
		// the epoch each was delivered under.
		out.GranuleChanges = append(out.GranuleChanges, seqno)
	}
	return out, nil
}

// Granules returns the granule column of each table ("schema.table") of
// the split classes of cfg: under dbsm and pgr, reads and writes that fix
// it take granule keys (the warehouse of TPC-C) rather than whole-table
// keys. A table split by two classes on different columns has none.
func Granules(cfg *ordov1.ClassConfig) map[string]string {
	out := map[string]string{}
	clash := map[string]bool{}
	for _, c := range cfg.GetClasses() {
		if c.Label == "" {
			continue
		}
		for _, tc := range c.Columns {
			if col, ok := out[tc.Table]; ok && col != tc.Column {
				clash[tc.Table] = true
			}
			out[tc.Table] = tc.Column
		}
	}
	for t := range clash {
		delete(out, t)
	}
	return out
}

// GranuleSeqnoAt returns the granule epoch in force at seqno under cfg:
// the seqno of the latest change of the granule columns at or before it
// (0: none since the cluster began). Every node computes it alike from the
// configuration, restarted or not.
func GranuleSeqnoAt(cfg *ordov1.ClassConfig, seqno uint64) uint64 {
	var at uint64
	for _, c := range cfg.GetGranuleChanges() {
		if c <= seqno {
			at = c
		}
	}
	return at
}

// Build checks cfg and returns it as the analyzer uses it (nil cfg: no
// classes, every table a class of its own).
func Build(cfg *ordov1.ClassConfig) (*analysis.Classes, error) {
	var defs []analysis.ClassDef
	profiles := map[string]string{}
	if cfg != nil {
		for _, c := range cfg.Classes {
			d := analysis.ClassDef{Name: c.Name, Label: c.Label}
			cols := map[string]string{}
			for _, tc := range c.Columns {
				cols[tc.Table] = tc.Column
			}
			for _, t := range c.Tables {
				n, err := tableName(t)
				if err != nil {
					return nil, fmt.Errorf("%w: class %q: %w", ErrInvalid, c.Name, err)
				}
				d.Tables = append(d.Tables, n)
				if c.Label != "" {
					if d.Columns == nil {
						d.Columns = map[catalog.Name]string{}
					}
					d.Columns[n] = cols[t]
				}
			}
			for t := range cols {
				if !slices.Contains(c.Tables, t) {
					return nil, fmt.Errorf("%w: class %q has a column for %s, which is not one of its tables", ErrInvalid, c.Name, t)
				}
			}
			if c.Label == "" && len(cols) > 0 {
				return nil, fmt.Errorf("%w: class %q has granule columns but no label to name its split", ErrInvalid, c.Name)
			}
			defs = append(defs, d)
		}
		for _, p := range cfg.Profiles {
			if !profileName.MatchString(p.Name) {
				return nil, fmt.Errorf("%w: bad profile name %q (letters, digits and _)", ErrInvalid, p.Name)
			}
			profiles[p.Name] = p.Classes
		}
	}
	cs, err := analysis.NewClasses(defs, profiles)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if _, err := CatchAll(cfg, cs); err != nil {
		return nil, err
	}
	return cs, nil
}

// CatchAll returns the classes of a transaction that declares none under
// cfg (built as cs): the configured catch-all, by default every class
// ("*": it runs alone).
func CatchAll(cfg *ordov1.ClassConfig, cs *analysis.Classes) ([]txn.ClassRef, error) {
	decl := cfg.GetCatchAll()
	if decl == "" {
		return []txn.ClassRef{{Name: analysis.AllClasses}}, nil
	}
	refs, err := cs.ParseClasses(decl)
	if err != nil {
		return nil, fmt.Errorf("%w: catch_all %q: %w", ErrInvalid, decl, err)
	}
	if len(refs) == 0 {
		return nil, fmt.Errorf("%w: catch_all %q names no class", ErrInvalid, decl)
	}
	return refs, nil
}

var profileName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// tableName parses "schema.table".
func tableName(s string) (catalog.Name, error) {
	schema, table, ok := strings.Cut(s, ".")
	if !ok || schema == "" || table == "" || strings.Contains(table, ".") {
		return catalog.Name{}, fmt.Errorf("table %q: want schema.table", s)
	}
	return catalog.Name{Schema: schema, Name: table}, nil
}

// Profile returns the classes a use of a profile declares: "name" or
// "name(param=value, ...)", each {param} of the profile's declaration
// replaced by its value (every placeholder must be given, and only those).
func Profile(cfg *ordov1.ClassConfig, cs *analysis.Classes, use string) ([]txn.ClassRef, error) {
	use = strings.TrimSpace(use)
	name, args, hasArgs := strings.Cut(use, "(")
	name = strings.TrimSpace(name)
	var decl string
	found := false
	if cfg != nil {
		for _, p := range cfg.Profiles {
			if p.Name == name {
				decl, found = p.Classes, true
			}
		}
	}
	if !found {
		return nil, fmt.Errorf("%w: unknown transaction profile %q", ErrInvalid, name)
	}
	params := map[string]string{}
	if hasArgs {
		if !strings.HasSuffix(args, ")") {
			return nil, fmt.Errorf("%w: profile %q: missing ')'", ErrInvalid, use)
		}
		for _, a := range strings.Split(strings.TrimSuffix(args, ")"), ",") {
			if strings.TrimSpace(a) == "" {
				continue
			}
			k, v, ok := strings.Cut(a, "=")
			k, v = strings.TrimSpace(k), strings.Trim(strings.TrimSpace(v), `'"`)
			if !ok || k == "" || v == "" {
				return nil, fmt.Errorf("%w: profile %q: want name(param=value, ...)", ErrInvalid, use)
			}
			params[k] = v
		}
	}
	var missing []string
	used := map[string]bool{}
	decl = placeholder.ReplaceAllStringFunc(decl, func(m string) string {
		k := m[1 : len(m)-1]
		used[k] = true
		v, ok := params[k]
		if !ok {
			missing = append(missing, k)
		}
		return v
	})
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: profile %q needs a value for %s", ErrInvalid, name, strings.Join(missing, ", "))
	}
	for k := range params {
		if !used[k] {
			return nil, fmt.Errorf("%w: profile %q has no parameter %q", ErrInvalid, name, k)
		}
	}
	refs, err := cs.ParseClasses(decl)
	if err != nil {
		return nil, fmt.Errorf("%w: profile %q: %w", ErrInvalid, name, err)
	}
	return refs, nil
}

var placeholder = regexp.MustCompile(`\{[A-Za-z_][A-Za-z0-9_]*\}`)

// Set is a configuration in force with its checked form, as sessions use
// it.
type Set struct {
	Config  *ordov1.ClassConfig
	Classes *analysis.Classes
}
