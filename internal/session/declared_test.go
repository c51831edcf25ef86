package session

import (
	"slices"
	"testing"

	"github.com/ordo-db/ordo/internal/analysis"
	"github.com/ordo-db/ordo/internal/wire"
)

// heldTypes is a client backend whose wire layer reports the statements
// PostgreSQL holds, with their declared types (Backend.Declared).
type heldTypes struct {
	wire.Backend
	held map[string]declaredTypes
}

func (h heldTypes) Declared(name string) (string, []uint32, bool) {
	d, ok := h.held[name]
	return d.sql, d.oids, ok
}

// TestDeclaredParameterTypes checks which types a Bind's parameters are
// taken to have: those of a Parse of the name earlier in the unit (the
// Bind runs only if it succeeded), else those of the statement
// PostgreSQL holds, and unknown whenever that is not surely the
// statement the session analyzed.
func TestDeclaredParameterTypes(t *testing.T) {
	const float8, int8 = 701, 20
	const q = "SELECT $1, $2"
	be := heldTypes{held: map[string]declaredTypes{}}
	s := &session{be: be, declared: map[string]declaredTypes{}, sent: map[string]string{}}
	bind := func(name string) []uint32 {
		ps := s.declaredParams(name, []analysis.Param{{Value: []byte("1")}, {Value: []byte("2")}})
		return []uint32{ps[0].Declared, ps[1].Declared}
	}
	parse := func(name, sql string, oids ...uint32) {
		s.declare(name, sql, oids)
		s.sent[name] = sql
	}
	newUnit := func() { clear(s.declared) }
	unknown := []uint32{analysis.TypeUnknown, analysis.TypeUnknown}
	check := func(what string, got, want []uint32) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Errorf("%s: %v, want %v", what, got, want)
		}
	}

	parse("s1", q, float8)
	check("parsed in the unit: declared float8, second left to PostgreSQL", bind("s1"), []uint32{float8, 0})
	check("a name neither parsed nor held", bind("s2"), unknown)

	// The next unit: the Parse was accepted, so the wire layer holds it.
	be.held["s1"] = declaredTypes{sql: q, oids: []uint32{float8}}
	newUnit()
	check("held from an earlier unit", bind("s1"), []uint32{float8, 0})

	// The client parsed s1 again with other types, and PostgreSQL
	// refused it (the name exists) or skipped it: what it holds counts.
	parse("s1", q, int8, int8)
	newUnit()
	check("a later Parse refused or skipped", bind("s1"), []uint32{float8, 0})

	// Closed in the unit: a Bind after it fails; nothing is assumed.
	s.declared["s1"] = declaredTypes{unknown: true}
	check("closed in the unit", bind("s1"), unknown)
	newUnit()

	// PostgreSQL holds another text under the name than the one analyzed.
	s.sent["s1"] = "SELECT $1 + 1, $2"
	check("another text held under s1", bind("s1"), unknown)

	// The wire layer cannot tell (names read after SQL's PREPARE,
	// without their types).
	delete(be.held, "s1")
	s.sent["s1"] = q
	check("types not known to the wire layer", bind("s1"), unknown)

	// The unnamed statement is replaced by every Parse of the unit.
	parse("", q, float8, float8)
	parse("", q, int8)
	check("the unnamed statement parsed again", bind(""), []uint32{int8, 0})
	be.held[""] = declaredTypes{sql: q, oids: []uint32{float8, float8}}
	newUnit()
	check("the unnamed statement held", bind(""), []uint32{float8, float8})
}

func TestOIDArray(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []uint32
		ok   bool
	}{
		{"{}", []uint32{}, true},
		{"{23}", []uint32{23}, true},
		{"{20,701,0}", []uint32{20, 701, 0}, true},
		{"", nil, false},
		{"{23", nil, false},
		{"{a}", nil, false},
		{"{-1}", nil, false},
	} {
		got, ok := oidArray(c.in)
		if ok != c.ok || !slices.Equal(got, c.want) {
			t.Errorf("oidArray(%q) = %v, %v; want %v, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}
