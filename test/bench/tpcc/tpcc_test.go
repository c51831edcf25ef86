package tpcc

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/internal/pglocal"
)

// TestWorkloadOnPostgres runs the workload on one PostgreSQL server, two
// warehouses, four clients: every type commits, the mix and the remote
// accesses are the specification's within sampling error, New-Order rolls
// back about 1 %, and the consistency conditions hold; breaking each
// condition by hand makes Check name it.
func TestWorkloadOnPostgres(t *testing.T) {
	ctx := context.Background()
	pg, err := pglocal.Start(ctx, pglocal.Options{N: 1})
	require.NoError(t, err)
	t.Cleanup(func() { pg.Stop() })
	dsn := pg.Servers[0].DSN("postgres")
	require.NoError(t, Load(ctx, []string{dsn}, 2, Small, 1))
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	require.NoError(t, Check(ctx, conn), "after the load")
	var n int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM stock").Scan(&n))
	require.Equal(t, 2*Small.Items, n)
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM new_order").Scan(&n))
	require.Equal(t, 2*Districts*Small.NewOrders, n)

	// The mix is checked on at least 200 transactions: on a loaded
	// machine 4 s gave 193 (CI beside the safety suite), so a run that
	// commits too few is run again for longer.
	var rep *Report
	for _, d := range []time.Duration{4 * time.Second, 10 * time.Second, 25 * time.Second} {
		rep, err = Run(ctx, Config{DSNs: []string{dsn}, Warehouses: 2, Scale: Small, ClientsPerNode: 4, Duration: d, Seed: 7})
		require.NoError(t, err)
		rep.Print(testWriter{t})
		if rep.Committed() > 200 {
			break
		}
	}
	require.Zero(t, rep.Failures(), rep.Errors)
	total := rep.Committed()
	require.Greater(t, total, 200, "too few transactions to check the mix")
	for k, s := range rep.Stats {
		require.Positive(t, s.Committed, "%s committed none", Kind(k))
		share := float64(s.Committed+s.RolledBack) / float64(total)
		want := []float64{0.45, 0.43, 0.04, 0.04, 0.04}[k]
		require.InDelta(t, want, share, 0.06, "%s's share of the mix", Kind(k))
	}
	require.Less(t, rep.Stats[NewOrder].RolledBack, rep.Stats[NewOrder].Committed/20, "about 1 % of New-Orders roll back")
	require.Positive(t, rep.RemotePayments, "15 %% of payments are remote")
	require.InDelta(t, 15, pct(rep.RemotePayments, rep.Payments), 6)
	require.Less(t, pct(rep.RemoteOrderLines, rep.OrderLines), 3.0)
	require.Positive(t, rep.TpmC())
	require.NoError(t, Check(ctx, conn), "after the run")

	// Each condition, broken in turn, is named.
	for _, c := range []struct{ breakIt, want string }{
		{"UPDATE warehouse SET w_ytd = w_ytd + 1 WHERE w_id = 1", "condition 1"},
		{"UPDATE district SET d_next_o_id = d_next_o_id + 1 WHERE d_w_id = 2 AND d_id = 3", "condition 2"},
		{`INSERT INTO new_order (no_o_id, no_d_id, no_w_id) SELECT min(no_o_id) - 2, no_d_id, no_w_id FROM new_order
			GROUP BY no_w_id, no_d_id ORDER BY count(*) DESC LIMIT 1`, "condition 3"}, // a gap below the oldest
		{"DELETE FROM order_line WHERE (ol_w_id, ol_d_id, ol_o_id, ol_number) = (1, 2, 1, 1)", "condition 4"},
	} {
		_, err = conn.Exec(ctx, c.breakIt)
		require.NoError(t, err)
		require.ErrorContains(t, Check(ctx, conn), c.want)
	}
}

// TestClassDeclarations: what each transaction declares at each grain.
func TestClassDeclarations(t *testing.T) {
	in := &newOrderInput{w: 2, lines: []orderLine{{item: 5, supplyW: 2}, {item: 9, supplyW: 3}, {item: 5, supplyW: 2}}}
	require.Equal(t, "customer, district, item, new_order, order_line, orders, stock, warehouse", newOrderClasses(GrainTable, in))
	require.Equal(t, "customer[w=2], district[w=2], item[i=5], item[i=9], new_order[w=2], order_line[w=2], orders[w=2], stock[w=2], stock[w=3], warehouse[w=2]",
		newOrderClasses(GrainWarehouse, in))
	p := &paymentInput{w: 1, cw: 3}
	require.Equal(t, "customer, district, history, warehouse", paymentClasses(GrainTable, p))
	require.Equal(t, "customer[w=3], district[w=1], history[w=1], warehouse[w=1]", paymentClasses(GrainWarehouse, p))
	p.byName = true
	require.Equal(t, "customer, district[w=1], history[w=1], warehouse[w=1]", paymentClasses(GrainWarehouse, p))
	require.Equal(t, "customer[w=4], new_order, order_line, orders[w=4]", deliveryClasses(GrainWarehouse, 4))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }
