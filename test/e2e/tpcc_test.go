package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/internal/ctl"
	"github.com/ordo-db/ordo/test/bench/tpcc"
)

// tpccClassFile is the class file Ordo ships for TPC-C.
const tpccClassFile = "../../deployments/examples/tpcc-classes.yaml"

// TestTPCC runs TPC-C through a 3-node cluster under each protocol in
// turn (switched online, one cluster and one load for all four, to keep
// the default suite short): one warehouse homed on each node and a small
// population loaded through the nodes, two clients per node for a few
// seconds per protocol (cons: at table grain, then at warehouse grain,
// with the shipped class file applied by the real ordoctl). After each
// protocol's run every node satisfies the specification's consistency
// conditions 1–4 and holds the same rows in every table; no transaction
// failed other than by a retried serialization failure, and under cons
// none aborted at all.
func TestTPCC(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t0 := time.Now()
	c := startCluster(t, 3, "dbsm")
	dsns := []string{c.dsn(0), c.dsn(1), c.dsn(2)}
	conns := []*pgx.Conn{c.connect(0), c.connect(1), c.connect(2)}
	require.NoError(t, tpcc.Load(ctx, dsns, 3, tpcc.Small, 1))
	// Load returns once every node holds every warehouse: a terminal's
	// first remote stock line or payment, on a node that has not applied
	// that warehouse yet, would find no row.
	for i, conn := range conns {
		var n int
		require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM stock").Scan(&n))
		require.Equal(t, 3*tpcc.Small.Items, n, "stock rows on node %d right after the load", i+1)
	}
	t.Logf("cluster up and loaded: %v", time.Since(t0))
	// Remote payments are 15 % of them: counted over every run, since a
	// run of 15 payments on a loaded machine has none 9 % of the time.
	var payments, remote int
	for _, protocol := range []string{"dbsm", "dbsm-si", "pgr", "cons"} {
		if protocol != "dbsm" {
			_, err := c.nodes[0].Replica().SwitchProtocol(ctx, protocol)
			require.NoError(t, err)
		}
		grains := []tpcc.Grain{tpcc.GrainNone}
		if protocol == "cons" {
			applyTPCCClasses(t, c)
			grains = []tpcc.Grain{tpcc.GrainTable, tpcc.GrainWarehouse}
		}
		for _, g := range grains {
			rep, err := tpcc.Run(ctx, tpcc.Config{DSNs: dsns, Warehouses: 3, Scale: tpcc.Small, ClientsPerNode: 2,
				Duration: 2 * time.Second, Grain: g, Seed: uint64(time.Now().UnixNano())})
			require.NoError(t, err)
			var b strings.Builder
			rep.Print(&b)
			t.Logf("%s, grain %s:\n%s", protocol, g, b.String())
			require.Zero(t, rep.Failures(), "%s: transactions failed: %v", protocol, rep.Errors)
			require.Positive(t, rep.Stats[tpcc.NewOrder].Committed, protocol)
			require.Positive(t, rep.Stats[tpcc.Payment].Committed, protocol)
			payments += rep.Stats[tpcc.Payment].Committed
			remote += rep.RemotePayments
			if protocol == "cons" {
				require.Zero(t, rep.AbortPct(), "cons aborts nothing")
			}
		}
		checkTPCC(t, c, protocol)
		t.Logf("%s done: %v", protocol, time.Since(t0))
	}
	require.Positive(t, remote, "remote payments are kept (%d payments)", payments)
}

// checkTPCC checks conditions 1–4 on every node and that every node has
// the same rows.
func checkTPCC(t *testing.T, c *cluster, protocol string) {
	ctx := context.Background()
	c.waitConverged()
	for i := range c.nodes {
		require.NoError(t, tpcc.Check(ctx, c.direct(i)), "%s: node %d", protocol, i+1)
	}
	for _, table := range tpcc.Tables {
		sum := c.checksum(0, table)
		for i := 1; i < len(c.nodes); i++ {
			require.Equal(t, sum, c.checksum(i, table), "%s: table %s on node %d", protocol, table, i+1)
		}
	}
}

// applyTPCCClasses applies deployments/examples/tpcc-classes.yaml through
// node 2 with the real ordoctl, checks every node has it, and that its
// profiles work on TPC-C's tables: a statement inside the profile's
// partition runs, one outside is refused with 55000.
func applyTPCCClasses(t *testing.T, c *cluster) {
	octl := buildOrdoctl(t)
	out, errOut, code := octl.run("classes", "apply", "-f", tpccClassFile, "-o", "json", "--data-dir", c.cfgs[1].DataDir)
	require.Equal(t, ctl.ExitOK, code, "%s\n%s", out, errOut)
	c.waitConverged()
	var dirs []string
	for i := range c.cfgs {
		dirs = append(dirs, "--data-dir", c.cfgs[i].DataDir)
	}
	out, errOut, code = octl.run(append([]string{"classes", "list", "-o", "json"}, dirs...)...)
	require.Equal(t, ctl.ExitOK, code, "%s\n%s", out, errOut)
	var l classesList
	require.NoError(t, json.Unmarshal([]byte(out), &l), out)
	for _, n := range l.Nodes {
		require.Len(t, n.Configuration.Classes, 9, n.Endpoint)
		require.Len(t, n.Configuration.Profiles, 9, n.Endpoint)
	}

	ctx := context.Background()
	conn := c.connect(0)
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL ordo.profile = 'payment_local(w=1)'"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "UPDATE warehouse SET w_ytd = w_ytd WHERE w_id = 1")
		return err
	})
	require.NoError(t, err, "inside the profile's partition")
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL ordo.profile = 'payment_local(w=1)'"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "UPDATE warehouse SET w_ytd = w_ytd WHERE w_id = 2")
		return err
	})
	var pe *pgconn.PgError
	require.True(t, errors.As(err, &pe), "outside the partition: %v", err)
	require.Equal(t, "55000", pe.Code, pe.Message)
	require.Contains(t, pe.Message, "warehouse[w=2]")
}
