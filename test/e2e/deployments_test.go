package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/deployments"
)

// TestDeploymentsUseRealMetrics scrapes /metrics of real `ordo start`
// processes and checks that every metric the Grafana dashboard and the
// Prometheus alert rules use is exported, from the start, by every node:
// a renamed metric would otherwise leave an empty panel or an alert that
// can never fire.
func TestDeploymentsUseRealMetrics(t *testing.T) {
	t.Parallel()
	c := startProcCluster(t, 3, "dbsm")
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.dsn(0))
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE TABLE dash (k int PRIMARY KEY)")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "INSERT INTO dash VALUES (1)")
	require.NoError(t, err)

	used := deployments.UsedMetrics()
	require.NotEmpty(t, used)
	for i := range c.metrics {
		have := map[string]bool{}
		for _, line := range c.scrape(i) {
			// "# TYPE name kind" names every family, even one without samples
			if f := strings.Fields(line); len(f) == 4 && f[1] == "TYPE" {
				have[f[2]] = true
			}
		}
		for _, name := range used {
			if !have[name] {
				t.Errorf("node %d does not export %s, which deployments/ uses", i+1, name)
			}
		}
	}
}
