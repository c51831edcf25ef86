package analysis

import (
	"errors"
	"sort"
	"strings"
	"testing"

	"github.com/ordo-db/ordo/internal/catalog"
	"github.com/ordo-db/ordo/internal/txn"
)

func pub(n string) catalog.Name { return catalog.Name{Schema: "public", Name: n} }

// tpccClasses is the paper's simple configuration: one class per table.
func tpccClasses(t *testing.T) *Classes {
	t.Helper()
	c, err := NewClasses([]ClassDef{
		{Name: "Warehouse", Tables: []catalog.Name{pub("warehouse")}},
		{Name: "District", Tables: []catalog.Name{pub("district")}},
		{Name: "Customer", Tables: []catalog.Name{pub("customer")}},
		{Name: "Item", Tables: []catalog.Name{pub("item")}},
		{Name: "Stock", Tables: []catalog.Name{pub("stock")}},
		{Name: "Orders", Tables: []catalog.Name{pub("orders")}},
		{Name: "OrderLine", Tables: []catalog.Name{pub("order_line")}},
		{Name: "NewOrder", Tables: []catalog.Name{pub("new_order")}},
		{Name: "History", Tables: []catalog.Name{pub("history")}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type tpccStmt struct {
	sql    string
	params []string
}

// The statements of the three TPC-C update transactions of Table 1, as a
// client sends them (TPC-C spec clauses 2.4.2, 2.5.2, 2.7.4; both the
// by-id and by-last-name customer paths of Payment).
var tpccTxns = map[string][]tpccStmt{
	"New Order": {
		{"SELECT w_tax FROM warehouse WHERE w_id = $1", []string{"1"}},
		{"SELECT c_discount, c_last, c_credit FROM customer WHERE c_w_id = $1 AND c_d_id = $2 AND c_id = $3", []string{"1", "2", "3"}},
		{"SELECT d_next_o_id, d_tax FROM district WHERE d_w_id = $1 AND d_id = $2 FOR UPDATE", []string{"1", "2"}},
		{"UPDATE district SET d_next_o_id = d_next_o_id + 1 WHERE d_w_id = $1 AND d_id = $2", []string{"1", "2"}},
		{"INSERT INTO orders (o_id, o_d_id, o_w_id, o_c_id, o_entry_d, o_ol_cnt, o_all_local) VALUES ($1, $2, $3, $4, now(), $5, $6)", []string{"3001", "2", "1", "3", "5", "1"}},
		{"INSERT INTO new_order (no_o_id, no_d_id, no_w_id) VALUES ($1, $2, $3)", []string{"3001", "2", "1"}},
		{"SELECT i_price, i_name, i_data FROM item WHERE i_id = $1", []string{"77"}},
		{"SELECT s_quantity, s_data, s_dist_02 FROM stock WHERE s_w_id = $1 AND s_i_id = $2 FOR UPDATE", []string{"1", "77"}},
		{"UPDATE stock SET s_quantity = $1, s_ytd = s_ytd + $2, s_order_cnt = s_order_cnt + 1 WHERE s_w_id = $3 AND s_i_id = $4", []string{"40", "5", "1", "77"}},
		{"INSERT INTO order_line (ol_o_id, ol_d_id, ol_w_id, ol_number, ol_i_id, ol_supply_w_id, ol_quantity, ol_amount, ol_dist_info) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)", []string{"3001", "2", "1", "1", "77", "1", "5", "12.50", "x"}},
	},
	"Payment": {
		{"UPDATE warehouse SET w_ytd = w_ytd + $1 WHERE w_id = $2", []string{"10.00", "1"}},
		{"SELECT w_street_1, w_street_2, w_city, w_state, w_zip, w_name FROM warehouse WHERE w_id = $1", []string{"1"}},
		{"UPDATE district SET d_ytd = d_ytd + $1 WHERE d_w_id = $2 AND d_id = $3", []string{"10.00", "1", "2"}},
		{"SELECT d_street_1, d_street_2, d_city, d_state, d_zip, d_name FROM district WHERE d_w_id = $1 AND d_id = $2", []string{"1", "2"}},
		{"SELECT count(c_id) FROM customer WHERE c_w_id = $1 AND c_d_id = $2 AND c_last = $3", []string{"1", "2", "BAR"}},
		{"SELECT c_first, c_middle, c_id, c_balance FROM customer WHERE c_w_id = $1 AND c_d_id = $2 AND c_last = $3 ORDER BY c_first", []string{"1", "2", "BAR"}},
		{"SELECT c_first, c_middle, c_last, c_balance FROM customer WHERE c_w_id = $1 AND c_d_id = $2 AND c_id = $3 FOR UPDATE", []string{"1", "2", "3"}},
		{"SELECT c_data FROM customer WHERE c_w_id = $1 AND c_d_id = $2 AND c_id = $3", []string{"1", "2", "3"}},
		{"UPDATE customer SET c_balance = $1, c_ytd_payment = c_ytd_payment + $2, c_payment_cnt = c_payment_cnt + 1, c_data = $3 WHERE c_w_id = $4 AND c_d_id = $5 AND c_id = $6", []string{"-10.00", "10.00", "d", "1", "2", "3"}},
		{"INSERT INTO history (h_c_d_id, h_c_w_id, h_c_id, h_d_id, h_w_id, h_date, h_amount, h_data) VALUES ($1, $2, $3, $4, $5, now(), $6, $7)", []string{"2", "1", "3", "2", "1", "10.00", "w d"}},
	},
	"Delivery": {
		{"SELECT no_o_id FROM new_order WHERE no_w_id = $1 AND no_d_id = $2 ORDER BY no_o_id ASC LIMIT 1 FOR UPDATE", []string{"1", "2"}},
		{"DELETE FROM new_order WHERE no_w_id = $1 AND no_d_id = $2 AND no_o_id = $3", []string{"1", "2", "3001"}},
		{"SELECT o_c_id FROM orders WHERE o_w_id = $1 AND o_d_id = $2 AND o_id = $3", []string{"1", "2", "3001"}},
		{"UPDATE orders SET o_carrier_id = $1 WHERE o_w_id = $2 AND o_d_id = $3 AND o_id = $4", []string{"7", "1", "2", "3001"}},
		{"UPDATE order_line SET ol_delivery_d = now() WHERE ol_w_id = $1 AND ol_d_id = $2 AND ol_o_id = $3", []string{"1", "2", "3001"}},
		{"SELECT sum(ol_amount) FROM order_line WHERE ol_w_id = $1 AND ol_d_id = $2 AND ol_o_id = $3", []string{"1", "2", "3001"}},
		{"UPDATE customer SET c_balance = c_balance + $1, c_delivery_cnt = c_delivery_cnt + 1 WHERE c_w_id = $2 AND c_d_id = $3 AND c_id = $4", []string{"99.50", "1", "2", "3"}},
	},
}

// table1 is Table 1 of Correia et al., "Group-based Replication of On-line
// Transaction Processing Servers" (../shared/papers/003_…): the conflict
// classes of each TPC-C update transaction type, under serializability
// (classes read or written) and snapshot isolation (classes written).
var table1 = map[string]map[string][]string{
	"Serializable": {
		"New Order": {"Warehouse", "District", "Customer", "Item", "Stock", "Orders", "OrderLine", "NewOrder"},
		"Payment":   {"Warehouse", "District", "Customer", "History"},
		"Delivery":  {"Customer", "Orders", "OrderLine", "NewOrder"},
	},
	"Snapshot Isolation Level": {
		"New Order": {"District", "Stock", "Orders", "OrderLine", "NewOrder"},
		"Payment":   {"Warehouse", "District", "Customer", "History"},
		"Delivery":  {"Customer", "Orders", "OrderLine", "NewOrder"},
	},
}

func params(vs []string) []Param {
	out := make([]Param, len(vs))
	for i, v := range vs {
		out[i] = Param{Value: []byte(v)}
	}
	return out
}

// TestTable1 derives Table 1 from the TPC-C statements.
func TestTable1(t *testing.T) {
	cat := testCatalog(t)
	a := New(cat, Options{})
	classes := tpccClasses(t)
	env := NewEnv([]string{"public"})
	for column, rows := range table1 {
		withReads := column == "Serializable"
		for txnType, want := range rows {
			got := map[string]bool{}
			for _, s := range tpccTxns[txnType] {
				stmts, err := a.Analyze(s.sql, env)
				if err != nil {
					t.Fatalf("%s: %v", s.sql, err)
				}
				f, err := stmts[0].Bind(params(s.params))
				if err != nil {
					t.Fatalf("%s: %v", s.sql, err)
				}
				uses, all, reason := classes.Derive(cat, stmts[0], f, withReads)
				if all {
					t.Fatalf("%s: escalated to all classes: %s", s.sql, reason)
				}
				for _, u := range uses {
					got[u.Class.Name] = true
				}
			}
			var g []string
			for c := range got {
				g = append(g, c)
			}
			sort.Strings(g)
			w := append([]string(nil), want...)
			sort.Strings(w)
			if strings.Join(g, ",") != strings.Join(w, ",") {
				t.Errorf("%s / %s: derived %v, Table 1 says %v", column, txnType, g, w)
			}
		}
	}
}

func splitClasses(t *testing.T) *Classes {
	t.Helper()
	c, err := NewClasses([]ClassDef{
		{Name: "district", Tables: []catalog.Name{pub("district")}, Label: "w", Columns: map[catalog.Name]string{pub("district"): "d_w_id"}},
		{Name: "stock", Tables: []catalog.Name{pub("stock"), pub("item")}, Label: "w", Columns: map[catalog.Name]string{pub("stock"): "s_w_id", pub("item"): "i_im_id"}},
		{Name: "warehouse", Tables: []catalog.Name{pub("warehouse")}},
	}, map[string]string{"neworder": "warehouse, district[w=1], stock[w=1]"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestParseClasses(t *testing.T) {
	c := splitClasses(t)
	refs, err := c.ParseClasses("warehouse, district[w=1] ,stock[w='2'], public.history, *")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range refs {
		got = append(got, r.String())
	}
	if strings.Join(got, " ") != "warehouse district[w=1] stock[w=2] public.history *" {
		t.Fatalf("got %v", got)
	}
	for decl, want := range map[string]string{
		"nosuch":            `unknown conflict class "nosuch"`,
		"warehouse[w=1]":    `class "warehouse" is not split`,
		"district[x=1]":     `split by "w", not "x"`,
		"district[w=]":      "want district[label=value]",
		"district[w=1":      "missing ']'",
		" , ":               "empty declaration",
		"district[w=1], zz": `unknown conflict class "zz"`,
	} {
		_, err := c.ParseClasses(decl)
		if !errors.Is(err, ErrClassConfig) || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseClasses(%q) = %v, want error containing %q", decl, err, want)
		}
	}
	if p, err := c.Profile("neworder"); err != nil || len(p) != 3 || p[1].String() != "district[w=1]" {
		t.Errorf("Profile = %v, %v", p, err)
	}
	if _, err := c.Profile("nope"); !errors.Is(err, ErrClassConfig) {
		t.Errorf("unknown profile: %v", err)
	}
	for _, bad := range [][]ClassDef{
		{{Name: "a.b", Tables: []catalog.Name{pub("x")}}},
		{{Name: "a", Tables: []catalog.Name{pub("x")}}, {Name: "a", Tables: []catalog.Name{pub("y")}}},
		{{Name: "a"}},
		{{Name: "a", Tables: []catalog.Name{pub("x")}, Label: "w"}},
	} {
		if _, err := NewClasses(bad, nil); !errors.Is(err, ErrClassConfig) {
			t.Errorf("NewClasses(%v) = %v", bad, err)
		}
	}
	if _, err := NewClasses(nil, map[string]string{"p": "nosuch"}); !errors.Is(err, ErrClassConfig) {
		t.Errorf("bad profile accepted: %v", err)
	}
}

// TestDeriveAndCheck covers derivation for autocommit statements (with
// granule partitions) and validation against declarations, including the
// directives parsed from SET LOCAL and BEGIN comments.
func TestDeriveAndCheck(t *testing.T) {
	cat := testCatalog(t)
	a := New(cat, Options{})
	c := splitClasses(t)
	env := NewEnv([]string{"public"})
	analyze := func(sql string, ps ...string) (*Statement, *Footprint) {
		t.Helper()
		stmts, err := a.Analyze(sql, env)
		if err != nil {
			t.Fatal(err)
		}
		f, err := stmts[0].Bind(params(ps))
		if err != nil {
			t.Fatal(err)
		}
		return stmts[0], f
	}
	derive := func(sql string, withReads bool, ps ...string) string {
		s, f := analyze(sql, ps...)
		uses, all, _ := c.Derive(cat, s, f, withReads)
		var out []string
		for _, u := range uses {
			out = append(out, u.Class.String())
		}
		if all {
			out = append(out, "(all)")
		}
		return strings.Join(out, " ")
	}
	cases := []struct {
		sql       string
		withReads bool
		params    []string
		want      string
	}{
		{"UPDATE district SET d_ytd = 0 WHERE d_w_id = $1 AND d_id = $2", true, []string{"3", "1"}, "district[w=3]"},
		{"UPDATE district SET d_ytd = 0 WHERE d_w_id IN (1, 2)", false, nil, "district[w=1] district[w=2]"},
		{"UPDATE district SET d_ytd = 0", false, nil, "district"},
		{"SELECT * FROM stock WHERE s_w_id = 2 AND s_i_id = 9", true, nil, "stock[w=2]"},
		{"SELECT * FROM stock WHERE s_w_id = 2 AND s_i_id = 9", false, nil, ""},
		{"SELECT * FROM stock WHERE s_w_id = 2 AND s_i_id = 9 FOR UPDATE", false, nil, "stock[w=2]"},
		{"SELECT * FROM item WHERE i_id = 1", true, nil, "stock"},
		{"INSERT INTO history (h_w_id) VALUES (1)", false, nil, "public.history"},
		{"SELECT * FROM warehouse JOIN district ON d_w_id = w_id WHERE w_id = 4", true, nil, "district[w=4] warehouse"},
		{"SELECT new_order_fn(1)", false, nil, "* (all)"},
	}
	for _, tc := range cases {
		if got := derive(tc.sql, tc.withReads, tc.params...); got != tc.want {
			t.Errorf("Derive(%q, reads=%v) = %q, want %q", tc.sql, tc.withReads, got, tc.want)
		}
	}

	// Declarations come from SET LOCAL and BEGIN comments.
	set, _ := analyze("SET LOCAL ordo.conflict_classes = 'warehouse, district[w=1]'")
	if set.Setting == nil || !set.Setting.Ordo || !set.Setting.Local || set.Setting.Name != "ordo.conflict_classes" {
		t.Fatalf("SET LOCAL not recognised: %+v", set.Setting)
	}
	declared, err := c.ParseClasses(set.Setting.Value)
	if err != nil {
		t.Fatal(err)
	}
	begin, _ := analyze("/* ordo.conflict_classes = 'stock[w=2]' ordo.profile=neworder */ BEGIN")
	if begin.Txn == nil || begin.Txn.ConflictClasses != "stock[w=2]" || begin.Txn.Profile != "neworder" {
		t.Fatalf("BEGIN comment not parsed: %+v", begin.Txn)
	}

	ok, f := analyze("UPDATE district SET d_ytd = 0 WHERE d_w_id = 1 AND d_id = 5")
	if err := c.Check(cat, declared, ok, f, true); err != nil {
		t.Errorf("in-class statement rejected: %v", err)
	}
	bad, f := analyze("UPDATE district SET d_ytd = 0 WHERE d_w_id = 2 AND d_id = 5")
	err = c.Check(cat, declared, bad, f, true)
	var ce *ClassError
	if !errors.As(err, &ce) || !errors.Is(err, ErrUndeclaredClass) || ce.Table != pub("district") || ce.Class.String() != "district[w=2]" {
		t.Fatalf("out-of-class statement: %v", err)
	}
	if !strings.Contains(err.Error(), "table public.district is in class district[w=2]; declared: warehouse, district[w=1]") {
		t.Errorf("error does not name table and class: %v", err)
	}
	other, f := analyze("SELECT * FROM stock WHERE s_w_id = 1 AND s_i_id = 1")
	if err := c.Check(cat, declared, other, f, true); !errors.As(err, &ce) || ce.Class.Name != "stock" {
		t.Errorf("read of an undeclared class under dbsm: %v", err)
	}
	if err := c.Check(cat, declared, other, f, false); err != nil {
		t.Errorf("reads are not classes under SI: %v", err)
	}
	opaque, f := analyze("SELECT new_order_fn(1)")
	if err := c.Check(cat, declared, opaque, f, false); !errors.As(err, &ce) || !strings.Contains(err.Error(), "may touch every class") {
		t.Errorf("opaque statement: %v", err)
	}
	if err := c.Check(cat, []txn.ClassRef{{Name: AllClasses}}, opaque, f, false); err != nil {
		t.Errorf("* must cover everything: %v", err)
	}
}
