package session

import (
	"testing"

	"github.com/ordo-db/ordo/internal/analysis"
)

// TestDeclaredParameterTypes checks which types a Bind's parameters are
// taken to have: those the Parse of the statement PostgreSQL holds
// declared, and unknown whenever that statement is not surely the one
// the session saw parsed.
func TestDeclaredParameterTypes(t *testing.T) {
	const float8, int8 = 701, 20
	s := &session{declared: map[string]declaredTypes{}, sent: map[string]string{}}
	bind := func(name string) []uint32 {
		ps := s.declaredParams(name, []analysis.Param{{Value: []byte("1")}, {Value: []byte("2")}})
		return []uint32{ps[0].Declared, ps[1].Declared}
	}
	parse := func(name, sql string, oids ...uint32) {
		s.declare(name, sql, oids)
		s.sent[name] = sql
	}
	unknown := []uint32{analysis.TypeUnknown, analysis.TypeUnknown}
	check := func(what string, got, want []uint32) {
		t.Helper()
		if got[0] != want[0] || got[1] != want[1] {
			t.Errorf("%s: %v, want %v", what, got, want)
		}
	}

	parse("s1", "SELECT $1, $2", float8)
	check("declared float8, second left to PostgreSQL", bind("s1"), []uint32{float8, 0})
	check("a name never parsed", bind("s2"), unknown)

	// A second Parse of s1 with other types: PostgreSQL refuses it (the
	// name exists) unless the first one failed; which types stand is not
	// known.
	parse("s1", "SELECT $1, $2", int8, int8)
	check("s1 parsed again with other types", bind("s1"), unknown)

	// After a Close, a Parse declares anew.
	delete(s.declared, "s1")
	parse("s1", "SELECT $1, $2", int8, int8)
	check("s1 parsed after its Close", bind("s1"), []uint32{int8, int8})

	// PostgreSQL holds another text under the name than the one parsed.
	s.sent["s1"] = "SELECT $1 + 1, $2"
	check("another text held under s1", bind("s1"), unknown)

	// The unnamed statement is replaced by every Parse.
	parse("", "SELECT $1, $2", float8, float8)
	parse("", "SELECT $1, $2", int8)
	check("the unnamed statement parsed again", bind(""), []uint32{int8, 0})
}
