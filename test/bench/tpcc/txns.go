package tpcc

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
)

// Kind is a transaction type.
type Kind int

// The five transaction types, in the order of the report.
const (
	NewOrder Kind = iota
	Payment
	OrderStatus
	Delivery
	StockLevel
	numKinds
)

var kindNames = [numKinds]string{"new_order", "payment", "order_status", "delivery", "stock_level"}

func (k Kind) String() string { return kindNames[k] }

// errRollback is New-Order's intended rollback (clause 2.4.2.3: an
// unused item number, 1 % of New-Orders).
var errRollback = errors.New("tpcc: new-order rolled back (unused item)")

// terminal is one client: its home warehouse, its connection and its
// random source.
type terminal struct {
	conn       *pgx.Conn
	r          *rand.Rand
	scale      Scale
	warehouses int
	w          int // home warehouse
	grain      Grain
	hid        int64 // next history id
}

// begin starts a transaction and, under a grain, declares its classes.
func (t *terminal) begin(ctx context.Context, classes func() string) (pgx.Tx, error) {
	tx, err := t.conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return nil, err
	}
	if t.grain != GrainNone {
		if _, err := tx.Exec(ctx, "SET LOCAL ordo.conflict_classes = '"+classes()+"'"); err != nil {
			tx.Rollback(ctx)
			return nil, err
		}
	}
	return tx, nil
}

// otherWarehouse draws a warehouse other than the home one (the home one
// if it is the only one).
func (t *terminal) otherWarehouse() int {
	if t.warehouses == 1 {
		return t.w
	}
	o := between(t.r, 1, t.warehouses-1)
	if o >= t.w {
		o++
	}
	return o
}

type orderLine struct {
	item, supplyW, quantity int
}

type newOrderInput struct {
	w, d, c  int
	lines    []orderLine
	rollback bool
	remote   int // lines supplied by another warehouse
}

// newOrderInput draws New-Order's input (clause 2.4.1).
func (t *terminal) newOrderInput() *newOrderInput {
	in := &newOrderInput{w: t.w, d: between(t.r, 1, Districts), c: t.scale.customerID(t.r)}
	n := between(t.r, 5, 15)
	in.rollback = t.r.IntN(100) == 0
	for i := range n {
		l := orderLine{item: t.scale.itemID(t.r), supplyW: t.w, quantity: between(t.r, 1, 10)}
		if in.rollback && i == n-1 {
			l.item = t.scale.Items + 1 // unused
		}
		if t.warehouses > 1 && t.r.IntN(100) == 0 {
			l.supplyW = t.otherWarehouse()
			in.remote++
		}
		in.lines = append(in.lines, l)
	}
	return in
}

// newOrder is clause 2.4.2.
func (t *terminal) newOrder(ctx context.Context, in *newOrderInput) error {
	tx, err := t.begin(ctx, func() string { return newOrderClasses(t.grain, in) })
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	var wTax, dTax, discount float64
	var next int
	var last, credit string
	if err := tx.QueryRow(ctx, "SELECT w_tax FROM warehouse WHERE w_id = $1", in.w).Scan(&wTax); err != nil {
		return err
	}
	if err := tx.QueryRow(ctx, "UPDATE district SET d_next_o_id = d_next_o_id + 1 WHERE d_w_id = $1 AND d_id = $2 RETURNING d_tax, d_next_o_id - 1",
		in.w, in.d).Scan(&dTax, &next); err != nil {
		return err
	}
	if err := tx.QueryRow(ctx, "SELECT c_discount, c_last, c_credit FROM customer WHERE c_w_id = $1 AND c_d_id = $2 AND c_id = $3",
		in.w, in.d, in.c).Scan(&discount, &last, &credit); err != nil {
		return err
	}
	allLocal := 1
	if in.remote > 0 {
		allLocal = 0
	}
	if _, err := tx.Exec(ctx, "INSERT INTO orders (o_id, o_d_id, o_w_id, o_c_id, o_entry_d, o_carrier_id, o_ol_cnt, o_all_local) VALUES ($1, $2, $3, $4, $5, NULL, $6, $7)",
		next, in.d, in.w, in.c, time.Now().UTC(), len(in.lines), allLocal); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, "INSERT INTO new_order (no_o_id, no_d_id, no_w_id) VALUES ($1, $2, $3)", next, in.d, in.w); err != nil {
		return err
	}
	distCol := fmt.Sprintf("s_dist_%02d", in.d)
	for i, l := range in.lines {
		var price float64
		var name, iData string
		err := tx.QueryRow(ctx, "SELECT i_price, i_name, i_data FROM item WHERE i_id = $1", l.item).Scan(&price, &name, &iData)
		if errors.Is(err, pgx.ErrNoRows) {
			return errRollback
		}
		if err != nil {
			return err
		}
		var qty int
		var sData, dist string
		if err := tx.QueryRow(ctx, "SELECT s_quantity, s_data, "+distCol+" FROM stock WHERE s_w_id = $1 AND s_i_id = $2",
			l.supplyW, l.item).Scan(&qty, &sData, &dist); err != nil {
			return err
		}
		if qty >= l.quantity+10 {
			qty -= l.quantity
		} else {
			qty = qty - l.quantity + 91
		}
		remote := 0
		if l.supplyW != in.w {
			remote = 1
		}
		if _, err := tx.Exec(ctx, "UPDATE stock SET s_quantity = $1, s_ytd = s_ytd + $2, s_order_cnt = s_order_cnt + 1, s_remote_cnt = s_remote_cnt + $3 WHERE s_w_id = $4 AND s_i_id = $5",
			qty, l.quantity, remote, l.supplyW, l.item); err != nil {
			return err
		}
		amount := float64(l.quantity) * price
		if _, err := tx.Exec(ctx, "INSERT INTO order_line (ol_o_id, ol_d_id, ol_w_id, ol_number, ol_i_id, ol_supply_w_id, ol_delivery_d, ol_quantity, ol_amount, ol_dist_info) VALUES ($1, $2, $3, $4, $5, $6, NULL, $7, $8, $9)",
			next, in.d, in.w, i+1, l.item, l.supplyW, l.quantity, amount, dist); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}

type paymentInput struct {
	w, d, cw, cd int
	byName       bool
	c            int
	last         string
	amount       float64
}

// paymentInput draws Payment's input (clause 2.5.1): 15 % of customers
// belong to a remote warehouse, 60 % are looked up by last name.
func (t *terminal) paymentInput() *paymentInput {
	in := &paymentInput{w: t.w, d: between(t.r, 1, Districts), amount: float64(between(t.r, 100, 500000)) / 100}
	in.cw, in.cd = in.w, in.d
	if t.warehouses > 1 && t.r.IntN(100) < 15 {
		in.cw, in.cd = t.otherWarehouse(), between(t.r, 1, Districts)
	}
	if t.r.IntN(100) < 60 {
		in.byName, in.last = true, t.scale.runLastName(t.r)
	} else {
		in.c = t.scale.customerID(t.r)
	}
	return in
}

// customerByName returns the id of the customer in the middle of those
// with last name last, ordered by first name (clause 2.5.2.2).
func customerByName(ctx context.Context, tx pgx.Tx, w, d int, last string) (int, error) {
	rows, err := tx.Query(ctx, "SELECT c_id FROM customer WHERE c_w_id = $1 AND c_d_id = $2 AND c_last = $3 ORDER BY c_first", w, d, last)
	if err != nil {
		return 0, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		return 0, fmt.Errorf("tpcc: no customer named %s in district %d of warehouse %d", last, d, w)
	}
	return ids[(len(ids)-1)/2], nil
}

// payment is clause 2.5.2.
func (t *terminal) payment(ctx context.Context, in *paymentInput) error {
	tx, err := t.begin(ctx, func() string { return paymentClasses(t.grain, in) })
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	var wName, dName string
	if err := tx.QueryRow(ctx, "UPDATE warehouse SET w_ytd = w_ytd + $1 WHERE w_id = $2 RETURNING w_name", in.amount, in.w).Scan(&wName); err != nil {
		return err
	}
	if err := tx.QueryRow(ctx, "UPDATE district SET d_ytd = d_ytd + $1 WHERE d_w_id = $2 AND d_id = $3 RETURNING d_name", in.amount, in.w, in.d).Scan(&dName); err != nil {
		return err
	}
	c := in.c
	if in.byName {
		if c, err = customerByName(ctx, tx, in.cw, in.cd, in.last); err != nil {
			return err
		}
	}
	var credit string
	if err := tx.QueryRow(ctx, "UPDATE customer SET c_balance = c_balance - $1, c_ytd_payment = c_ytd_payment + $1, c_payment_cnt = c_payment_cnt + 1 WHERE c_w_id = $2 AND c_d_id = $3 AND c_id = $4 RETURNING c_credit",
		in.amount, in.cw, in.cd, c).Scan(&credit); err != nil {
		return err
	}
	if credit == "BC" {
		data := fmt.Sprintf("%d %d %d %d %d %.2f|", c, in.cd, in.cw, in.d, in.w, in.amount)
		if _, err := tx.Exec(ctx, "UPDATE customer SET c_data = left($1 || c_data, 500) WHERE c_w_id = $2 AND c_d_id = $3 AND c_id = $4",
			data, in.cw, in.cd, c); err != nil {
			return err
		}
	}
	t.hid++
	if _, err := tx.Exec(ctx, "INSERT INTO history (h_id, h_c_id, h_c_d_id, h_c_w_id, h_d_id, h_w_id, h_date, h_amount, h_data) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
		t.hid, c, in.cd, in.cw, in.d, in.w, time.Now().UTC(), in.amount, wName+"    "+dName); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// orderStatus is clause 2.6.2 (read-only).
func (t *terminal) orderStatus(ctx context.Context) error {
	d := between(t.r, 1, Districts)
	byName := t.r.IntN(100) < 60
	c, last := 0, ""
	if byName {
		last = t.scale.runLastName(t.r)
	} else {
		c = t.scale.customerID(t.r)
	}
	tx, err := t.begin(ctx, func() string { return orderStatusClasses(t.grain, t.w, byName) })
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if byName {
		if c, err = customerByName(ctx, tx, t.w, d, last); err != nil {
			return err
		}
	}
	var balance float64
	if err := tx.QueryRow(ctx, "SELECT c_balance FROM customer WHERE c_w_id = $1 AND c_d_id = $2 AND c_id = $3", t.w, d, c).Scan(&balance); err != nil {
		return err
	}
	var o int
	err = tx.QueryRow(ctx, "SELECT o_id FROM orders WHERE o_w_id = $1 AND o_d_id = $2 AND o_c_id = $3 ORDER BY o_id DESC LIMIT 1", t.w, d, c).Scan(&o)
	if errors.Is(err, pgx.ErrNoRows) {
		return tx.Commit(ctx) // a customer without orders (scaled-down populations)
	}
	if err != nil {
		return err
	}
	rows, err := tx.Query(ctx, "SELECT ol_i_id, ol_supply_w_id, ol_quantity, ol_amount, ol_delivery_d FROM order_line WHERE ol_w_id = $1 AND ol_d_id = $2 AND ol_o_id = $3", t.w, d, o)
	if err != nil {
		return err
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// delivery is clause 2.7.4, every district in one transaction.
func (t *terminal) delivery(ctx context.Context) error {
	carrier := between(t.r, 1, 10)
	tx, err := t.begin(ctx, func() string { return deliveryClasses(t.grain, t.w) })
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	now := time.Now().UTC()
	for d := 1; d <= Districts; d++ {
		var o int
		err := tx.QueryRow(ctx, "SELECT no_o_id FROM new_order WHERE no_w_id = $1 AND no_d_id = $2 ORDER BY no_o_id LIMIT 1", t.w, d).Scan(&o)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // clause 2.7.4.2: skipped
		}
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "DELETE FROM new_order WHERE no_w_id = $1 AND no_d_id = $2 AND no_o_id = $3", t.w, d, o); err != nil {
			return err
		}
		var c int
		if err := tx.QueryRow(ctx, "UPDATE orders SET o_carrier_id = $1 WHERE o_w_id = $2 AND o_d_id = $3 AND o_id = $4 RETURNING o_c_id", carrier, t.w, d, o).Scan(&c); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "UPDATE order_line SET ol_delivery_d = $1 WHERE ol_w_id = $2 AND ol_d_id = $3 AND ol_o_id = $4", now, t.w, d, o); err != nil {
			return err
		}
		var sum float64
		if err := tx.QueryRow(ctx, "SELECT coalesce(sum(ol_amount), 0) FROM order_line WHERE ol_w_id = $1 AND ol_d_id = $2 AND ol_o_id = $3", t.w, d, o).Scan(&sum); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "UPDATE customer SET c_balance = c_balance + $1, c_delivery_cnt = c_delivery_cnt + 1 WHERE c_w_id = $2 AND c_d_id = $3 AND c_id = $4", sum, t.w, d, c); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}

// stockLevel is clause 2.8.2 (read-only).
func (t *terminal) stockLevel(ctx context.Context) error {
	d := between(t.r, 1, Districts)
	threshold := between(t.r, 10, 20)
	tx, err := t.begin(ctx, func() string { return stockLevelClasses(t.grain, t.w) })
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	var next, low int
	if err := tx.QueryRow(ctx, "SELECT d_next_o_id FROM district WHERE d_w_id = $1 AND d_id = $2", t.w, d).Scan(&next); err != nil {
		return err
	}
	if err := tx.QueryRow(ctx, `SELECT count(DISTINCT s_i_id) FROM order_line JOIN stock ON s_w_id = ol_w_id AND s_i_id = ol_i_id
		WHERE ol_w_id = $1 AND ol_d_id = $2 AND ol_o_id < $3 AND ol_o_id >= $4 AND s_quantity < $5`,
		t.w, d, next, next-20, threshold).Scan(&low); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
