package e2e

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// TestNodeOnAUnixSocket: a node whose postgres setting names a socket
// directory (host=/var/run/postgresql, as on most installations) relays
// its clients' sessions through that socket, as libpq would connect:
// passwords are still checked by PostgreSQL, writes replicate, and a
// cancel request reaches the backend. The relay used to dial
// "/dir:port" over TCP and refuse every client.
func TestNodeOnAUnixSocket(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 2, "dbsm-si")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c.nodes[0].Stop()
	c.cfgs[0].Postgres = c.pg.Servers[0].SocketDSN("postgres")
	c.startNode(0)

	_, err := c.direct(0).Exec(ctx, `CREATE ROLE sockuser LOGIN PASSWORD 'sockpass'`)
	require.NoError(t, err)
	bad, err := pgx.Connect(ctx, "postgres://sockuser:wrong@"+c.cfgs[0].Listen+"/postgres?sslmode=disable")
	if err == nil {
		bad.Close(ctx)
	}
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "a wrong password through the socket: %v", err)
	require.Equal(t, "28P01", pgErr.Code, "PostgreSQL checks the password of a session relayed through its socket")

	conn := c.connect(0)
	_, err = conn.Exec(ctx, `CREATE TABLE sock (k int PRIMARY KEY, v text)`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `INSERT INTO sock VALUES (1, 'through the socket')`)
	require.NoError(t, err)
	var addr *string
	require.NoError(t, conn.QueryRow(ctx, `SELECT client_addr::text FROM pg_stat_activity WHERE pid = pg_backend_pid()`).Scan(&addr))
	require.Nil(t, addr, "the session's backend is connected through the Unix-domain socket")

	c.waitConverged()
	var v string
	require.NoError(t, c.direct(1).QueryRow(ctx, `SELECT v FROM sock WHERE k = 1`).Scan(&v))
	require.Equal(t, "through the socket", v)

	// A cancel request goes to the backend through the socket too.
	sleepCtx, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	done := make(chan error, 1)
	go func() { _, err := conn.Exec(sleepCtx, `SELECT pg_sleep(20)`); done <- err }()
	time.Sleep(500 * time.Millisecond)
	require.NoError(t, conn.PgConn().CancelRequest(ctx))
	select {
	case err := <-done:
		require.True(t, errors.As(err, &pgErr), "pg_sleep: %v", err)
		require.Equal(t, "57014", pgErr.Code, "canceled")
	case <-time.After(15 * time.Second):
		t.Fatal("the cancel request did not reach the backend")
	}
}
