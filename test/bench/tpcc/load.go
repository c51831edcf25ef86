package tpcc

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// loadChunk is the most rows one load transaction writes: small enough
// that a write set stays far below Ordo's limits and key escalation.
const loadChunk = 5000

// LoadItems writes the item table (clause 4.3.3.1) through conn.
func LoadItems(ctx context.Context, conn *pgx.Conn, s Scale, seed uint64) error {
	r := rand.New(rand.NewPCG(seed, 1))
	rows := make([][]any, 0, s.Items)
	for i := 1; i <= s.Items; i++ {
		rows = append(rows, []any{i, between(r, 1, 10000), aString(r, 14, 24), float64(between(r, 100, 10000)) / 100, original(r)})
	}
	return copyRows(ctx, conn, "item", []string{"i_id", "i_im_id", "i_name", "i_price", "i_data"}, rows)
}

// LoadWarehouse writes warehouse w and everything under it (clause
// 4.3.3.1): its row, districts, customers and their history rows, orders,
// order lines, new orders and stock, through conn, in transactions of at
// most loadChunk rows.
func LoadWarehouse(ctx context.Context, conn *pgx.Conn, s Scale, w int, seed uint64) error {
	r := rand.New(rand.NewPCG(seed, uint64(w)))
	now := time.Now().UTC().Truncate(time.Microsecond)
	if err := copyRows(ctx, conn, "warehouse",
		[]string{"w_id", "w_name", "w_street_1", "w_street_2", "w_city", "w_state", "w_zip", "w_tax", "w_ytd"},
		[][]any{{w, aString(r, 6, 10), aString(r, 10, 20), aString(r, 10, 20), aString(r, 10, 20), aString(r, 2, 2), zip(r),
			float64(between(r, 0, 2000)) / 10000, 300000.0}}); err != nil {
		return err
	}
	var districts [][]any
	for d := 1; d <= Districts; d++ {
		districts = append(districts, []any{d, w, aString(r, 6, 10), aString(r, 10, 20), aString(r, 10, 20), aString(r, 10, 20),
			aString(r, 2, 2), zip(r), float64(between(r, 0, 2000)) / 10000, 30000.0, s.Orders + 1})
	}
	if err := copyRows(ctx, conn, "district",
		[]string{"d_id", "d_w_id", "d_name", "d_street_1", "d_street_2", "d_city", "d_state", "d_zip", "d_tax", "d_ytd", "d_next_o_id"},
		districts); err != nil {
		return err
	}
	var customers, history [][]any
	for d := 1; d <= Districts; d++ {
		for c := 1; c <= s.Customers; c++ {
			last := lastName(nuRand(r, 255, cLastLoad, 0, s.nameRange()-1))
			if c <= s.nameRange() {
				last = lastName(c - 1)
			}
			credit := "GC"
			if r.IntN(10) == 0 {
				credit = "BC"
			}
			customers = append(customers, []any{c, d, w, aString(r, 8, 16), "OE", last,
				aString(r, 10, 20), aString(r, 10, 20), aString(r, 10, 20), aString(r, 2, 2), zip(r), nString(r, 16, 16),
				now, credit, 50000.0, float64(between(r, 0, 5000)) / 10000, -10.0, 10.0, 1, 0, aString(r, 300, 500)})
			hid := int64(((w-1)*Districts+(d-1))*s.Customers + c)
			history = append(history, []any{hid, c, d, w, d, w, now, 10.0, aString(r, 12, 24)})
		}
	}
	if err := copyRows(ctx, conn, "customer",
		[]string{"c_id", "c_d_id", "c_w_id", "c_first", "c_middle", "c_last", "c_street_1", "c_street_2", "c_city", "c_state", "c_zip",
			"c_phone", "c_since", "c_credit", "c_credit_lim", "c_discount", "c_balance", "c_ytd_payment", "c_payment_cnt", "c_delivery_cnt", "c_data"},
		customers); err != nil {
		return err
	}
	if err := copyRows(ctx, conn, "history",
		[]string{"h_id", "h_c_id", "h_c_d_id", "h_c_w_id", "h_d_id", "h_w_id", "h_date", "h_amount", "h_data"}, history); err != nil {
		return err
	}
	var orders, newOrders, lines [][]any
	for d := 1; d <= Districts; d++ {
		perm := permutation(r, s.Customers)
		for o := 1; o <= s.Orders; o++ {
			delivered := o <= s.Orders-s.NewOrders
			var carrier any
			if delivered {
				carrier = between(r, 1, 10)
			} else {
				newOrders = append(newOrders, []any{o, d, w})
			}
			cnt := between(r, 5, 15)
			orders = append(orders, []any{o, d, w, perm[(o-1)%len(perm)], now, carrier, cnt, 1})
			for l := 1; l <= cnt; l++ {
				var deliveryD any
				amount := 0.0
				if delivered {
					deliveryD = now
				} else {
					amount = float64(between(r, 1, 999999)) / 100
				}
				lines = append(lines, []any{o, d, w, l, between(r, 1, s.Items), w, deliveryD, 5, amount, aString(r, 24, 24)})
			}
		}
	}
	if err := copyRows(ctx, conn, "orders",
		[]string{"o_id", "o_d_id", "o_w_id", "o_c_id", "o_entry_d", "o_carrier_id", "o_ol_cnt", "o_all_local"}, orders); err != nil {
		return err
	}
	if err := copyRows(ctx, conn, "new_order", []string{"no_o_id", "no_d_id", "no_w_id"}, newOrders); err != nil {
		return err
	}
	if err := copyRows(ctx, conn, "order_line",
		[]string{"ol_o_id", "ol_d_id", "ol_w_id", "ol_number", "ol_i_id", "ol_supply_w_id", "ol_delivery_d", "ol_quantity", "ol_amount", "ol_dist_info"},
		lines); err != nil {
		return err
	}
	stock := make([][]any, 0, s.Items)
	for i := 1; i <= s.Items; i++ {
		row := []any{i, w, between(r, 10, 100)}
		for range Districts {
			row = append(row, aString(r, 24, 24))
		}
		stock = append(stock, append(row, 0, 0, 0, original(r)))
	}
	return copyRows(ctx, conn, "stock",
		[]string{"s_i_id", "s_w_id", "s_quantity", "s_dist_01", "s_dist_02", "s_dist_03", "s_dist_04", "s_dist_05",
			"s_dist_06", "s_dist_07", "s_dist_08", "s_dist_09", "s_dist_10", "s_ytd", "s_order_cnt", "s_remote_cnt", "s_data"},
		stock)
}

// copyRows writes rows into table with COPY, loadChunk rows per
// transaction, each retried after a serialization failure or deadlock
// (through a cluster, an apply of another node's rows can abort it).
func copyRows(ctx context.Context, conn *pgx.Conn, table string, cols []string, rows [][]any) error {
	for len(rows) > 0 {
		n := min(len(rows), loadChunk)
		for attempt := 1; ; attempt++ {
			label := fmt.Sprintf("tpcc-load-%s-%d", table, rand.Uint64())
			err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, "SET LOCAL ordo.txn_label = '"+label+"'"); err != nil {
					return err
				}
				_, err := tx.CopyFrom(ctx, pgx.Identifier{table}, cols, pgx.CopyFromRows(rows[:n]))
				return err
			})
			if isCode(err, "08007") {
				// Through Ordo, the cluster did not confirm the commit
				// in time (an overloaded machine): ask what became of it.
				var committed bool
				if committed, err = outcome(ctx, conn, label); err == nil && committed {
					break
				}
				if err == nil {
					continue
				}
			}
			if err == nil {
				break
			}
			if !retryable(err) || attempt == 100 {
				return fmt.Errorf("tpcc: load %s: %w", table, err)
			}
		}
		rows = rows[n:]
	}
	return nil
}

// retryable reports a serialization failure (40001) or deadlock (40P01).
func retryable(err error) bool { return isCode(err, "40001") || isCode(err, "40P01") }

func isCode(err error, code string) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == code
}

// outcome asks an Ordo node whether the transaction labelled label
// committed (docs/outcomes.md), until it knows (at most two minutes).
func outcome(ctx context.Context, conn *pgx.Conn, label string) (bool, error) {
	if _, err := conn.Exec(ctx, "SET ordo.read_consistency = 'sync'"); err != nil {
		return false, err
	}
	defer conn.Exec(ctx, "RESET ordo.read_consistency")
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var status string
		err := conn.QueryRow(ctx, "SELECT _ordo.txn_status($1)", label).Scan(&status)
		switch {
		case err != nil && !retryable(err) && !isCode(err, "08007"):
			return false, err
		case status == "committed":
			return true, nil
		case status == "aborted":
			return false, nil
		case time.Now().After(deadline):
			return false, fmt.Errorf("tpcc: the outcome of %s is still unknown after two minutes", label)
		}
		time.Sleep(time.Second)
	}
}

// Load creates the tables through dsns[0], loads item there, then each
// warehouse through the server it is homed on (Home), the warehouses of
// different servers in parallel.
func Load(ctx context.Context, dsns []string, warehouses int, s Scale, seed uint64) error {
	conn, err := pgx.Connect(ctx, dsns[0])
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if err := CreateSchema(ctx, conn); err != nil {
		return err
	}
	if err := LoadItems(ctx, conn, s, seed); err != nil {
		return err
	}
	errs := make(chan error, len(dsns))
	for i, dsn := range dsns {
		go func() {
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				errs <- err
				return
			}
			defer conn.Close(ctx)
			if err := waitForSchema(ctx, conn); err != nil {
				errs <- err
				return
			}
			for w := 1; w <= warehouses; w++ {
				if Home(w, len(dsns)) == i {
					if err := LoadWarehouse(ctx, conn, s, w, seed); err != nil {
						errs <- err
						return
					}
				}
			}
			errs <- nil
		}()
	}
	var first error
	for range dsns {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return first
	}
	for _, dsn := range dsns {
		if err := awaitLoad(ctx, dsn); err != nil {
			return err
		}
	}
	return nil
}

// awaitLoad returns once the server behind dsn holds every warehouse: an
// Ordo node applies what the others loaded shortly after they commit it,
// and a terminal's first remote stock line or payment would otherwise
// find no row. A read with ordo.read_consistency = 'sync' waits until
// the node has applied what the cluster committed before it (on plain
// PostgreSQL the setting is an unused placeholder).
func awaitLoad(ctx context.Context, dsn string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "SET ordo.read_consistency = 'sync'"); err != nil {
		return err
	}
	var n int
	return conn.QueryRow(ctx, "SELECT count(*) FROM warehouse").Scan(&n)
}

// waitForSchema waits until the server conn is connected to has the
// tables (a node of a cluster applies the DDL made through another one
// shortly after).
func waitForSchema(ctx context.Context, conn *pgx.Conn) error {
	deadline := time.Now().Add(time.Minute)
	for {
		var ok bool
		if err := conn.QueryRow(ctx, "SELECT to_regclass('stock') IS NOT NULL").Scan(&ok); err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("tpcc: the tables did not reach every server within a minute")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
