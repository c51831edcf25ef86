package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/stretchr/testify/require"
)

// TestBackendEndsWithItsClient: whatever state a client leaves its session
// in when its connection drops (no Terminate), the PostgreSQL backend
// Ordo opened for it ends too, and so does the session. A backend kept
// after its client left holds its locks and, one at a time, uses up
// PostgreSQL's max_connections (docs/compatibility.md, cause 16).
func TestBackendEndsWithItsClient(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm")
	ctx := context.Background()
	setup := c.connect(0)
	for _, sql := range []string{
		"CREATE TABLE gone (k int PRIMARY KEY, v int NOT NULL)",
		"INSERT INTO gone SELECT g, 0 FROM generate_series(1, 10) g",
	} {
		_, err := setup.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	c.waitConverged()
	q := func(sql string) pgproto3.FrontendMessage { return &pgproto3.Query{String: sql} }
	ext := func(sql string) []pgproto3.FrontendMessage {
		return []pgproto3.FrontendMessage{&pgproto3.Parse{Query: sql}, &pgproto3.Bind{}, &pgproto3.Execute{}}
	}
	cat := func(parts ...any) []pgproto3.FrontendMessage {
		var out []pgproto3.FrontendMessage
		for _, p := range parts {
			switch p := p.(type) {
			case pgproto3.FrontendMessage:
				out = append(out, p)
			case []pgproto3.FrontendMessage:
				out = append(out, p...)
			}
		}
		return out
	}
	cases := []struct {
		name string
		// msgs are sent and flushed; replies are read for wait, then the
		// socket is closed.
		msgs []pgproto3.FrontendMessage
		wait time.Duration
	}{
		{"idle", nil, 0},
		{"idle in a block", cat(q("BEGIN"), q("UPDATE gone SET v = v + 1 WHERE k = 1")), 300 * time.Millisecond},
		{"aborted block", cat(q("BEGIN"), q("SELECT 1/0")), 300 * time.Millisecond},
		{"COMMIT sent, reply not read", cat(q("BEGIN"), q("UPDATE gone SET v = v + 1 WHERE k = 2"), q("COMMIT")), 0},
		{"autocommit update sent", cat(q("UPDATE gone SET v = v + 1 WHERE k = 3")), 0},
		{"simple COPY FROM STDIN", cat(q("COPY gone FROM STDIN"), &pgproto3.CopyData{Data: []byte("100\t1\n")}), 300 * time.Millisecond},
		{"COPY FROM STDIN failed", cat(q("COPY gone FROM STDIN"), &pgproto3.CopyFail{Message: "no"}), 300 * time.Millisecond},
		{"extended COPY FROM STDIN", cat(ext("COPY gone FROM STDIN"), &pgproto3.Sync{}, &pgproto3.CopyData{Data: []byte("101\t1\n")}), 300 * time.Millisecond},
		{"extended COPY failed, no Sync", cat(ext("COPY gone FROM STDIN"), &pgproto3.Sync{}, &pgproto3.CopyFail{Message: "no"}), 300 * time.Millisecond},
		{"sleeping", cat(q("SELECT pg_sleep(3)")), 200 * time.Millisecond},
		{"sleeping in a block", cat(q("BEGIN"), q("UPDATE gone SET v = v + 1 WHERE k = 4"), q("SELECT pg_sleep(3)")), 200 * time.Millisecond},
		{"batch without Sync", cat(ext("UPDATE gone SET v = v + 1 WHERE k = 5"), ext("UPDATE gone SET v = v + 1 WHERE k = 6")), 200 * time.Millisecond},
		{"batch with Sync, reply not read", cat(ext("SELECT 1"), ext("UPDATE gone SET v = v + 1 WHERE k = 7"), &pgproto3.Sync{}), 0},
		{"temporary table", cat(q("CREATE TEMP TABLE tt(x int)"), q("INSERT INTO tt VALUES (1)"), q("DROP TABLE tt")), 300 * time.Millisecond},
		{"temporary table with replicated write", cat(q("CREATE TEMP TABLE tt(x int)"), q("BEGIN"), q("INSERT INTO tt VALUES (1)"), q("UPDATE gone SET v = v + 1 WHERE k = 8"), q("COMMIT")), 300 * time.Millisecond},
		{"big result not read", cat(q("SELECT g, repeat('x', 100) FROM generate_series(1, 500000) g")), 200 * time.Millisecond},
		{"DDL sent", cat(q("CREATE TABLE gone_ddl (k int PRIMARY KEY)")), 0},
	}
	direct := c.direct(0)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pc, err := pgconn.Connect(ctx, c.dsn(0))
			require.NoError(t, err)
			pid := pc.PID()
			h, err := pc.Hijack()
			require.NoError(t, err)
			for _, m := range tc.msgs {
				h.Frontend.Send(m)
			}
			require.NoError(t, h.Frontend.Flush())
			if tc.wait > 0 {
				_ = h.Conn.SetReadDeadline(time.Now().Add(tc.wait))
				for {
					if _, err := h.Frontend.Receive(); err != nil {
						break
					}
				}
			}
			require.NoError(t, h.Conn.Close())
			deadline := time.Now().Add(8 * time.Second)
			for {
				var n int
				var state string
				require.NoError(t, direct.QueryRow(ctx, "SELECT count(*), coalesce(max(concat_ws(' | ', backend_type, usename, application_name, state, query)), '') FROM pg_stat_activity WHERE pid = $1", int64(pid)).Scan(&n, &state))
				if n == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("backend %d outlived its client: %s", pid, state)
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
	c.waitConverged()
}
