package e2e

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/stretchr/testify/require"
)

// TestCompatCommitBoundIntoALivePortalOfAFailedBlock: in a failed block,
// a COMMIT bound into a named portal that still exists is refused by
// PostgreSQL (42P03) and the block stays, failed, for a ROLLBACK TO;
// after it the block goes on and commits. Through Ordo the same, on every
// node (a review thought Ordo ended its record of the block at such a
// Bind).
func TestCompatCommitBoundIntoALivePortalOfAFailedBlock(t *testing.T) {
	t.Parallel()
	for _, protocol := range []string{"dbsm-si", "dbsm-rc"} {
		t.Run(protocol, func(t *testing.T) {
			t.Parallel()
			commitIntoALivePortalOfAFailedBlock(t, protocol)
		})
	}
}

func commitIntoALivePortalOfAFailedBlock(t *testing.T, protocol string) {
	sb := startSideBySide(t, protocol)
	o, p := sb.conns(t)
	same(t, o, p, "create table fp(id int primary key, v text)")
	ho, hp := sb.hijacked(t)
	q := func(sql string) []pgproto3.FrontendMessage {
		return []pgproto3.FrontendMessage{&pgproto3.Query{String: sql}}
	}
	for k, live := range [][]pgproto3.FrontendMessage{
		// A portal bound and never executed.
		{&pgproto3.Parse{Name: "p1", Query: "select 1"}, &pgproto3.Bind{DestinationPortal: "p1", PreparedStatement: "p1"}, &pgproto3.Sync{}},
		// A portal suspended after its first row.
		{&pgproto3.Parse{Name: "p1", Query: "select generate_series(1, 10)"}, &pgproto3.Bind{DestinationPortal: "p1", PreparedStatement: "p1"},
			&pgproto3.Execute{Portal: "p1", MaxRows: 1}, &pgproto3.Sync{}},
	} {
		steps := [][]pgproto3.FrontendMessage{
			q(fmt.Sprintf("begin; insert into fp values (%d, 'a'); savepoint s", 10*k+1)),
			live,
			q("select 1/0"),
			{&pgproto3.Parse{Name: "c", Query: "commit"}, &pgproto3.Bind{DestinationPortal: "p1", PreparedStatement: "c"},
				&pgproto3.Execute{Portal: "p1"}, &pgproto3.Sync{}},
			q("rollback to savepoint s"),
			q(fmt.Sprintf("insert into fp values (%d, 'b')", 10*k+2)),
			q("commit"),
			{&pgproto3.Close{ObjectType: 'S', Name: "p1"}, &pgproto3.Close{ObjectType: 'S', Name: "c"}, &pgproto3.Sync{}},
		}
		for i, st := range steps {
			outO, outP := exchangeAll(t, ho, st), exchangeAll(t, hp, st)
			require.Equal(t, outP, outO, "case %d, step %d: through Ordo and on PostgreSQL", k+1, i+1)
		}
	}
	same(t, o, p, "select * from fp order by id")
	sb.c.waitConverged()
	want := sb.c.checksum(0, "fp")
	for i := 1; i < 3; i++ {
		require.Equal(t, want, sb.c.checksum(i, "fp"), "fp on node %d", i+1)
	}
	require.Zero(t, sb.c.unreplicated(0))
}
