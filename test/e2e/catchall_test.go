package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/internal/ctl"
)

// TestConsConfigurableCatchAll: under cons, what a transaction that
// declares no classes takes is cluster configuration (catch_all in the
// class file). With the catch-all set to the application's class, an
// undeclared transaction of the application commits without holding the
// reports class, so a transaction on reports through another node runs
// beside it (under the default "*" it would wait); an undeclared
// transaction that strays outside the catch-all is refused naming the
// class; ordoctl shows the catch-all, and "*" restores the default.
func TestConsConfigurableCatchAll(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "cons")
	ctx := context.Background()
	for _, sql := range []string{
		"CREATE TABLE a (id int PRIMARY KEY, v int)", "CREATE TABLE b (id int PRIMARY KEY, v int)",
		"CREATE TABLE r (id int PRIMARY KEY, v int)",
		"INSERT INTO a VALUES (1, 0)", "INSERT INTO b VALUES (1, 0)", "INSERT INTO r VALUES (1, 0)",
	} {
		_, err := c.connect(0).Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	c.waitConverged()
	octl := buildOrdoctl(t)
	via := []string{"--data-dir", c.cfgs[0].DataDir}
	file := filepath.Join(t.TempDir(), "classes.yaml")
	apply := func(yaml string) string {
		require.NoError(t, os.WriteFile(file, []byte(yaml), 0o644))
		out, errOut, code := octl.run(append([]string{"classes", "apply", "-f", file}, via...)...)
		require.Equal(t, ctl.ExitOK, code, "%s\n%s", out, errOut)
		c.waitConverged()
		return out
	}
	out := apply("classes:\n  - {name: app, tables: [public.a, public.b]}\n  - {name: reports, tables: [public.r]}\ncatch_all: app\n")
	require.Contains(t, out, "(catch-all: transactions that declare none)")

	// An undeclared transaction of the application holds app only...
	holder, err := c.connect(0).Begin(ctx)
	require.NoError(t, err)
	_, err = holder.Exec(ctx, "UPDATE a SET v = v + 1 WHERE id = 1")
	require.NoError(t, err)
	// ...so reports, through another node, does not wait for it.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rep, err := c.connect(1).Begin(wctx)
	require.NoError(t, err)
	_, err = rep.Exec(wctx, "SET LOCAL ordo.conflict_classes = 'reports'")
	require.NoError(t, err)
	began := time.Now()
	_, err = rep.Exec(wctx, "UPDATE r SET v = v + 1 WHERE id = 1")
	require.NoError(t, err, "reports waited for a transaction that holds app only")
	require.NoError(t, rep.Commit(wctx))
	require.Less(t, time.Since(began), 5*time.Second)
	_, err = holder.Exec(ctx, "UPDATE b SET v = v + 1 WHERE id = 1")
	require.NoError(t, err, "b is in the catch-all's class")
	require.NoError(t, holder.Commit(ctx))

	// Outside the catch-all: refused, naming the class.
	stray, err := c.connect(2).Begin(ctx)
	require.NoError(t, err)
	_, err = stray.Exec(ctx, "UPDATE a SET v = v + 1 WHERE id = 1")
	require.NoError(t, err)
	_, err = stray.Exec(ctx, "UPDATE r SET v = v + 1 WHERE id = 1")
	require.Error(t, err)
	require.Equal(t, "55000", sqlstate(err), "%v", err)
	require.Contains(t, err.Error(), "reports")
	_ = stray.Rollback(ctx)

	// Every node shows it; "*" restores the default.
	out, errOut, code := octl.run("classes", "list", "-o", "json", "--data-dir", c.cfgs[0].DataDir, "--data-dir", c.cfgs[1].DataDir, "--data-dir", c.cfgs[2].DataDir)
	require.Equal(t, ctl.ExitOK, code, errOut)
	var l classesList
	require.NoError(t, json.Unmarshal([]byte(out), &l), out)
	for _, n := range l.Nodes {
		require.Equal(t, "app", n.Configuration.CatchAll, n.Endpoint)
	}
	apply("catch_all: '*'\n")
	out, _, _ = octl.run(append([]string{"classes", "list", "-o", "json"}, via...)...)
	require.NoError(t, json.Unmarshal([]byte(out), &l), out)
	require.Equal(t, "*", l.Nodes[0].Configuration.CatchAll)

	for i := range c.nodes {
		var a, b, r int
		require.NoError(t, c.direct(i).QueryRow(ctx, "SELECT (SELECT v FROM a), (SELECT v FROM b), (SELECT v FROM r)").Scan(&a, &b, &r))
		require.Equal(t, [3]int{1, 1, 1}, [3]int{a, b, r}, "node %d", i+1)
	}
}

// TestConsCascadeOutsideTheClassesIsRolledBack: a foreign key's ON DELETE
// CASCADE writes a table the statement does not name. The analyzer sees
// only the parent, so the statement runs; the decoded write set, checked
// against the declared classes before anything is proposed, holds the
// child's rows: the commit is refused with 55000 and nothing of it
// reaches any node.
func TestConsCascadeOutsideTheClassesIsRolledBack(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "cons")
	ctx := context.Background()
	for _, sql := range []string{
		"CREATE TABLE parent (id int PRIMARY KEY)",
		"CREATE TABLE child (id int PRIMARY KEY, pid int REFERENCES parent ON DELETE CASCADE)",
		"INSERT INTO parent VALUES (1), (2)", "INSERT INTO child VALUES (10, 1), (20, 2)",
	} {
		_, err := c.connect(0).Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	c.waitConverged()
	tx, err := c.connect(1).Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SET LOCAL ordo.conflict_classes = 'public.parent'")
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "DELETE FROM parent WHERE id = 1")
	require.NoError(t, err, "the statement names the parent only")
	err = tx.Commit(ctx)
	require.Error(t, err)
	require.Equal(t, "55000", sqlstate(err), "%v", err)
	require.Contains(t, err.Error(), "public.child")
	require.Contains(t, err.Error(), "outside its conflict classes")

	// Declaring both, it commits everywhere.
	tx, err = c.connect(1).Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SET LOCAL ordo.conflict_classes = 'public.parent, public.child'")
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "DELETE FROM parent WHERE id = 2")
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	c.waitConverged()
	for i := range c.nodes {
		var parents, children string
		require.NoError(t, c.direct(i).QueryRow(ctx, "SELECT (SELECT string_agg(id::text, ',') FROM parent), (SELECT string_agg(id::text, ',') FROM child)").Scan(&parents, &children))
		require.Equal(t, "1 10", parents+" "+children, "node %d: the refused delete changed nothing", i+1)
	}
}
