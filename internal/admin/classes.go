package admin

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"

	"github.com/ordo-db/ordo/internal/analysis"
	"github.com/ordo-db/ordo/internal/classes"
	"github.com/ordo-db/ordo/internal/replica"
	ordov1 "github.com/ordo-db/ordo/pkg/api/ordo/v1"
)

// Class is one conflict class: a named set of tables ("schema.table"),
// optionally split by a granule column per table; label names the split
// in declarations (district[w=3]).
type Class struct {
	Name    string            `json:"name" yaml:"name"`
	Tables  []string          `json:"tables" yaml:"tables"`
	Label   string            `json:"label,omitempty" yaml:"label,omitempty"`
	Columns map[string]string `json:"columns,omitempty" yaml:"columns,omitempty"` // table → granule column
}

// Profile is a named transaction profile: the classes a kind of
// transaction declares, with {param} placeholders.
type Profile struct {
	Name    string `json:"name" yaml:"name"`
	Classes string `json:"classes" yaml:"classes"`
}

// Classes is the conflict-class configuration in force on a node (GET
// /v1/classes), and the answer to a change.
type Classes struct {
	NodeID uint32 `json:"node_id"`
	// Seqno is the entry that made it (0: never configured).
	Seqno    uint64    `json:"seqno"`
	Classes  []Class   `json:"classes"`
	Profiles []Profile `json:"profiles"`
	// CatchAll is what a transaction that declares no classes takes
	// ("*": every class, it runs alone).
	CatchAll string `json:"catch_all"`
}

// ClassesChange is a change of the conflict classes (POST /v1/classes):
// classes and profiles upserted by name, others deleted by name. It goes
// through the total order, so every node switches at the same seqno.
type ClassesChange struct {
	Classes        []Class   `json:"classes,omitempty" yaml:"classes,omitempty"`
	Profiles       []Profile `json:"profiles,omitempty" yaml:"profiles,omitempty"`
	DeleteClasses  []string  `json:"delete_classes,omitempty" yaml:"delete_classes,omitempty"`
	DeleteProfiles []string  `json:"delete_profiles,omitempty" yaml:"delete_profiles,omitempty"`
	// CatchAll, if set, replaces the catch-all (a declaration; "*" is the
	// default).
	CatchAll string `json:"catch_all,omitempty" yaml:"catch_all,omitempty"`
}

func classesOf(node uint32, cfg *ordov1.ClassConfig) Classes {
	out := Classes{NodeID: node, Seqno: cfg.GetSeqno(), Classes: []Class{}, Profiles: []Profile{}, CatchAll: cfg.GetCatchAll()}
	if out.CatchAll == "" {
		out.CatchAll = analysis.AllClasses
	}
	for _, c := range cfg.Classes {
		cl := Class{Name: c.Name, Tables: slices.Clone(c.Tables), Label: c.Label}
		for _, tc := range c.Columns {
			if cl.Columns == nil {
				cl.Columns = map[string]string{}
			}
			cl.Columns[tc.Table] = tc.Column
		}
		out.Classes = append(out.Classes, cl)
	}
	for _, p := range cfg.Profiles {
		out.Profiles = append(out.Profiles, Profile{Name: p.Name, Classes: p.Classes})
	}
	return out
}

func (ch *ClassesChange) entry() *ordov1.ClassesEntry {
	e := &ordov1.ClassesEntry{DeleteClasses: ch.DeleteClasses, DeleteProfiles: ch.DeleteProfiles, CatchAll: ch.CatchAll}
	for _, c := range ch.Classes {
		cd := &ordov1.ClassDef{Name: c.Name, Tables: c.Tables, Label: c.Label}
		tables := make([]string, 0, len(c.Columns))
		for t := range c.Columns {
			tables = append(tables, t)
		}
		slices.Sort(tables) // the same entry whatever the map's order
		for _, t := range tables {
			cd.Columns = append(cd.Columns, &ordov1.TableColumn{Table: t, Column: c.Columns[t]})
		}
		e.Classes = append(e.Classes, cd)
	}
	for _, p := range ch.Profiles {
		e.Profiles = append(e.Profiles, &ordov1.ProfileDef{Name: p.Name, Classes: p.Classes})
	}
	return e
}

func (s *Server) classes(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		writeJSON(w, http.StatusOK, classesOf(s.cfg.NodeID, s.cfg.Replica.Classes()))
		return
	}
	var ch ClassesChange
	dec := json.NewDecoder(io.LimitReader(r.Body, 4<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ch); err != nil {
		writeJSON(w, http.StatusBadRequest, ErrorBody{Error: "classes: " + err.Error()})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), schemaCheckTimeout)
	defer cancel()
	cfg, err := s.cfg.Replica.ChangeClasses(ctx, ch.entry())
	if err != nil {
		code := http.StatusServiceUnavailable
		if errors.Is(err, replica.ErrClassesRefused) || errors.Is(err, classes.ErrInvalid) {
			code = http.StatusBadRequest
		}
		s.log.Warn("admin: change of the conflict classes not made", "by", caller(r), "err", err)
		writeJSON(w, code, ErrorBody{Error: "classes: " + err.Error()})
		return
	}
	s.log.Info("admin: conflict classes changed", "by", caller(r), "seqno", cfg.Seqno)
	writeJSON(w, http.StatusOK, classesOf(s.cfg.NodeID, cfg))
}
