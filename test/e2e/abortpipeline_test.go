package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/stretchr/testify/require"
)

// TestApplyAbortsAWrappedStatementBeforeItsSync: an autocommit update sent
// with the extended protocol and a Flush, its Sync not sent yet (libpq and
// psycopg pipelines wait for results before they sync), runs in a block
// Ordo opened for it, as the first statement of its unit or after a read
// of the same batch. When an apply of a transaction ordered before it
// waits for its row lock, the statement is cancelled (brute force) and the
// apply goes on, even though the statement itself is still waiting for
// another lock: it does not wait for the client's Sync. (With its BEGIN
// sent among the client's messages, the wire layer took the session for
// one outside a transaction until a ReadyForQuery said otherwise, and
// Abort did nothing: the apply waited as long as the other lock was held.)
func TestApplyAbortsAWrappedStatementBeforeItsSync(t *testing.T) {
	t.Parallel()
	for _, afterRead := range []bool{false, true} {
		name := "first"
		if afterRead {
			name = "after a read"
		}
		t.Run(name, func(t *testing.T) { applyAbortsBeforeSync(t, afterRead) })
	}
}

func applyAbortsBeforeSync(t *testing.T, afterRead bool) {
	c := startCluster(t, 3, "dbsm")
	ctx := context.Background()
	setup := c.connect(0)
	_, err := setup.Exec(ctx, "create table ab(id int primary key, v int)")
	require.NoError(t, err)
	_, err = setup.Exec(ctx, "insert into ab values (1, 0), (2, 0)")
	require.NoError(t, err)
	c.waitConverged()

	// Another session of node 1 holds row 2's lock, in a block left open.
	holder := c.connect(0)
	_, err = holder.Exec(ctx, "begin")
	require.NoError(t, err)
	_, err = holder.Exec(ctx, "update ab set v = v + 1 where id = 2")
	require.NoError(t, err)

	pc, err := pgconn.Connect(ctx, c.dsn(0))
	require.NoError(t, err)
	h, err := pc.Hijack()
	require.NoError(t, err)
	defer h.Conn.Close()
	// Row 1 updated, then waiting for row 2: one autocommit unit, a
	// Flush and no Sync.
	var msgs []pgproto3.FrontendMessage
	if afterRead {
		msgs = append(msgs, &pgproto3.Parse{Query: "select 1"}, &pgproto3.Bind{}, &pgproto3.Execute{})
	}
	msgs = append(msgs,
		&pgproto3.Parse{Query: "update ab set v = v + 1 where id = 1"}, &pgproto3.Bind{}, &pgproto3.Execute{},
		&pgproto3.Parse{Query: "update ab set v = v + 1 where id = 2"}, &pgproto3.Bind{}, &pgproto3.Execute{},
		&pgproto3.Flush{})
	for _, m := range msgs {
		h.Frontend.Send(m)
	}
	require.NoError(t, h.Frontend.Flush())
	direct := c.direct(0)
	require.Eventually(t, func() bool {
		var waiting int
		require.NoError(t, direct.QueryRow(ctx,
			"select count(*) from pg_stat_activity where wait_event_type = 'Lock' and query like 'update ab set v = v + 1 where id = 2%'").Scan(&waiting))
		return waiting == 1
	}, 10*time.Second, 20*time.Millisecond, "the pipelined statement waits for row 2")

	// Node 2 commits a write of row 1: its apply on node 1 needs the
	// pipelined statement's lock.
	_, err = c.connect(1).Exec(ctx, "update ab set v = 100 where id = 1")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var v int
		require.NoError(t, direct.QueryRow(ctx, "select v from ab where id = 1").Scan(&v))
		return v == 100
	}, 10*time.Second, 50*time.Millisecond, "the apply on node 1 waited for the pipelined statement")

	// The client learns at its Sync that its transaction was aborted.
	h.Frontend.Send(&pgproto3.Sync{})
	require.NoError(t, h.Frontend.Flush())
	out := exchange(t, h, nil)
	require.Contains(t, out, "40001", out)
	require.True(t, strings.HasSuffix(strings.TrimSpace(out), "Ready I"), out)
	_, err = holder.Exec(ctx, "commit")
	require.NoError(t, err)
	c.waitConverged()
	for i := range c.nodes {
		require.Equal(t, c.checksum(0, "ab"), c.checksum(i, "ab"), "node %d", i+1)
	}
}
