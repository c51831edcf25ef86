package tpcc

import (
	"fmt"
	"slices"
	"strings"
)

// Grain is how finely transactions declare their conflict classes under
// cons (paper 003, Sect. 4.1 and 4.2). The classes are those of
// deployments/examples/tpcc-classes.yaml.
type Grain int

const (
	// GrainNone declares nothing: for the protocols other than cons, and
	// for PostgreSQL directly.
	GrainNone Grain = iota
	// GrainTable is Table 1's "Serializable" column: one class per table,
	// whole.
	GrainTable
	// GrainWarehouse narrows each class to the warehouse partitions the
	// transaction's statements touch by key (stock of each supply
	// warehouse, customer of the paying customer's warehouse), and item
	// to the items ordered. A statement that reads a range (a customer by
	// last name, Delivery's oldest new order and its lines, an order's
	// lines, Stock-Level's join) is seen by Ordo as reading its whole
	// table, so it declares the whole class.
	GrainWarehouse
)

func (g Grain) String() string {
	switch g {
	case GrainTable:
		return "table"
	case GrainWarehouse:
		return "warehouse"
	}
	return "none"
}

// ParseGrain parses "none", "table" (coarse) or "warehouse" (fine).
func ParseGrain(s string) (Grain, error) {
	switch s {
	case "none", "":
		return GrainNone, nil
	case "table", "coarse":
		return GrainTable, nil
	case "warehouse", "fine":
		return GrainWarehouse, nil
	}
	return GrainNone, fmt.Errorf("tpcc: unknown grain %q (none, table, warehouse)", s)
}

// decl builds a declaration for SET LOCAL ordo.conflict_classes.
type decl struct{ refs []string }

func (d *decl) whole(names ...string) { d.refs = append(d.refs, names...) }

func (d *decl) part(name, label string, v int) {
	d.refs = append(d.refs, fmt.Sprintf("%s[%s=%d]", name, label, v))
}

func (d *decl) String() string {
	slices.Sort(d.refs)
	return strings.Join(slices.Compact(d.refs), ", ")
}

// newOrderClasses: Table 1 gives New-Order every table but history.
func newOrderClasses(g Grain, in *newOrderInput) string {
	var d decl
	if g == GrainTable {
		d.whole("warehouse", "district", "customer", "item", "stock", "orders", "order_line", "new_order")
		return d.String()
	}
	for _, c := range []string{"warehouse", "district", "customer", "orders", "order_line", "new_order"} {
		d.part(c, "w", in.w)
	}
	for _, l := range in.lines {
		d.part("item", "i", l.item)
		d.part("stock", "w", l.supplyW)
	}
	return d.String()
}

// paymentClasses: warehouse, district, customer, history.
func paymentClasses(g Grain, in *paymentInput) string {
	var d decl
	if g == GrainTable {
		d.whole("warehouse", "district", "customer", "history")
		return d.String()
	}
	d.part("warehouse", "w", in.w)
	d.part("district", "w", in.w)
	d.part("history", "w", in.w)
	if in.byName {
		d.whole("customer")
	} else {
		d.part("customer", "w", in.cw)
	}
	return d.String()
}

// deliveryClasses: customer, orders, order_line, new_order.
func deliveryClasses(g Grain, w int) string {
	var d decl
	if g == GrainTable {
		d.whole("customer", "orders", "order_line", "new_order")
		return d.String()
	}
	d.part("customer", "w", w)
	d.part("orders", "w", w)
	d.whole("new_order", "order_line")
	return d.String()
}

// orderStatusClasses: Table 1 gives the read-only transactions no class
// (their snapshot is a prefix of the total order); Ordo runs an
// undeclared transaction of several statements alone ("*"), so they
// declare what they read.
func orderStatusClasses(g Grain, w int, byName bool) string {
	var d decl
	if g == GrainTable || byName {
		d.whole("customer")
	} else {
		d.part("customer", "w", w)
	}
	d.whole("orders", "order_line")
	return d.String()
}

// stockLevelClasses: what Stock-Level reads.
func stockLevelClasses(g Grain, w int) string {
	var d decl
	if g == GrainTable {
		d.whole("district")
	} else {
		d.part("district", "w", w)
	}
	d.whole("order_line", "stock")
	return d.String()
}
