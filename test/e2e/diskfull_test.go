package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// TestRaftLogDiskFull: node 3's data directory (its Raft log) is on a
// small file system that fills up while the cluster commits large
// transactions. Nothing may be acknowledged that is not durable: node 3
// stops with an error that says what happened, the two others keep
// committing, and once there is room again node 3 starts and catches up
// with identical data.
func TestRaftLogDiskFull(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("mounts a small tmpfs for node 3's data directory: needs root (CI runs as root)")
	}
	c := startProcCluster(t, 3, "dbsm-si")
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.dsn(0))
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE TABLE blob (id int PRIMARY KEY, v text)")
	require.NoError(t, err)

	// Node 3's data directory onto a 48 MiB tmpfs, then filled but for
	// what its log's current segment already holds.
	c.kill(2)
	dir := filepath.Join(c.dir, "node3")
	filler := onSmallTmpfs(t, dir, 48<<20, 2<<20)
	c.start(2)

	// 1 MiB rows until node 3's log needs a new segment it cannot have.
	big := strings.Repeat("x", 1<<20)
	for i := 1; i <= 40; i++ {
		_, err := conn.Exec(ctx, "INSERT INTO blob VALUES ($1, $2)", i, big)
		require.NoError(t, err, "row %d: the majority keeps committing", i)
	}
	// Node 3 stops and says why (it went on serving clients, answering
	// every commit with 08007, and logged nothing).
	pid := c.procs[2].Process.Pid
	require.Eventually(t, func() bool {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		return err == nil && got == pid && ws.Exited() && ws.ExitStatus() != 0
	}, 30*time.Second, 100*time.Millisecond, "node 3 goes on without its Raft log")
	c.procs[2] = nil
	log, err := os.ReadFile(filepath.Join(c.dir, "node3.log"))
	require.NoError(t, err)
	require.Contains(t, string(log), "the total order failed")
	require.Contains(t, string(log), "no space left on device")
	_, err = conn.Exec(ctx, "INSERT INTO blob VALUES (41, 'after')")
	require.NoError(t, err, "the majority keeps committing")

	// Room again (the volume grown): node 3 starts and catches up.
	require.NoError(t, os.Remove(filler))
	out, err := exec.Command("mount", "-o", "remount,size=160m", dir).CombinedOutput()
	require.NoError(t, err, "remount: %s", out)
	c.start(2)
	require.Eventually(t, func() bool {
		return c.settled("SELECT count(*)::text || ':' || coalesce(md5(string_agg(md5(v), '' ORDER BY id)), '') FROM blob")
	}, 60*time.Second, 500*time.Millisecond, "node 3 did not catch up:\n%s", c.state())
}

// TestPostgresDiskFull: node 3's PostgreSQL data directory is on a small
// file system that fills up while node 3 applies what the others commit.
// The others keep committing; node 3 applies nothing it cannot make
// durable and says why; once there is room again (and its PostgreSQL and
// itself are started again, as a supervisor would) it catches up with
// identical data.
func TestPostgresDiskFull(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("mounts a small tmpfs for node 3's PostgreSQL: needs root (CI runs as root)")
	}
	c := startProcCluster(t, 3, "dbsm-si")
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.dsn(0))
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE TABLE blob (id int PRIMARY KEY, v text)")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "ALTER TABLE blob ALTER COLUMN v SET STORAGE EXTERNAL") // not compressed
	require.NoError(t, err)
	require.Eventually(t, func() bool { return c.settled("SELECT count(*)::text FROM blob") }, 30*time.Second, 200*time.Millisecond)

	// Node 3's PostgreSQL moves onto a tmpfs with 6 MiB to spare.
	c.kill(2)
	pg := c.pg.Servers[2]
	require.NoError(t, pg.Stop())
	dir := pg.DataDir
	du, err := exec.Command("du", "-sb", dir).Output()
	require.NoError(t, err)
	var used int64
	_, err = fmt.Sscan(string(du), &used)
	require.NoError(t, err)
	filler := onSmallTmpfs(t, dir, used+64<<20, 6<<20)
	require.NoError(t, pg.Restart(ctx))
	c.start(2)

	// 1 MiB rows of random text until node 3's PostgreSQL has no room.
	row := make([]byte, 1<<19)
	for i := 1; i <= 30; i++ {
		_, _ = rand.Read(row)
		_, err := conn.Exec(ctx, "INSERT INTO blob VALUES ($1, $2)", i, hex.EncodeToString(row))
		require.NoError(t, err, "row %d: the majority keeps committing", i)
	}
	// Node 3 stops, and says why: not that its database is inconsistent
	// (it said so, and it is not: it applied nothing it could not make
	// durable, and replays the rest).
	require.Eventually(t, func() bool { return c.exited(2) }, 30*time.Second, 100*time.Millisecond, "node 3 goes on without room for its applies")
	log, err := os.ReadFile(filepath.Join(c.dir, "node3.log"))
	require.NoError(t, err)
	// PostgreSQL does not always name the cause ("wrote only 4096 of
	// 8192 bytes" for a short write); the node does.
	require.Contains(t, string(log), "PostgreSQL's disk is full: make room")
	require.Contains(t, string(log), "stopped carrying out the total order")
	require.NotContains(t, string(log), "inconsistent")
	_, err = conn.Exec(ctx, "INSERT INTO blob VALUES (41, 'after')")
	require.NoError(t, err, "the majority keeps committing")

	// Room again: node 3 (and its PostgreSQL, had it stopped) started
	// again, as a supervisor would.
	require.NoError(t, os.Remove(filler))
	out, err := exec.Command("mount", "-o", "remount,size=512m", dir).CombinedOutput()
	require.NoError(t, err, "remount: %s", out)
	if !pg.Running() {
		require.NoError(t, pg.Restart(ctx))
	}
	c.kill(2)
	c.start(2)
	require.Eventually(t, func() bool {
		return c.settled("SELECT count(*)::text || ':' || coalesce(md5(string_agg(md5(v), '' ORDER BY id)), '') FROM blob")
	}, 90*time.Second, 500*time.Millisecond, "node 3 did not catch up:\n%s", c.state())
}

// onSmallTmpfs moves directory dir onto a tmpfs of size bytes (owned as
// dir is, so PostgreSQL's unprivileged user keeps its data directory),
// unmounted when the test ends, and fills it with one file but for spare
// bytes; it returns that file, whose removal gives the room back.
func onSmallTmpfs(t *testing.T, dir string, size, spare int64) (filler string) {
	t.Helper()
	var owner syscall.Stat_t
	require.NoError(t, syscall.Stat(dir, &owner))
	require.NoError(t, os.Rename(dir, dir+".disk"))
	require.NoError(t, os.Mkdir(dir, 0o700))
	require.NoError(t, os.Chown(dir, int(owner.Uid), int(owner.Gid)))
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d,mode=0700,uid=%d,gid=%d", size, owner.Uid, owner.Gid), "tmpfs", dir).CombinedOutput()
	require.NoError(t, err, "mount: %s", out)
	t.Cleanup(func() { _ = exec.Command("umount", "-l", dir).Run() })
	out, err = exec.Command("cp", "-a", dir+".disk/.", dir).CombinedOutput()
	require.NoError(t, err, "cp: %s", out)
	filler = filepath.Join(dir, "filler")
	var st syscall.Statfs_t
	require.NoError(t, syscall.Statfs(dir, &st))
	free := int64(st.Bavail) * st.Bsize
	out, err = exec.Command("fallocate", "-l", fmt.Sprint(free-spare), filler).CombinedOutput()
	require.NoError(t, err, "fallocate: %s", out)
	return filler
}
