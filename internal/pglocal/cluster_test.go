package pglocal

import (
	"context"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

func TestStartThreeServers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	began := time.Now()
	c, err := Start(ctx, Options{N: 3})
	require.NoError(t, err)
	t.Logf("3 servers (%s, %s) started in %s", c.Version, c.BinDir, time.Since(began))
	defer c.Stop()

	ports := map[int]bool{}
	for _, s := range c.Servers {
		require.False(t, ports[s.Port], "two servers on port %d", s.Port)
		ports[s.Port] = true
		conn, err := pgx.Connect(ctx, s.DSN("postgres"))
		require.NoError(t, err, s.Name)
		var walLevel, prepared, version string
		require.NoError(t, conn.QueryRow(ctx, "SELECT current_setting('wal_level'), current_setting('max_prepared_transactions'), current_setting('server_version_num')").Scan(&walLevel, &prepared, &version))
		require.Equal(t, "logical", walLevel)
		require.Equal(t, "200", prepared)
		v, _ := strconv.Atoi(version)
		require.GreaterOrEqual(t, v, 150000)
		require.Equal(t, c.Version.Major, v/10000, "Cluster.Version %s, server_version_num %d", c.Version, v)
		var method string
		require.NoError(t, conn.QueryRow(ctx, "SELECT current_setting('password_encryption')").Scan(&method))
		require.Equal(t, "scram-sha-256", method)
		require.NoError(t, conn.Close(ctx))
	}

	// A wrong password is refused: SCRAM authentication is really on.
	bad := strings.Replace(c.Servers[0].DSN("postgres"), ":ordo@", ":wrong@", 1)
	_, err = pgx.Connect(ctx, bad)
	require.Error(t, err)
	require.Contains(t, err.Error(), "password authentication failed")

	dir := c.Dir
	require.NoError(t, c.Stop())
	for _, s := range c.Servers {
		require.False(t, s.Running())
		_, err := net.DialTimeout("tcp", s.Addr(), time.Second)
		require.Error(t, err, "%s still listening after Stop", s.Name)
	}
	_, err = os.Stat(dir)
	require.True(t, os.IsNotExist(err), "temporary directory %s left behind", dir)
}

func TestKeptDataDirectory(t *testing.T) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "ordo-pglocal-test-")
	require.NoError(t, err)
	defer os.RemoveAll(dir)

	c, err := Start(ctx, Options{N: 1, Dir: dir})
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, c.Servers[0].DSN("postgres"))
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "CREATE TABLE kept (id int primary key); INSERT INTO kept VALUES (42)")
	require.NoError(t, err)
	conn.Close(ctx)
	require.NoError(t, c.Stop())

	c, err = Start(ctx, Options{N: 1, Dir: dir})
	require.NoError(t, err)
	defer c.Stop()
	conn, err = pgx.Connect(ctx, c.Servers[0].DSN("postgres"))
	require.NoError(t, err)
	defer conn.Close(ctx)
	var id int
	require.NoError(t, conn.QueryRow(ctx, "SELECT id FROM kept").Scan(&id))
	require.Equal(t, 42, id)
}

func TestPortInUseIsAClearError(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = Start(ctx, Options{N: 1, BasePort: port})
	require.Error(t, err)
	require.Contains(t, err.Error(), "in use")
}

func TestKillAndRestart(t *testing.T) {
	ctx := context.Background()
	c, err := Start(ctx, Options{N: 1})
	require.NoError(t, err)
	defer c.Stop()
	s := c.Servers[0]
	conn, err := pgx.Connect(ctx, s.DSN("postgres"))
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "CREATE TABLE survives (id int primary key); INSERT INTO survives VALUES (1)")
	require.NoError(t, err)
	procs := descendants(s.cmd.Process.Pid)
	require.NotEmpty(t, procs, "the backend and the auxiliary processes")
	s.Kill()
	require.False(t, s.Running())
	// Every process is gone when Kill returns, the open session's backend
	// included (it leads its own process group), so nothing answers.
	for _, pid := range procs {
		require.False(t, alive(pid), "process %d outlived Kill", pid)
	}
	_, err = conn.Exec(ctx, "SELECT 1")
	require.Error(t, err, "a backend answered after Kill")
	require.NoError(t, s.Restart(ctx))
	conn, err = pgx.Connect(ctx, s.DSN("postgres"))
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM survives").Scan(&n))
	require.Equal(t, 1, n, "a committed row was lost in the crash")
}

func TestParseVersion(t *testing.T) {
	for out, want := range map[string]Version{
		"postgres (PostgreSQL) 15.14 (Debian 15.14-0+deb12u1)\n": {15, "15.14"},
		"postgres (PostgreSQL) 18.6\n":                           {18, "18.6"},
		"postgres (PostgreSQL) 19devel\n":                        {19, "19devel"},
		"postgres (PostgreSQL) 18beta1\n":                        {18, "18beta1"},
	} {
		got, ok := parseVersion(out)
		require.True(t, ok, out)
		require.Equal(t, want, got, out)
	}
	for _, out := range []string{"", "postgres (PostgreSQL)", "postgres (PostgreSQL) devel", "postgres 18.6"} {
		_, ok := parseVersion(out)
		require.False(t, ok, out)
	}
}

func TestMissingBinariesIsAClearError(t *testing.T) {
	t.Setenv("ORDO_PG_BIN", t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := Start(ctx, Options{N: 1})
	require.ErrorIs(t, err, ErrNoBinaries)
	require.Contains(t, err.Error(), "apt-get install postgresql-15")
}

// TestPanicLeavesNoServer runs a child test binary that starts a server and
// panics; the server must not outlive it.
func TestPanicLeavesNoServer(t *testing.T) {
	if os.Getenv("ORDO_PGLOCAL_PANIC_CHILD") == "1" {
		c, err := Start(context.Background(), Options{N: 1})
		if err != nil {
			panic(err)
		}
		os.Stdout.WriteString("PORT=" + strconv.Itoa(c.Servers[0].Port) + "\n")
		panic("child test panics with a running server")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestPanicLeavesNoServer$")
	cmd.Env = append(os.Environ(), "ORDO_PGLOCAL_PANIC_CHILD=1")
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "child should have panicked")
	m := regexp.MustCompile(`PORT=(\d+)`).FindSubmatch(out)
	require.NotNil(t, m, "child output: %s", out)
	addr := "127.0.0.1:" + string(m[1])
	require.Eventually(t, func() bool {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err != nil
	}, 15*time.Second, 100*time.Millisecond, "server of a panicked test still listening on %s", addr)
}

// A server's port must stay free while it is down (TestKillAndRestart,
// the e2e crash tests): a port below the kernel's ephemeral range is one
// no outgoing connection can take meanwhile.
func TestFreePortsAreBelowTheEphemeralRange(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := Start(ctx, Options{N: 2})
	require.NoError(t, err)
	defer c.Stop()
	for _, s := range c.Servers {
		require.Less(t, s.Port, 32768, "%s listens on %d, in the ephemeral range", s.Name, s.Port)
	}
}
