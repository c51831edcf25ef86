package txn

import (
	"errors"
	"fmt"
	"testing"
)

func TestGIDRoundTrip(t *testing.T) {
	g := NewGID(7, 123456789)
	if g != "ordo_7_123456789" {
		t.Fatalf("NewGID = %q", g)
	}
	n, c, err := ParseGID(string(g))
	if err != nil || n != 7 || c != 123456789 {
		t.Fatalf("ParseGID = %d %d %v", n, c, err)
	}
	for _, bad := range []string{"", "x", "ordo_", "ordo_1", "ordo_a_1", "ordo_01_2", "ordo_1_2_3", "ordo_99999999999_1"} {
		if _, _, err := ParseGID(bad); !errors.Is(err, ErrBadGID) {
			t.Errorf("ParseGID(%q) err = %v, want ErrBadGID", bad, err)
		}
	}
}

func TestEncodeValues(t *testing.T) {
	cases := []struct {
		in   []string
		want string
	}{
		{[]string{"1"}, "1"},
		{[]string{"1", "2"}, "1,2"},
		{[]string{"a b"}, `"a b"`},
		{[]string{""}, `""`},
		{[]string{`x"y\z`, "3"}, `"x\"y\\z",3`},
		{[]string{"1,2"}, `"1,2"`},
		{[]string{"-5", "2024-01-02", "é"}, `-5,2024-01-02,"é"`},
	}
	for _, c := range cases {
		got := EncodeValues(c.in...)
		if got != c.want {
			t.Errorf("EncodeValues(%q) = %q, want %q", c.in, got, c.want)
			continue
		}
		back, err := DecodeValues(got)
		if err != nil || len(back) != len(c.in) {
			t.Fatalf("DecodeValues(%q) = %q, %v", got, back, err)
		}
		for i := range back {
			if back[i] != c.in[i] {
				t.Errorf("round trip %q: got %q", c.in, back)
			}
		}
	}
	for _, bad := range []string{`"abc`, `a b`, `1,,2`, `"a"b`} {
		if _, err := DecodeValues(bad); !errors.Is(err, ErrBadValues) {
			t.Errorf("DecodeValues(%q) err = %v", bad, err)
		}
	}
}

func FuzzEncodeValues(f *testing.F) {
	f.Add("a", "b c")
	f.Add(`"`, "")
	f.Fuzz(func(t *testing.T, a, b string) {
		enc := EncodeValues(a, b)
		dec, err := DecodeValues(enc)
		if err != nil || len(dec) != 2 || dec[0] != a || dec[1] != b {
			t.Fatalf("round trip (%q,%q) -> %q -> %q, %v", a, b, enc, dec, err)
		}
	})
}

func TestKeyString(t *testing.T) {
	cases := map[Key]string{
		TableKey("public", "t"):                        "public.t",
		GranuleKey("tpcc", "district", "d_w_id", "1"):  "tpcc.district@d_w_id=1",
		RowKey("tpcc", "district", "1", "7"):           "tpcc.district(1,7)",
		UniqueKey("public", "u", "u_email_key", "a@b"): `public.u#u_email_key("a@b")`,
	}
	for k, want := range cases {
		if k.String() != want {
			t.Errorf("%#v.String() = %q, want %q", k, k.String(), want)
		}
	}
	a, b := RowKey("s", "t", "1"), RowKey("s", "t", fmt.Sprint(1))
	if a != b || a == RowKey("s", "t", "1", "") {
		t.Error("row keys must compare by value")
	}
}

// TestConflicts checks the whole table of DESIGN.md, both protocols.
func TestConflicts(t *testing.T) {
	type row struct {
		t         Mode
		x, ix, r  bool
		xsi, ixsi bool
	}
	rows := []row{
		{t: X, x: true, ix: true, r: true, xsi: true, ixsi: true},
		{t: IX, x: true, xsi: true},
		{t: R, x: true, xsi: true},
		{t: S, x: true, ix: true},
	}
	for _, rw := range rows {
		if got := Conflicts(rw.t, X, true); got != rw.x {
			t.Errorf("%v vs X (dbsm) = %v", rw.t, got)
		}
		if got := Conflicts(rw.t, IX, true); got != rw.ix {
			t.Errorf("%v vs IX (dbsm) = %v", rw.t, got)
		}
		if got := Conflicts(rw.t, R, true); got != rw.r {
			t.Errorf("%v vs R (dbsm) = %v", rw.t, got)
		}
		if got := Conflicts(rw.t, X, false); got != rw.xsi {
			t.Errorf("%v vs X (si) = %v", rw.t, got)
		}
		if got := Conflicts(rw.t, IX, false); got != rw.ixsi {
			t.Errorf("%v vs IX (si) = %v", rw.t, got)
		}
		if Conflicts(rw.t, S, true) {
			t.Errorf("S is never recorded, so never conflicts as U's mode")
		}
	}
	if (S|X).String() != "S|X" || Mode(0).String() != "-" {
		t.Error("Mode.String")
	}
}

func TestReadSetEscalation(t *testing.T) {
	r := NewReadSet(3)
	r.Add(RowKey("s", "a", "1"))
	r.Add(RowKey("s", "a", "2"))
	r.Add(RowKey("s", "b", "1"))
	if r.Len() != 3 || r.Covers(RowKey("s", "a", "3")) {
		t.Fatalf("before limit: %v", r.Keys())
	}
	r.Add(GranuleKey("s", "c", "w", "1"))
	if r.Len() != 3 || !r.Covers(RowKey("s", "a", "99")) || !r.Covers(TableKey("s", "c")) {
		t.Fatalf("after limit: %v", r.Keys())
	}
	r.Add(RowKey("s", "a", "5"))
	if r.Len() != 3 {
		t.Fatalf("row key under a table key must not be added: %v", r.Keys())
	}
	r.Add(TableKey("s", "d"))
	if !r.Covers(RowKey("s", "d", "1")) || r.Covers(RowKey("s", "e", "1")) {
		t.Fatal("Covers")
	}
	r.AddAll()
	if !r.All() || !r.Covers(RowKey("x", "y", "z")) {
		t.Fatal("AddAll")
	}
}

func TestClassRef(t *testing.T) {
	whole := ClassRef{Name: "district"}
	w1 := ClassRef{Name: "district", Label: "w", Value: "1"}
	w2 := ClassRef{Name: "district", Label: "w", Value: "2"}
	if !whole.Covers(w1) || !w1.Covers(w1) || w1.Covers(w2) || w1.Covers(whole) || whole.Covers(ClassRef{Name: "x"}) {
		t.Fatal("Covers")
	}
	if w1.String() != "district[w=1]" || whole.String() != "district" {
		t.Fatal("String")
	}
}

func TestKeySetEscalate(t *testing.T) {
	var s KeySet
	s.Add(TableKey("s", "a"), IX)
	for _, id := range []string{"1", "2", "3", "4"} {
		s.Add(RowKey("s", "a", id), X)
	}
	s.Add(UniqueKey("s", "a", "a_email_key", "x@y"), X)
	s.Add(RowKey("s", "p", "7"), R)
	s.Add(RowKey("s", "a", "9"), S)
	s.Add(RowKey("s", "b", "1"), X|S)
	s.Add(RowKey("s", "b", "2"), S)
	s.Add(RowKey("s", "b", "3"), S)
	s.Add(RowKey("s", "b", "4"), S)
	if got := s.Escalate(0); got != nil || s.Len() != 12 {
		t.Fatalf("limit 0 must not escalate: %v", got)
	}
	got := s.Escalate(2)
	if len(got) != 1 || got[0] != TableKey("s", "a") {
		t.Fatalf("escalated %v, want s.a only (s.b has one write and three reads)", got)
	}
	want := []KeyMode{
		{TableKey("s", "a"), IX | X},
		{RowKey("s", "b", "1"), X | S},
		{RowKey("s", "b", "2"), S},
		{RowKey("s", "b", "3"), S},
		{RowKey("s", "b", "4"), S},
		{RowKey("s", "p", "7"), R},
	}
	if g := s.Sorted(); fmt.Sprint(g) != fmt.Sprint(want) {
		t.Fatalf("after escalation:\n got %v\nwant %v", g, want)
	}
}

func TestKeySetEscalateManyTables(t *testing.T) {
	var s KeySet
	for table := range 12 {
		for id := range 2 {
			s.Add(RowKey("s", fmt.Sprint("t", table), fmt.Sprint(id)), X)
		}
	}
	s.Add(RowKey("s", "r", "1"), S)
	// 24 write keys in 12 tables of 2: none over 2, but over 10*2 together.
	if got := s.Escalate(2); len(got) != 12 {
		t.Fatalf("escalated %v, want all 12 tables", got)
	}
	if s.Len() != 13 || s.Mode(TableKey("s", "t3")) != X || s.Mode(RowKey("s", "r", "1")) != S {
		t.Fatalf("after escalation: %v", s.Sorted())
	}
}
