package catalog

import (
	"errors"
	"slices"
	"testing"
)

func TestNewValidates(t *testing.T) {
	base := func() Description {
		return Description{Tables: []TableDesc{{Schema: "s", Name: "t", Columns: []Column{{"id", "int4"}}, PK: []string{"id"}}}}
	}
	d := base()
	d.Tables[0].PK = []string{"nope"}
	if _, err := New(d, 1); !errors.Is(err, ErrInvalid) {
		t.Errorf("PK not a column: %v", err)
	}
	d = base()
	d.Views = []ViewDesc{{Schema: "s", Name: "a", Uses: []string{"s.b"}}, {Schema: "s", Name: "b", Uses: []string{"s.a"}}}
	if _, err := New(d, 1); !errors.Is(err, ErrInvalid) {
		t.Errorf("view cycle: %v", err)
	}
	d = base()
	d.Functions = []FuncDesc{{Schema: "s", Name: "f", Volatility: "sometimes"}}
	if _, err := New(d, 1); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad volatility: %v", err)
	}
	d = base()
	d.Views = []ViewDesc{{Schema: "s", Name: "v", Uses: []string{"s.t", "s.gone"}}}
	d.Functions = []FuncDesc{{Schema: "s", Name: "f", Volatility: "immutable"}, {Schema: "s", Name: "f", Volatility: "volatile", ReadsData: true}}
	c, err := New(d, 7)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := c.Lookup(Name{"s", "v"}); !v.Opaque || !slices.Equal(v.Bases, []Name{{"s", "t"}}) {
		t.Errorf("a view over an unknown relation must be opaque: %+v", v)
	}
	if f, _ := c.Func(nil, "s", "f"); f.Volatility != Volatile || !f.ReadsData {
		t.Errorf("overloads combine to the worst: %+v", f)
	}
	if c.Version() != 7 || c.Current() != c {
		t.Error("Version/Current")
	}
}

func TestSearchPath(t *testing.T) {
	cases := map[string][]string{
		`"$user", public`:         {"bob", "public"},
		`App, "My Schema",public`: {"app", "My Schema", "public"},
		``:                        nil,
		`"a""b"`:                  {`a"b`},
		` pg_catalog , s1 `:       {"pg_catalog", "s1"},
	}
	for in, want := range cases {
		if got := SearchPath(in, "bob"); !slices.Equal(got, want) {
			t.Errorf("SearchPath(%q) = %q, want %q", in, got, want)
		}
	}
	if DefaultSchema([]string{"pg_catalog", "x"}) != "x" || DefaultSchema(nil) != "" {
		t.Error("DefaultSchema")
	}
}
