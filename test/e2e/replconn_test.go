package e2e

import (
	"context"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/stretchr/testify/require"
)

// TestReplicationConnectionsAreRelayed: a replication connection through
// a node (replication=database, as pg_recvlogical and drivers' replication
// APIs open) speaks the replication protocol to the node's own
// PostgreSQL: a slot is created, a logical stream started and read, and
// stopped (compatibility.md, cause 11: Ordo wrapped its commands as SQL
// and PostgreSQL refused them inside a transaction).
func TestReplicationConnectionsAreRelayed(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := c.connect(0).Exec(ctx, "CREATE TABLE rc (k int PRIMARY KEY, v text)")
	require.NoError(t, err)

	rc, err := pgconn.Connect(ctx, c.dsn(0)+"&replication=database")
	require.NoError(t, err)
	defer rc.Close(context.Background())
	res, err := rc.Exec(ctx, "IDENTIFY_SYSTEM").ReadAll()
	require.NoError(t, err)
	require.Len(t, res[0].Rows, 1)
	_, err = rc.Exec(ctx, "CREATE_REPLICATION_SLOT rc_slot LOGICAL test_decoding NOEXPORT_SNAPSHOT").ReadAll()
	require.NoError(t, err)

	// A write through the node (replicated as usual) appears in the
	// node's own decoded stream.
	_, err = c.connect(0).Exec(ctx, "INSERT INTO rc VALUES (1, 'through the stream')")
	require.NoError(t, err)

	h, err := rc.Hijack()
	require.NoError(t, err)
	defer h.Conn.Close()
	h.Frontend.Send(&pgproto3.Query{String: "START_REPLICATION SLOT rc_slot LOGICAL 0/0"})
	require.NoError(t, h.Frontend.Flush())
	_ = h.Conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	var sawBoth bool
	var stream strings.Builder
	for !strings.Contains(stream.String(), "through the stream") {
		msg, err := h.Frontend.Receive()
		require.NoError(t, err, "stream so far: %s", stream.String())
		switch m := msg.(type) {
		case *pgproto3.CopyBothResponse:
			sawBoth = true
		case *pgproto3.CopyData:
			if len(m.Data) > 25 && m.Data[0] == 'w' { // XLogData: header of 25 bytes
				stream.Write(m.Data[25:])
				stream.WriteByte('\n')
			}
		case *pgproto3.ErrorResponse:
			t.Fatalf("START_REPLICATION: %s %s", m.Code, m.Message)
		}
	}
	require.True(t, sawBoth)
	// A standby status update, then CopyDone: the stream ends as
	// PostgreSQL ends it.
	status := make([]byte, 34)
	status[0] = 'r'
	binary.BigEndian.PutUint64(status[1:], 0)
	h.Frontend.Send(&pgproto3.CopyData{Data: status})
	h.Frontend.Send(&pgproto3.CopyDone{})
	untilReady(t, h, "after CopyDone")
	h.Frontend.Send(&pgproto3.Query{String: "DROP_REPLICATION_SLOT rc_slot"})
	untilReady(t, h, "DROP_REPLICATION_SLOT")
	c.waitConverged()
}

// untilReady flushes what was sent and reads the replies up to
// ReadyForQuery, failing on an ErrorResponse.
func untilReady(t *testing.T, h *pgconn.HijackedConn, what string) {
	t.Helper()
	require.NoError(t, h.Frontend.Flush())
	for {
		msg, err := h.Frontend.Receive()
		require.NoError(t, err, what)
		switch m := msg.(type) {
		case *pgproto3.ErrorResponse:
			t.Fatalf("%s: %s %s", what, m.Code, m.Message)
		case *pgproto3.ReadyForQuery:
			return
		}
	}
}
