package catalog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
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

// TestCurrentWaitsForTheRefreshAfterInvalidate: after a schema change
// commits, no statement may be analyzed against the catalog from before
// it; a failed refresh ends the wait too.
func TestCurrentWaitsForTheRefreshAfterInvalidate(t *testing.T) {
	gate := make(chan error)
	tables := 0
	c := NewCache(func(ctx context.Context) (Description, error) {
		if err := <-gate; err != nil {
			return Description{}, err
		}
		tables++
		var d Description
		for i := range tables {
			d.Tables = append(d.Tables, TableDesc{Schema: "public", Name: fmt.Sprintf("t%d", i)})
		}
		return d, nil
	})
	refresh := func() <-chan error {
		done := make(chan error, 1)
		go func() {
			_, err := c.Refresh(context.Background())
			done <- err
		}()
		return done
	}
	done := refresh()
	gate <- nil
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	v1 := c.Current()
	if c.Current() != v1 {
		t.Fatal("Current changed without a refresh")
	}

	c.Invalidate()
	got := make(chan *Catalog)
	go func() { got <- c.Current() }()
	select {
	case <-got:
		t.Fatal("Current did not wait for the refresh after Invalidate")
	case <-time.After(50 * time.Millisecond):
	}
	done = refresh()
	gate <- nil
	if v := <-got; v == v1 {
		t.Fatal("Current returned the catalog from before the refresh")
	}
	<-done
	if v := c.Current(); v.Version() <= v1.Version() {
		t.Fatalf("version %d after the refresh, %d before", v.Version(), v1.Version())
	}

	c.Invalidate()
	go func() { got <- c.Current() }()
	done = refresh()
	gate <- errors.New("connection lost")
	select {
	case v := <-got:
		if v == nil {
			t.Fatal("no catalog after a failed refresh")
		}
	case <-time.After(StaleWait / 2):
		t.Fatal("a failed refresh did not end the wait")
	}
	if err := <-done; err == nil {
		t.Fatal("the refresh did not fail")
	}
}

// TestFunctionsOfOneNameInSeveralSchemas: PostgreSQL picks among functions
// of one name on the search path by their arguments' types, so an
// unqualified call is as volatile and as likely to read data as the worst
// of them (a review found upper(5) taken for pg_catalog.upper while
// PostgreSQL ran public.upper(int), which reads a table).
func TestFunctionsOfOneNameInSeveralSchemas(t *testing.T) {
	c, err := New(Description{Functions: []FuncDesc{
		{Schema: "pg_catalog", Name: "upper", Volatility: "immutable"},
		{Schema: "public", Name: "upper", Volatility: "volatile", ReadsData: true},
		{Schema: "other", Name: "lower", Volatility: "stable", ReadsData: true},
		{Schema: "pg_catalog", Name: "lower", Volatility: "immutable"},
	}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	f, ok := c.Func([]string{"public"}, "", "upper")
	if !ok || f.Name != (Name{"pg_catalog", "upper"}) || f.Volatility != Volatile || !f.ReadsData {
		t.Errorf("upper on public's path: %+v", f)
	}
	if f, _ := c.Func([]string{"public"}, "pg_catalog", "upper"); f.Volatility != Immutable || f.ReadsData {
		t.Errorf("pg_catalog.upper named: %+v", f)
	}
	if f, _ := c.Func([]string{"public"}, "", "lower"); f.Volatility != Immutable || f.ReadsData {
		t.Errorf("lower: other is not on the path: %+v", f)
	}
	if f, _ := c.Func([]string{"other"}, "", "lower"); f.Volatility != Stable || !f.ReadsData {
		t.Errorf("lower on other's path: %+v", f)
	}
	if g, _ := c.Func([]string{"public"}, "", "upper"); g.Volatility != Volatile || c.funcs[Name{"pg_catalog", "upper"}].Volatility != Immutable {
		t.Error("the catalog's own entries are not changed by a lookup")
	}
}
