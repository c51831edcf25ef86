package e2e

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/pkg/config"
)

// TestConsHotRowWithoutAborts: under cons, 8 clients over 3 nodes update
// one hot row with declared classes: conflicting transactions never run
// concurrently, so none aborts (no 40001 of any kind), and the row counts
// every commit on every node. A statement outside the declared classes is
// refused naming its class, the transaction is aborted (its COMMIT rolls
// back), and nothing of it is replicated (a table with a trigger needs
// '*'); write skew cannot happen; a client idle while holding classes
// loses its session after class_idle_timeout; an undeclared autocommit statement gets its
// classes from the analyzer, an undeclared transaction the catch-all.
func TestConsHotRowWithoutAborts(t *testing.T) {
	t.Parallel()
	c := startClusterWith(t, 3, "cons", func(cfg *config.Node) { cfg.ClassIdleTimeout = 2 * time.Second })
	ctx := context.Background()
	setup := c.connect(0)
	for _, sql := range []string{
		"CREATE TABLE hot (id int PRIMARY KEY, n bigint NOT NULL)",
		"CREATE TABLE other (id int PRIMARY KEY, v text)",
		"INSERT INTO hot VALUES (1, 0)", // autocommit: classes from the analyzer
		"INSERT INTO other VALUES (1, 'untouched')",
	} {
		_, err := setup.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	c.waitConverged()

	duration := 4 * time.Second
	if testing.Short() {
		duration = 2 * time.Second
	}
	deadline := time.Now().Add(duration)
	var commits atomic.Int64
	var failure errorSlot
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		conn := c.connect(w % 3)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, "SET LOCAL ordo.conflict_classes = 'public.hot'"); err != nil {
						return err
					}
					_, err := tx.Exec(ctx, "UPDATE hot SET n = n + 1 WHERE id = 1")
					return err
				})
				if err != nil {
					failure.Store(fmt.Errorf("client %d: %w (SQLSTATE %s)", w, err, sqlstate(err)))
					return
				}
				commits.Add(1)
			}
		}()
	}
	wg.Wait()
	if f := failure.Load(); f != nil {
		t.Fatalf("under cons no transaction may fail: %v", f)
	}
	t.Logf("%d commits of one hot row in %s, none aborted", commits.Load(), duration)
	require.Positive(t, commits.Load())
	c.waitConverged()
	for i := range c.nodes {
		var n int64
		require.NoError(t, c.direct(i).QueryRow(ctx, "SELECT n FROM hot WHERE id = 1").Scan(&n))
		require.Equal(t, commits.Load(), n, "node %d counts every commit", i+1)
		require.Zero(t, c.unreplicated(i))
		require.Zero(t, c.counter(i, "ordo_replica_transactions_total", map[string]string{"outcome": "abort", "reason": "certification"}))
	}

	// A statement outside the declared classes.
	conn := c.connect(1)
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SET LOCAL ordo.conflict_classes = 'public.hot'")
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "UPDATE hot SET n = n + 1000 WHERE id = 1")
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "UPDATE other SET v = 'changed' WHERE id = 1")
	require.Error(t, err)
	require.Equal(t, "55000", sqlstate(err), "%v", err)
	require.Contains(t, err.Error(), "public.other")
	require.ErrorIs(t, tx.Commit(ctx), pgx.ErrTxCommitRollback, "the transaction is aborted: it can only roll back")

	// A table with a trigger may write anywhere: its statements need '*'
	// (the decoded write set is checked at commit too, behind this).
	for _, sql := range []string{
		"CREATE TABLE audited (id int PRIMARY KEY)",
		`CREATE FUNCTION audit() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN UPDATE other SET v = 'by trigger' WHERE id = 1; RETURN NEW; END $$`,
		"CREATE TRIGGER audit AFTER INSERT ON audited FOR EACH ROW EXECUTE FUNCTION audit()",
	} {
		_, err := setup.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	c.waitConverged() // conn is on another node
	tx, err = conn.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SET LOCAL ordo.conflict_classes = 'public.audited'")
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "INSERT INTO audited VALUES (1)")
	require.Error(t, err)
	require.Equal(t, "55000", sqlstate(err), "%v", err)
	require.Contains(t, err.Error(), "triggers")
	require.ErrorIs(t, tx.Commit(ctx), pgx.ErrTxCommitRollback)

	// Write skew cannot happen: two doctors on two nodes each go off duty
	// if both are on; their transactions declare the same class, so the
	// second runs after the first committed, sees it, and stays on. Both
	// commit: nothing aborts.
	_, err = setup.Exec(ctx, "CREATE TABLE oncall (id int PRIMARY KEY, on_duty bool NOT NULL)")
	require.NoError(t, err)
	_, err = setup.Exec(ctx, "INSERT INTO oncall VALUES (1, true), (2, true)")
	require.NoError(t, err)
	// Node 2's doctor reads the table: node 2 must have it (its catalog
	// did not, under load, and the read was refused as touching every
	// class).
	c.waitConverged()
	var skew sync.WaitGroup
	skewErrs := make([]error, 2)
	for d := 0; d < 2; d++ {
		conn := c.connect(d)
		skew.Add(1)
		go func() {
			defer skew.Done()
			skewErrs[d] = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, "SET LOCAL ordo.conflict_classes = 'public.oncall'"); err != nil {
					return err
				}
				var on int
				if err := tx.QueryRow(ctx, "SELECT count(*) FROM oncall WHERE on_duty").Scan(&on); err != nil {
					return err
				}
				time.Sleep(300 * time.Millisecond) // the other one is waiting, or done
				if on < 2 {
					return nil
				}
				_, err := tx.Exec(ctx, "UPDATE oncall SET on_duty = false WHERE id = $1", d+1)
				return err
			})
		}()
	}
	skew.Wait()
	require.NoError(t, skewErrs[0])
	require.NoError(t, skewErrs[1])
	c.waitConverged()
	for i := range c.nodes {
		var on int
		require.NoError(t, c.direct(i).QueryRow(ctx, "SELECT count(*) FROM oncall WHERE on_duty").Scan(&on))
		require.Equal(t, 1, on, "node %d: write skew", i+1)
	}

	// A client idle while holding its classes loses its session after
	// class_idle_timeout, which releases them.
	idle := c.connect(2)
	_, err = idle.Exec(ctx, "BEGIN")
	require.NoError(t, err)
	_, err = idle.Exec(ctx, "SET LOCAL ordo.conflict_classes = 'public.hot'")
	require.NoError(t, err)
	_, err = idle.Exec(ctx, "UPDATE hot SET n = n + 1000 WHERE id = 1")
	require.NoError(t, err)
	began := time.Now()
	_, err = c.connect(0).Exec(ctx, "UPDATE hot SET n = n + 1 WHERE id = 1") // waits for the class
	require.NoError(t, err)
	t.Logf("the next transaction on the class waited %s for an idle holder", time.Since(began).Round(time.Millisecond))
	require.Less(t, time.Since(began), 10*time.Second)
	_, err = idle.Exec(ctx, "COMMIT")
	require.Error(t, err, "the idle holder's session was ended")
	commits.Add(1) // the one that waited

	// A declaration in a comment on BEGIN.
	_, err = conn.Exec(ctx, "/* ordo.conflict_classes: public.hot */ BEGIN")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "UPDATE hot SET n = n + 1 WHERE id = 1")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "UPDATE other SET v = 'comment' WHERE id = 1")
	require.Equal(t, "55000", sqlstate(err), "the comment declared public.hot only: %v", err)
	_, err = conn.Exec(ctx, "ROLLBACK")
	require.NoError(t, err)

	// An undeclared transaction takes the catch-all and works.
	_, err = conn.Exec(ctx, "BEGIN")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "UPDATE other SET v = 'catch-all' WHERE id = 1")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "UPDATE hot SET n = n + 1 WHERE id = 1")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "COMMIT")
	require.NoError(t, err)
	c.waitConverged()
	for i := range c.nodes {
		var n int64
		var v string
		require.NoError(t, c.direct(i).QueryRow(ctx, "SELECT n, (SELECT v FROM other WHERE id = 1) FROM hot WHERE id = 1").Scan(&n, &v))
		require.Equal(t, commits.Load()+1, n, "node %d: the refused transaction left nothing", i+1)
		require.Equal(t, "catch-all", v)
		var audited int
		require.NoError(t, c.direct(i).QueryRow(ctx, "SELECT count(*) FROM audited").Scan(&audited))
		require.Zero(t, audited, "node %d: the refused transaction on a table with a trigger left nothing", i+1)
	}
}

// TestConsDeadOriginReleasesItsClasses: a node killed (SIGKILL) while one
// of its transactions holds a class does not block the others beyond the
// failure detection: the cluster takes it for gone and orders the release.
func TestConsDeadOriginReleasesItsClasses(t *testing.T) {
	t.Parallel()
	c := startProcCluster(t, 3, "cons")
	ctx := context.Background()
	connect := func(i int) *pgx.Conn {
		conn, err := pgx.Connect(ctx, c.dsn(i))
		require.NoError(t, err)
		t.Cleanup(func() { conn.Close(context.Background()) })
		return conn
	}
	a := connect(0)
	_, err := a.Exec(ctx, "CREATE TABLE hot (id int PRIMARY KEY, n int NOT NULL)")
	require.NoError(t, err)
	_, err = a.Exec(ctx, "INSERT INTO hot VALUES (1, 0)")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return c.settled("SELECT n::text FROM hot") }, 30*time.Second, 200*time.Millisecond)

	// Node 1's transaction takes the class and stays open.
	tx, err := a.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SET LOCAL ordo.conflict_classes = 'public.hot'")
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "UPDATE hot SET n = n + 100 WHERE id = 1")
	require.NoError(t, err)

	// Node 2's transaction on the same class waits behind it …
	b := connect(1)
	done := make(chan error, 1)
	var took time.Duration
	go func() {
		began := time.Now()
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_, err := b.Exec(wctx, "UPDATE hot SET n = n + 1 WHERE id = 1")
		took = time.Since(began)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("node 2's transaction ran while node 1 held the class: %v", err)
	case <-time.After(time.Second):
	}
	// … until node 1 dies and the cluster releases its class.
	killed := time.Now()
	c.kill(0)
	require.NoError(t, <-done)
	t.Logf("node 2's transaction waited %s, %s after node 1 was killed", took.Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))
	require.Less(t, time.Since(killed), 15*time.Second)
	c.start(0)
	require.Eventually(t, func() bool { return c.settled("SELECT n::text FROM hot") }, 60*time.Second, 500*time.Millisecond, "nodes did not converge:\n%s", c.state())
	d, err := pgx.Connect(ctx, c.pg.Servers[0].DSN("postgres"))
	require.NoError(t, err)
	defer d.Close(ctx)
	var n int
	require.NoError(t, d.QueryRow(ctx, "SELECT n FROM hot").Scan(&n))
	require.Equal(t, 1, n, "the dead origin's transaction is nowhere")
}

// TestConsBatchesAndQueryStrings: under cons a transaction takes its
// classes before its snapshot. A ROLLBACK or COMMIT inside a batch or
// query string starts a new implicit transaction that has no snapshot yet
// (it was refused as if the cluster had switched to cons), a query string
// of several statements takes its classes before its first one, a
// statement PostgreSQL's grammar refuses gets PostgreSQL's error, and
// only an update after a read of the same batch is refused, saying why;
// a statement PostgreSQL does not run (a Bind it refuses) is not held
// against the transaction's classes.
func TestConsBatchesAndQueryStrings(t *testing.T) {
	t.Parallel()
	sb := startSideBySide(t, "cons")
	ho, hp := sb.hijacked(t)
	// A ROLLBACK, then an update and a read of the new implicit
	// transaction, in one batch.
	endThenWrite := []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "rollback"}, &pgproto3.Bind{}, &pgproto3.Execute{},
		&pgproto3.Parse{Query: "update cb set v = v + 1"}, &pgproto3.Bind{}, &pgproto3.Execute{},
		&pgproto3.Parse{Name: "cb2", Query: "select v from cb where k = $1 for update"}, &pgproto3.Bind{PreparedStatement: "cb2", Parameters: [][]byte{[]byte("1")}},
		&pgproto3.Execute{}, &pgproto3.Close{ObjectType: 'S', Name: "cb2"}, &pgproto3.Sync{}}
	answersAlike(t, ho, hp, [][]pgproto3.FrontendMessage{
		queryMsg("create table cb(k int primary key, v int)"),
		queryMsg("rollback; insert into cb values (1, 1)"),
		// A read after a change of names in its batch (a pooler's
		// DISCARD ALL, a SET of search_path): a read that reads anything,
		// run as PostgreSQL runs it (taken for one that may write, it was
		// refused as an update after the batch's snapshot).
		batchMsgs("discard all", "select k from cb order by k"),
		batchMsgs("set search_path = public", "select k from cb order by k", "declare c cursor for select 1"),
		queryMsg("reset search_path"),
		// A name that does not exist bound in a block after other
		// messages of its batch: PostgreSQL refuses the Bind (26000), or
		// skips it after an earlier error (23505), and so does Ordo.
		// (Where the session fuzzer saw Ordo's 55000 in place of the
		// 23505, seed 1796193344906985809 at 17aff12, these steps pass
		// without that fix too: the refusal stayed there because
		// SAVEPOINTs PostgreSQL had refused in the failed block were
		// taken for savepoints, so the ROLLBACK TO after it did not
		// reach back before it. TestConsRollbackToBeforeARefusal
		// covers that, and fails without its fix.)
		queryMsg("/* ordo.conflict_classes: public.cb */ begin"),
		queryMsg("select count(*) from cb; savepoint s"),
		queryMsg("selec broken"),
		{&pgproto3.Parse{Query: "rollback to savepoint s"}, &pgproto3.Bind{}, &pgproto3.Execute{},
			&pgproto3.Parse{Query: "insert into cb values (1, 1) returning k"}, &pgproto3.Bind{}, &pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{},
			&pgproto3.Bind{PreparedStatement: "cb_never"}, &pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, &pgproto3.Sync{}},
		queryMsg("rollback to savepoint s"),
		{&pgproto3.Parse{Query: "insert into cb values (77, 1)"}, &pgproto3.Bind{}, &pgproto3.Execute{},
			&pgproto3.Bind{PreparedStatement: "cb_never"}, &pgproto3.Execute{}, &pgproto3.Sync{}},
		queryMsg("rollback"),
		batchMsgs("rollback", "insert into cb values (2, 1)"),
		batchMsgs("insert into cb values (3, 1)", "commit", "update cb set v = v + 1 where k = 3"),
		queryMsg("select count(*) from cb; update cb set v = v + 1 where k = 1"),
		queryMsg("/* ordo.conflict_classes: * */ begin"),
		queryMsg("selec broken"),
		queryMsg("rollback"),
		// A block whose classes come from its first statement (public.cb).
		batchMsgs("insert into cb values (9, 9)", "begin"),
		queryMsg("selec broken"),
		queryMsg("rollback"),
		// A Bind PostgreSQL refuses (too few parameters) runs nothing:
		// its error is PostgreSQL's, and after a rollback to a
		// savepoint the block goes on (it was left unable to do
		// anything but roll back; the session fuzzer's seed
		// 1795888384429780157).
		batchMsgs("update cb set v = v + 1 where k = 1", "begin"),
		queryMsg("savepoint s"),
		{&pgproto3.Parse{Query: "delete from cb where k = $1"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{}},
		queryMsg("rollback to savepoint s; select count(*) from cb; update cb set v = v + 1 where k = 1"),
		queryMsg("commit"),
		// A query string split at its transaction control takes its
		// classes for its first statement that takes a snapshot, not for
		// a SET or SHOW before it (it took none, then failed with 40001
		// as if the cluster had switched to cons).
		queryMsg("set work_mem = '4MB'; update cb set v = v + 1 where k = 1; commit"),
		queryMsg("show transaction_isolation; update cb set v = v + 1 where k = 1; select count(*) from cb; commit and chain"),
		queryMsg("rollback"),
		// SHOW inside a block before its first snapshot: answered by a
		// SELECT, after the block's classes.
		queryMsg("begin"),
		queryMsg("show transaction_isolation"),
		queryMsg("update cb set v = v + 1 where k = 1"),
		queryMsg("commit"),
		// A relation that does not exist, in a block whose classes do
		// not cover every class: PostgreSQL's 42P01, as a query and as a
		// Parse (it was Ordo's 55000, "may touch every class (unknown
		// relation nosuch)").
		batchMsgs("update cb set v = v + 1 where k = 1", "begin"),
		queryMsg("select * from nosuch"),
		queryMsg("rollback"),
		batchMsgs("update cb set v = v + 1 where k = 1", "begin"),
		{&pgproto3.Parse{Query: "select * from cb join nosuch using (k)"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{}},
		queryMsg("rollback"),
		// LOCK TABLE takes no snapshot: an update after it in a batch
		// is no update after a read (PostgreSQL 18 runs the LOCK in the
		// batch's implicit transaction once a statement of the batch
		// ran; 15 refuses it there). It was refused as one (the session
		// fuzzer, seed 1796171111273905241).
		batchMsgs("set local work_mem = '1MB'", "lock table cb in share mode", "insert into cb values (20, 1)"),
		// A change of names that PostgreSQL refuses, in a failed block,
		// changes nothing either (the session fuzzer, seed
		// 1796180004375575397 on PostgreSQL 18).
		queryMsg("begin"),
		queryMsg("selec broken"),
		queryMsg("discard all; select v from cb where k = 3"),
		endThenWrite,
		// DISCARD ALL bound in a block, which PostgreSQL refuses (25001),
		// changes nothing (the session fuzzer, seed 1796172701668078667).
		queryMsg("begin"),
		batchMsgs("commit and chain", "discard all"),
		endThenWrite,
	})
	got := exchange(t, ho, batchMsgs("select count(*) from cb", "update cb set v = v + 1 where k = 2"))
	require.Contains(t, got, "Error ERROR 0A000 ordo: under protocol cons a transaction takes its conflict classes before its snapshot")
	// A relation missing when the statement is checked, which a statement
	// before it in the same query string creates, is not taken for one
	// PostgreSQL will refuse: the statement would read another class.
	exchange(t, ho, queryMsg("rollback"))
	exchange(t, ho, queryMsg("create table cb2 (k int primary key)"))
	exchange(t, ho, batchMsgs("update cb set v = v + 1 where k = 1", "begin"))
	got = exchange(t, ho, queryMsg("create temp table tcb (k int); select * from tcb join cb2 using (k)"))
	require.Contains(t, got, "Error ERROR 55000", "read outside the block's classes")
	exchange(t, ho, queryMsg("rollback"))
	sb.c.waitConverged()
	for i := range sb.c.nodes {
		require.Equal(t, sb.c.checksum(0, "cb"), sb.c.checksum(i, "cb"), "node %d", i+1)
		require.Zero(t, sb.c.unreplicated(i), "node %d", i+1)
	}
}

// TestConsRefusedQueryDropsTheUnnamedStatement: PostgreSQL drops the
// unnamed statement at every simple Query, one Ordo refuses (a statement
// outside the block's classes) or answers itself (a NOTIFY in a block)
// too: a Bind of it then fails (26000), as without Ordo, instead of
// running a statement the client no longer holds.
func TestConsRefusedQueryDropsTheUnnamedStatement(t *testing.T) {
	t.Parallel()
	sb := startSideBySide(t, "cons")
	ho, hp := sb.hijacked(t)
	bindUnnamed := []pgproto3.FrontendMessage{&pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{}}
	for i, step := range []struct {
		msgs    []pgproto3.FrontendMessage
		compare bool
	}{
		{queryMsg("create table ua(k int primary key, v int); create table ub(k int primary key, v int)"), true},
		{queryMsg("insert into ua values (1, 1)"), true},
		{queryMsg("insert into ub values (1, 1)"), true},
		{queryMsg("/* ordo.conflict_classes: public.ua */ begin"), true},
		{[]pgproto3.FrontendMessage{&pgproto3.Parse{Query: "select 7"}, &pgproto3.Sync{}}, true},
		{queryMsg("update ub set v = 2 where k = 1"), false}, // refused by Ordo only
		{bindUnnamed, false},
		{queryMsg("rollback"), true},
		{queryMsg("begin"), true},
		{[]pgproto3.FrontendMessage{&pgproto3.Parse{Query: "select 8"}, &pgproto3.Sync{}}, true},
		{queryMsg("notify ch"), true},
		{bindUnnamed, true},
		{queryMsg("rollback"), true},
	} {
		want, got := exchange(t, hp, step.msgs), exchange(t, ho, step.msgs)
		if step.compare {
			require.Equal(t, want, got, "step %d", i)
		} else if i == 6 {
			require.Contains(t, got, "26000", "step %d: the refused Query dropped the unnamed statement", i)
		}
	}
}

// TestConsRollbackToBeforeARefusal: a statement outside the declared
// classes is refused (55000), and the transaction can only roll back,
// unless it rolls back to a savepoint set before that statement, which
// never ran: then it goes on, as it would on PostgreSQL, and commits.
// Every statement after such a ROLLBACK TO was refused with the first
// refusal's error (session fuzzer, seed 1796192813111737214).
func TestConsRollbackToBeforeARefusal(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "cons")
	ctx := context.Background()
	conn := c.connect(0)
	execAll(t, conn, "CREATE TABLE ca (k int PRIMARY KEY)", "CREATE TABLE cz (k int PRIMARY KEY)")
	c.waitConverged()
	run := func(sql string) error {
		_, err := conn.Exec(ctx, sql)
		return err
	}
	require.NoError(t, run("/* ordo.conflict_classes: public.ca */ BEGIN"))
	require.NoError(t, run("INSERT INTO ca VALUES (1)"))
	require.NoError(t, run("SAVEPOINT s"))
	err := run("INSERT INTO cz VALUES (1)")
	require.Equal(t, "55000", sqlstate(err), "%v", err)
	require.NoError(t, run("ROLLBACK TO SAVEPOINT s"))
	require.NoError(t, run("INSERT INTO ca VALUES (2)"), "after the rollback to a savepoint before the refusal")
	// The same with a later savepoint.
	require.NoError(t, run("SAVEPOINT t"))
	err = run("INSERT INTO cz VALUES (2)")
	require.Equal(t, "55000", sqlstate(err), "%v", err)
	require.NoError(t, run("ROLLBACK TO SAVEPOINT t"))
	require.NoError(t, run("COMMIT"))
	// A savepoint set after a refusal, where an older one was released:
	// a ROLLBACK TO it keeps the refusal (it forgot it: review). A
	// refused Bind without an Execute leaves the block usable.
	h := hijackNode(t, c, 0)
	for _, msgs := range [][]pgproto3.FrontendMessage{
		{&pgproto3.Query{String: "/* ordo.conflict_classes: public.ca */ BEGIN"}},
		{&pgproto3.Query{String: "INSERT INTO ca VALUES (3)"}},
		{&pgproto3.Query{String: "SAVEPOINT a"}},
		{&pgproto3.Parse{Name: "cz_sel", Query: "SELECT count(*) FROM cz"}, &pgproto3.Sync{}},
		{&pgproto3.Bind{PreparedStatement: "cz_sel", DestinationPortal: "cz_p"}, &pgproto3.Sync{}},
		{&pgproto3.Query{String: "RELEASE a"}},
		{&pgproto3.Query{String: "SAVEPOINT b"}},
		{&pgproto3.Query{String: "ROLLBACK TO b"}},
	} {
		exchange(t, h, msgs)
	}
	require.Contains(t, exchange(t, h, []pgproto3.FrontendMessage{&pgproto3.Query{String: "COMMIT"}}), "55000")
	// A SAVEPOINT of the same name sent after the refusal, which
	// PostgreSQL refuses in the failed block (25P02), is no savepoint: a
	// ROLLBACK TO the name goes back to before the refusal (the session
	// took it for one set after the refusal, and refused everything
	// after the ROLLBACK TO: the session fuzzer, seed
	// 1796193344906985809 at 17aff12).
	require.NoError(t, run("/* ordo.conflict_classes: public.ca */ BEGIN"))
	require.NoError(t, run("INSERT INTO ca VALUES (4)"))
	require.NoError(t, run("SAVEPOINT s"))
	err = run("INSERT INTO cz VALUES (4)")
	require.Equal(t, "55000", sqlstate(err), "%v", err)
	err = run("SAVEPOINT s")
	require.Equal(t, "25P02", sqlstate(err), "%v", err)
	require.NoError(t, run("ROLLBACK TO SAVEPOINT s"))
	require.NoError(t, run("INSERT INTO ca VALUES (5)"), "after the rollback to the savepoint before the refusal")
	require.NoError(t, run("COMMIT"))
	requireKeysEverywhere(t, c, "ca", "1,2,4,5")
}
