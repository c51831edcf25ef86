package session

import (
	"slices"
	"testing"

	"github.com/ordo-db/ordo/internal/catalog"
)

// TestPathTextReadsBackAsSet: the search path a SET's list items give,
// written as SHOW says it, reads back (catalog.SearchPath) as the schemas
// PostgreSQL looks in, which the session takes for the statements after
// the SET (schemas): a quoted name keeps its case, spaces and quotes, and
// "$user" names the user.
func TestPathTextReadsBackAsSet(t *testing.T) {
	for _, c := range []struct {
		items []string
		text  string
		path  []string
	}{
		{[]string{"t1", "public"}, "t1, public", []string{"t1", "public"}},
		{[]string{"$user", "public"}, `"$user", public`, []string{"alice", "public"}},
		{[]string{"My Schema", `a"b`, "x$1"}, `"My Schema", "a""b", x$1`, []string{"My Schema", `a"b`, "x$1"}},
		{[]string{"Upper", "1st"}, `"Upper", "1st"`, []string{"Upper", "1st"}},
	} {
		text := pathText(c.items)
		if text != c.text {
			t.Errorf("%q: text %s, want %s", c.items, text, c.text)
		}
		if got := catalog.SearchPath(text, "alice"); !slices.Equal(got, c.path) {
			t.Errorf("%q: reads back as %q, want %q", c.items, got, c.path)
		}
		if got := (&session{user: "alice"}).schemas(c.items); !slices.Equal(got, c.path) {
			t.Errorf("%q: schemas %q, want %q", c.items, got, c.path)
		}
	}
}
