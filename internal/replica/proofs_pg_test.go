package replica

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/internal/apply"
	"github.com/ordo-db/ordo/internal/pglocal"
)

// The replica package's tests are of pure logic but these, which need a
// PostgreSQL server: started by the first of them, stopped after all.
var (
	pgOnce    sync.Once
	pgServers *pglocal.Cluster
	pgErr     error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if pgServers != nil {
		pgServers.Stop()
	}
	os.Exit(code)
}

func postgres(t *testing.T) *pglocal.Server {
	t.Helper()
	pgOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		pgServers, pgErr = pglocal.Start(ctx, pglocal.Options{N: 1})
	})
	require.NoError(t, pgErr, "these tests need PostgreSQL")
	t.Logf("%s (%s)", pgServers.Version, pgServers.BinDir)
	return pgServers.Servers[0]
}

// countingConn counts the writes a pgx connection makes to its socket.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

// TestCommitWithProofOneRoundTrip: a local commit's COMMIT PREPARED and
// its proof row go to PostgreSQL in one write (dbsm-rc shows the commit
// only once its proof row is in: a second round trip was on the client's
// path), the rows (its own, after earlier ones not written yet) are
// written exactly when the commit is, and a label is kept, quotes and
// braces included (none stays NULL).
func TestCommitWithProofOneRoundTrip(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := postgres(t)
	admin, err := pgx.Connect(ctx, srv.DSN("postgres"))
	require.NoError(t, err)
	defer admin.Close(context.Background())
	require.NoError(t, apply.Bootstrap(ctx, admin))
	_, err = admin.Exec(ctx, "DROP TABLE IF EXISTS proof_t; CREATE TABLE proof_t (k int PRIMARY KEY); DELETE FROM _ordo.applied")
	require.NoError(t, err)

	prepare := func(gid string, k int) {
		c, err := pgx.Connect(ctx, srv.DSN("postgres"))
		require.NoError(t, err)
		defer c.Close(context.Background())
		_, err = c.Exec(ctx, "BEGIN")
		require.NoError(t, err)
		_, err = c.Exec(ctx, "INSERT INTO proof_t VALUES ($1)", k)
		require.NoError(t, err)
		_, err = c.Exec(ctx, "PREPARE TRANSACTION '"+gid+"'")
		require.NoError(t, err)
	}

	var writes atomic.Int64
	cfg, err := pgx.ParseConfig(srv.DSN("postgres"))
	require.NoError(t, err)
	dial := cfg.DialFunc
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{c, &writes}, nil
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, "SET synchronous_commit = off") // as the loop's connection
	require.NoError(t, err)

	proofOf := func(seqno int) (gid string, label *string, found bool) {
		err := admin.QueryRow(ctx, "SELECT gid, label FROM _ordo.applied WHERE seqno = $1", seqno).Scan(&gid, &label)
		if errors.Is(err, pgx.ErrNoRows) {
			return "", nil, false
		}
		require.NoError(t, err)
		return gid, label, true
	}
	committed := func(k int) bool {
		var n int
		require.NoError(t, admin.QueryRow(ctx, "SELECT count(*) FROM proof_t WHERE k = $1", k).Scan(&n))
		return n == 1
	}

	prepare("ordo_test_1", 1)
	require.NoError(t, commitWithProof(ctx, conn, "COMMIT PREPARED 'ordo_test_1'", []proof{{11, "ordo_test_1", "label-1"}}))
	require.True(t, committed(1))
	gid, label, found := proofOf(11)
	require.True(t, found, "the proof row of a commit")
	require.Equal(t, "ordo_test_1", gid)
	require.NotNil(t, label)
	require.Equal(t, "label-1", *label)

	prepare("ordo_test_2", 2)
	before := writes.Load()
	require.NoError(t, commitWithProof(ctx, conn, "COMMIT PREPARED 'ordo_test_2'", []proof{{12, "ordo_test_2", ""}}))
	require.Equal(t, int64(1), writes.Load()-before, "the COMMIT PREPARED and its proof row in one write")
	require.True(t, committed(2))
	_, label, found = proofOf(12)
	require.True(t, found)
	require.Nil(t, label, "no label: NULL")

	// A COMMIT PREPARED that fails writes no proof row: PostgreSQL skips
	// the rest of the batch.
	err = commitWithProof(ctx, conn, "COMMIT PREPARED 'ordo_test_none'", []proof{{13, "ordo_test_earlier", ""}, {14, "ordo_test_none", ""}})
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "42704", pe.Code)
	_, _, found = proofOf(13)
	require.False(t, found, "an earlier proof row, with a commit that failed: written later, apart")
	_, _, found = proofOf(14)
	require.False(t, found, "a proof row without its commit")

	// The connection is usable afterwards. A proof row not written yet
	// (an earlier local commit's) goes with the next one, before it.
	prepare("ordo_test_4", 4)
	require.NoError(t, commitWithProof(ctx, conn, "COMMIT PREPARED 'ordo_test_4'", []proof{{13, "ordo_test_earlier", "it's \"quoted\", {braced}"}, {14, "ordo_test_4", ""}}))
	require.True(t, committed(4))
	_, label, found = proofOf(13)
	require.True(t, found, "the earlier proof row")
	require.NotNil(t, label)
	require.Equal(t, "it's \"quoted\", {braced}", *label)
	_, _, found = proofOf(14)
	require.True(t, found)
}
