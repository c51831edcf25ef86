package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/internal/admin"
	"github.com/ordo-db/ordo/internal/ctl"
	"github.com/ordo-db/ordo/pkg/config"
)

// classesList is `ordoctl classes list -o json`.
type classesList struct {
	Nodes []struct {
		Endpoint      string         `json:"endpoint"`
		Configuration *admin.Classes `json:"configuration"`
		Error         string         `json:"error"`
	} `json:"nodes"`
}

// TestClassesThroughTheOrder: conflict classes and profiles are cluster
// configuration. TPC-C's class file (the example of docs/admin.md) applied
// through one node with the real ordoctl is in force on every node at the
// same seqno; a change that does not check out is refused whole (exit 1)
// and changes nothing; deletes go through the order too; a node restarted
// long after the change (it replays only a small certification window)
// has it from its database.
func TestClassesThroughTheOrder(t *testing.T) {
	t.Parallel()
	c := startClusterWith(t, 3, "pgr", func(cfg *config.Node) { cfg.CertificationWindow = 20 })
	octl := buildOrdoctl(t)
	var dirs []string
	for i := range c.cfgs {
		dirs = append(dirs, "--data-dir", c.cfgs[i].DataDir)
	}
	via := func(i int) []string { return []string{"--data-dir", c.cfgs[i].DataDir} }
	list := func() classesList {
		t.Helper()
		out, errOut, code := octl.run(append([]string{"classes", "list", "-o", "json"}, dirs...)...)
		require.Equal(t, ctl.ExitOK, code, "%s\n%s", out, errOut)
		var l classesList
		require.NoError(t, json.Unmarshal([]byte(out), &l), out)
		require.Len(t, l.Nodes, 3)
		return l
	}
	require.Zero(t, list().Nodes[0].Configuration.Seqno, "no classes yet")

	out, errOut, code := octl.run(append([]string{"classes", "apply", "-f", "testdata/tpcc-classes.yaml", "-o", "json"}, via(1)...)...)
	require.Equal(t, ctl.ExitOK, code, "%s\n%s", out, errOut)
	c.waitConverged()
	l := list()
	at := l.Nodes[0].Configuration.Seqno
	require.Positive(t, at)
	for i, n := range l.Nodes {
		cfg := n.Configuration
		require.EqualValues(t, i+1, cfg.NodeID)
		require.Equal(t, at, cfg.Seqno, "every node switched at the same seqno")
		require.Len(t, cfg.Classes, 9)
		require.Len(t, cfg.Profiles, 5)
		require.Equal(t, l.Nodes[0].Configuration.Classes, cfg.Classes)
	}
	require.Equal(t, map[string]string{"public.district": "d_w_id"}, l.Nodes[0].Configuration.Classes[1].Columns)
	out, _, code = octl.run(append([]string{"profiles", "list"}, via(2)...)...)
	require.Equal(t, ctl.ExitOK, code)
	require.Contains(t, out, "warehouse[w={w}], district[w={w}], customer, history")

	// A profile naming an unknown class: refused whole, nothing changes.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("classes:\n  - name: extra\n    tables: [public.extra]\nprofiles:\n  - name: broken\n    classes: \"nosuch[w={w}]\"\n"), 0o600))
	_, errOut, code = octl.run(append([]string{"classes", "apply", "-f", bad}, via(0)...)...)
	require.Equal(t, ctl.ExitFailed, code, errOut)
	require.Contains(t, errOut, `unknown conflict class "nosuch"`)
	require.Equal(t, at, list().Nodes[2].Configuration.Seqno)
	_, _, code = octl.run(append([]string{"classes", "apply"}, via(0)...)...)
	require.Equal(t, ctl.ExitUsage, code, "apply without -f")

	// Delete a profile, then restart node 3: it keeps the configuration.
	_, errOut, code = octl.run(append([]string{"profiles", "delete", "stock_level"}, via(0)...)...)
	require.Equal(t, ctl.ExitOK, code, errOut)
	conn := c.connect(0)
	_, err := conn.Exec(context.Background(), "CREATE TABLE filler (id int PRIMARY KEY)")
	require.NoError(t, err)
	for i := range 60 { // well past the window: the change is not replayed
		_, err := conn.Exec(context.Background(), "INSERT INTO filler VALUES ($1)", i)
		require.NoError(t, err)
	}
	c.waitConverged()
	c.nodes[2].Stop()
	c.startNode(2)
	c.waitConverged()
	l = list()
	for _, n := range l.Nodes {
		require.Len(t, n.Configuration.Profiles, 4, n.Endpoint)
		require.Equal(t, l.Nodes[0].Configuration.Seqno, n.Configuration.Seqno)
	}
}
