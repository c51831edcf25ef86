package e2e

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/stretchr/testify/require"
)

// dbsm-rc: applications written for PostgreSQL's default READ COMMITTED,
// which never retry a 40001 between local sessions.

func rcCounter(t *testing.T, c *cluster) {
	t.Helper()
	_, err := c.connect(0).Exec(context.Background(), "create table ctr(k int primary key, v int not null); insert into ctr values (1, 0), (2, 0)")
	require.NoError(t, err)
	c.waitConverged()
}

func ctrValue(t *testing.T, conn *pgx.Conn, k int) int {
	t.Helper()
	var v int
	require.NoError(t, conn.QueryRow(context.Background(), "select v from ctr where k = $1", k).Scan(&v))
	return v
}

func TestReadCommittedLocalSessionsWaitAndBothCommit(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm-rc")
	rcCounter(t, c)
	ctx := context.Background()
	a, b := c.connect(0), c.connect(0)
	var level string
	require.NoError(t, a.QueryRow(ctx, "show transaction_isolation").Scan(&level))
	require.Equal(t, "read committed", level)

	for round := 0; round < 3; round++ {
		tx, err := a.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, "update ctr set v = v + 1 where k = 1")
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() {
			_, err := b.Exec(ctx, "update ctr set v = v + 1 where k = 1") // waits for a's lock
			done <- err
		}()
		time.Sleep(200 * time.Millisecond)
		require.NoError(t, tx.Commit(ctx))
		require.NoError(t, <-done, "round %d: the waiting session must commit, as on PostgreSQL", round)
	}
	c.waitConverged()
	for i := 0; i < 3; i++ {
		require.Equal(t, 6, ctrValue(t, c.direct(i), 1), "node %d", i+1)
	}
}

func TestReadCommittedNoLostUpdatesAcrossNodes(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm-rc")
	rcCounter(t, c)
	ctx := context.Background()
	var mu sync.Mutex
	committed, aborted := 0, 0
	var wg sync.WaitGroup
	for w := 0; w < 3; w++ {
		conn := c.connect(w)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 30; i++ {
				_, err := conn.Exec(ctx, "update ctr set v = v + 1 where k = 1")
				mu.Lock()
				if err == nil {
					committed++
				} else {
					require.Equal(t, "40001", sqlstate(err), "%v", err)
					aborted++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	c.waitConverged()
	t.Logf("%d committed, %d aborted", committed, aborted)
	for i := 0; i < 3; i++ {
		require.Equal(t, committed, ctrValue(t, c.direct(i), 1), "node %d: every committed increment, and only those", i+1)
	}
}

// An apply that lands between two writing statements of a transaction:
// on a row the transaction wrote, it aborts the transaction (it waits for
// its lock); on a row it writes next, the next statement works on the
// applied version and the transaction commits.
func TestReadCommittedApplyBetweenWritingStatements(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm-rc")
	rcCounter(t, c)
	ctx := context.Background()
	local, remote := c.connect(0), c.connect(1)

	// The remote write is to the row the transaction already wrote.
	tx, err := local.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "update ctr set v = v + 1 where k = 1")
	require.NoError(t, err)
	_, err = remote.Exec(ctx, "update ctr set v = v + 10 where k = 1")
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "update ctr set v = v + 1 where k = 2")
	if err == nil {
		err = tx.Commit(ctx)
	} else {
		_ = tx.Rollback(ctx)
	}
	require.Equal(t, "40001", sqlstate(err), "the apply must abort the transaction holding its lock: %v", err)
	c.waitConverged()
	require.Equal(t, 10, ctrValue(t, c.direct(0), 1))
	require.Equal(t, 0, ctrValue(t, c.direct(0), 2))

	// The remote write is to the row the transaction writes next: first
	// in an ordinary session, then in one with a temporary schema, whose
	// transactions the full probe alone ends (probeAlone). Certified
	// against the prefix committed when it ends, the remote write it saw
	// is no conflict, and both increments stay.
	temp := c.connect(0)
	_, err = temp.Exec(ctx, "create temp table scratch(x int)")
	require.NoError(t, err)
	for round, conn := range []*pgx.Conn{local, temp} {
		tx, err = conn.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, "update ctr set v = v + 1 where k = 1")
		require.NoError(t, err)
		_, err = remote.Exec(ctx, "update ctr set v = v + 10 where k = 2")
		require.NoError(t, err)
		require.NoError(t, c.nodes[0].Replica().SyncRead(ctx)) // applied on node 1
		_, err = tx.Exec(ctx, "update ctr set v = v + 1 where k = 2")
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
		c.waitConverged()
		for i := 0; i < 3; i++ {
			require.Equal(t, 11+round, ctrValue(t, c.direct(i), 1), "round %d, node %d", round+1, i+1)
			require.Equal(t, 11+11*round, ctrValue(t, c.direct(i), 2), "round %d, node %d: both increments, none lost", round+1, i+1)
		}
	}
}

// TestChainedBlockKeepsItsLevel: COMMIT AND CHAIN starts the next block
// at the level of the one it ends, as PostgreSQL does. Ordo ends a
// replicated block's COMMIT with an empty transaction of its own, which
// the client's COMMIT AND CHAIN chains from: begun without a level, the
// chained block ran at READ COMMITTED where the client had SERIALIZABLE
// (under dbsm-rc, which runs a block at the level it asks for and
// certifies a SERIALIZABLE one as such; session fuzzer, seed
// 1796195836661307025). A failed block's chain too.
func TestChainedBlockKeepsItsLevel(t *testing.T) {
	t.Parallel()
	sb := startSideBySide(t, "dbsm-rc")
	o, p := sb.conns(t)
	same(t, o, p, "create table ch (k int primary key)")
	ho, hp := sb.hijacked(t)
	level := "select current_setting('transaction_isolation')"
	for i, q := range []string{
		"begin isolation level serializable", "insert into ch values (1)", "commit and chain", level,
		"insert into ch values (2)", "commit and chain", level, "commit",
		"begin", "set transaction isolation level repeatable read", "insert into ch values (3)", "commit and chain", level,
		"selec broken", "commit and chain", level, "commit",
		// Read-write, as the block it chains from, whatever the
		// session's default says.
		"set default_transaction_read_only = on", "begin read write", "insert into ch values (4)", "commit and chain",
		"select current_setting('transaction_read_only')", "insert into ch values (5)", "commit", "reset default_transaction_read_only",
		"select string_agg(k::text, ',' order by k) from ch",
	} {
		msgs := []pgproto3.FrontendMessage{&pgproto3.Query{String: q}}
		want := exchange(t, hp, msgs)
		require.Equal(t, want, exchange(t, ho, msgs), "step %d: %s", i, q)
	}
	requireKeysEverywhere(t, sb.c, "ch", "1,2,3,4,5")
}

// TestChainAfterAFailedBlockRunsAtOrdosLevel: PostgreSQL begins the block
// that a COMMIT AND CHAIN or ROLLBACK AND CHAIN of a failed block starts
// at the session's default level (the failed block's level went with its
// abort), where a block that asks for none runs at Ordo's level under
// dbsm-si, REPEATABLE READ: it ran at READ COMMITTED. A ROLLBACK AND CHAIN
// of a block that had not failed keeps its level, SERIALIZABLE included,
// and so does either chain of a block that failed inside a savepoint.
func TestChainAfterAFailedBlockRunsAtOrdosLevel(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm-si")
	h := hijackNode(t, c, 0)
	level := queryMsg("select current_setting('transaction_isolation')")
	for i, step := range []struct {
		msgs []pgproto3.FrontendMessage
		want string // in the reply, if not empty
	}{
		{queryMsg("create table chf (k int primary key)"), ""},
		{queryMsg("begin"), ""},
		{queryMsg("select 1/0"), "22012"},
		{queryMsg("commit and chain"), "ROLLBACK"},
		{level, `Row ["repeatable read"]`},
		{queryMsg("insert into chf values (1)"), ""},
		{queryMsg("commit"), ""},
		{queryMsg("begin isolation level serializable"), ""},
		{queryMsg("select 1/0"), "22012"},
		{queryMsg("rollback and chain"), ""},
		{level, `Row ["repeatable read"]`},
		{queryMsg("rollback"), ""},
		{queryMsg("begin isolation level serializable"), ""},
		{queryMsg("select count(*) from chf"), ""},
		{queryMsg("rollback and chain"), ""},
		{level, `Row ["serializable"]`},
		{queryMsg("insert into chf values (2)"), ""},
		{queryMsg("commit"), ""},
		// A block that failed inside a savepoint keeps its level: only
		// the subtransaction was aborted (the review of the fix, which
		// took every failed block for one that lost its level).
		{queryMsg("begin isolation level serializable"), ""},
		{queryMsg("savepoint a"), ""},
		{queryMsg("select 1/0"), "22012"},
		{queryMsg("rollback and chain"), ""},
		{level, `Row ["serializable"]`},
		{queryMsg("savepoint a"), ""},
		{queryMsg("select 1/0"), "22012"},
		{queryMsg("commit and chain"), "ROLLBACK"},
		{level, `Row ["serializable"]`},
		{queryMsg("insert into chf values (3)"), ""},
		{queryMsg("commit"), ""},
		// A savepoint released before the error: the block failed at
		// its top level.
		{queryMsg("begin isolation level serializable"), ""},
		{queryMsg("savepoint a"), ""},
		{queryMsg("release a"), ""},
		{queryMsg("select 1/0"), "22012"},
		{queryMsg("commit and chain"), "ROLLBACK"},
		{level, `Row ["repeatable read"]`},
		{queryMsg("commit"), ""},
		// A named BEGIN (not rewritten: Ordo sets the level before the
		// block's first snapshot), then at once ROLLBACK AND CHAIN: the
		// level is still to set, in the chain.
		{[]pgproto3.FrontendMessage{&pgproto3.Parse{Name: "chf_begin", Query: "begin"}, &pgproto3.Bind{PreparedStatement: "chf_begin"}, &pgproto3.Execute{}, &pgproto3.Sync{}}, ""},
		{queryMsg("rollback and chain"), ""},
		{level, `Row ["repeatable read"]`},
		{queryMsg("commit"), ""},
	} {
		got := exchange(t, h, step.msgs)
		require.NotContains(t, got, "ordo:", "step %d", i)
		if step.want != "" {
			require.Contains(t, got, step.want, "step %d", i)
		}
	}
	requireKeysEverywhere(t, c, "chf", "1,2,3")
}
