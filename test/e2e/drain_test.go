package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/internal/admin"
	"github.com/ordo-db/ordo/internal/ctl"
	"github.com/ordo-db/ordo/pkg/config"
)

// TestDrainANode: ordoctl drain takes node 3 out of service gently. New
// clients are refused (57P03) and its readiness says so; an idle session
// is ended (the client's next statement fails with 57P01, and it
// reconnects elsewhere); a session inside a transaction is left to finish
// and commits (the drain's timeout passes, exit 1, one left); a second
// drain ends it; --undo takes clients again.
func TestDrainANode(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm-si")
	ctx := context.Background()
	_, err := c.connect(0).Exec(ctx, "CREATE TABLE dr (id int PRIMARY KEY, v int)")
	require.NoError(t, err)
	_, err = c.connect(0).Exec(ctx, "INSERT INTO dr VALUES (1, 0)")
	require.NoError(t, err)
	c.waitConverged()
	octl := buildOrdoctl(t)
	drain := func(args ...string) (string, int) {
		out, errOut, code := octl.run(append([]string{"drain", "--endpoints", c.nodes[2].AdminAddr(),
			"--token-file", filepath.Join(c.cfgs[2].DataDir, admin.TokenFileName)}, args...)...)
		return out + errOut, code
	}

	idle := c.connect(2)
	busy := c.connect(2)
	tx, err := busy.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "UPDATE dr SET v = v + 1 WHERE id = 1")
	require.NoError(t, err)

	out, code := drain("--timeout", "2s")
	require.Equal(t, ctl.ExitFailed, code, out)
	require.Contains(t, out, "1 sessions of node 3 still inside a transaction")

	_, err = pgx.Connect(ctx, c.dsn(2))
	require.Error(t, err)
	require.Equal(t, "57P03", sqlstate(err), "%v", err)
	require.Contains(t, err.Error(), "draining")
	st, err := c.adminClient(2).Status(ctx)
	require.NoError(t, err)
	require.False(t, st.Ready.Ready)
	require.Contains(t, st.Ready.Reason, "draining")

	_, err = idle.Exec(ctx, "SELECT 1")
	require.Error(t, err, "the idle session was ended")
	require.NoError(t, tx.Commit(ctx), "the session inside a transaction finishes it")

	out, code = drain("--timeout", "5s")
	require.Equal(t, ctl.ExitOK, code, out)
	require.Contains(t, out, "node 3 drained")
	_, err = busy.Exec(ctx, "SELECT 1")
	require.Error(t, err, "ended once its transaction was over")

	out, code = drain("--undo")
	require.Equal(t, ctl.ExitOK, code, out)
	require.Eventually(t, func() bool {
		st, err := c.adminClient(2).Status(ctx)
		return err == nil && st.Ready.Ready
	}, 10*time.Second, 100*time.Millisecond)
	back := c.connect(2)
	var v int
	require.NoError(t, back.QueryRow(ctx, "SELECT v FROM dr WHERE id = 1").Scan(&v))
	require.Equal(t, 1, v)
}

// TestRemoveDrainsTheNodeFirst: ordoctl member remove 3, given node 3's
// endpoint too, drains it before removing it: a transaction node 3 is in
// the middle of commits (it would end with 08007 had the node been removed
// under it), the idle session is ended, and the node is then removed.
func TestRemoveDrainsTheNodeFirst(t *testing.T) {
	t.Parallel()
	const token = "shared-admin-token-for-the-test"
	c := startClusterWith(t, 3, "dbsm-si", func(cfg *config.Node) { cfg.AdminToken = token })
	ctx := context.Background()
	_, err := c.connect(0).Exec(ctx, "CREATE TABLE rd (id int PRIMARY KEY, v int)")
	require.NoError(t, err)
	_, err = c.connect(0).Exec(ctx, "INSERT INTO rd VALUES (1, 0)")
	require.NoError(t, err)
	c.waitConverged()
	octl := buildOrdoctl(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(token), 0o600))

	idle := c.connect(2)
	busy := c.connect(2)
	tx, err := busy.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "UPDATE rd SET v = v + 1 WHERE id = 1")
	require.NoError(t, err)

	type result struct {
		out  string
		code int
	}
	done := make(chan result, 1)
	go func() {
		out, errOut, code := octl.run("member", "remove", "3", "--endpoints", c.nodes[0].AdminAddr()+","+c.nodes[2].AdminAddr(),
			"--token-file", tokenFile, "--drain-timeout", "20s")
		done <- result{out + errOut, code}
	}()
	require.Eventually(t, func() bool { return c.nodes[2].Draining() }, 10*time.Second, 20*time.Millisecond, "node 3 drains first")
	select {
	case r := <-done:
		t.Fatalf("removed before its transaction ended: %s", r.out)
	case <-time.After(time.Second):
	}
	require.NoError(t, tx.Commit(ctx), "the transaction node 3 was in commits")
	r := <-done
	require.Equal(t, ctl.ExitOK, r.code, r.out)
	require.Contains(t, r.out, "node 3 drained: no client session left")
	_, err = idle.Exec(ctx, "SELECT 1")
	require.Error(t, err, "the idle session was ended")
	ac := admin.NewClient(c.nodes[0].AdminAddr(), admin.ClientOptions{Token: token})
	defer ac.Close()
	ms, err := ac.Members(ctx)
	require.NoError(t, err)
	for _, m := range ms.Members {
		require.NotEqual(t, uint64(3), m.ID, "node 3 is removed")
	}
	var v int
	require.Eventually(t, func() bool {
		return c.direct(0).QueryRow(ctx, "SELECT v FROM rd WHERE id = 1").Scan(&v) == nil && v == 1
	}, 10*time.Second, 100*time.Millisecond, "its commit reached node 1")
}
