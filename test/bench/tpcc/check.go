package tpcc

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// consistency are clause 3.3.2's conditions 1–4, each a query returning
// the warehouses or districts that violate it.
var consistency = []struct{ name, query string }{
	{"1: W_YTD = sum(D_YTD)", `SELECT w_id::text FROM warehouse
		WHERE w_ytd <> (SELECT coalesce(sum(d_ytd), 0) FROM district WHERE d_w_id = w_id)`},
	{"2: D_NEXT_O_ID - 1 = max(O_ID) = max(NO_O_ID)", `SELECT d_w_id || '/' || d_id FROM district
		WHERE d_next_o_id - 1 <> (SELECT max(o_id) FROM orders WHERE o_w_id = d_w_id AND o_d_id = d_id)
		   OR d_next_o_id - 1 <> coalesce((SELECT max(no_o_id) FROM new_order WHERE no_w_id = d_w_id AND no_d_id = d_id), d_next_o_id - 1)`},
	{"3: count(NO_O_ID) = max(NO_O_ID) - min(NO_O_ID) + 1", `SELECT no_w_id || '/' || no_d_id FROM new_order
		GROUP BY no_w_id, no_d_id HAVING count(*) <> max(no_o_id) - min(no_o_id) + 1`},
	{"4: sum(O_OL_CNT) = count(order lines)", `SELECT d_w_id || '/' || d_id FROM district
		WHERE (SELECT coalesce(sum(o_ol_cnt), 0) FROM orders WHERE o_w_id = d_w_id AND o_d_id = d_id)
		   <> (SELECT count(*) FROM order_line WHERE ol_w_id = d_w_id AND ol_d_id = d_id)`},
}

// Check verifies consistency conditions 1–4 (clause 3.3.2.1–3.3.2.4) on
// the database conn is connected to, in one snapshot. It returns an error
// naming every condition violated and where.
func Check(ctx context.Context, conn *pgx.Conn) error {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	var bad []string
	for _, c := range consistency {
		rows, err := tx.Query(ctx, c.query)
		if err != nil {
			return fmt.Errorf("tpcc: condition %s: %w", c.name, err)
		}
		where, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("tpcc: condition %s: %w", c.name, err)
		}
		if len(where) > 0 {
			bad = append(bad, fmt.Sprintf("condition %s violated at %s", c.name, strings.Join(where, ", ")))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("tpcc: %s", strings.Join(bad, "; "))
	}
	return nil
}
