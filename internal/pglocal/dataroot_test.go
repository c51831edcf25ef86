package pglocal

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Servers without fsync live on a RAM filesystem when the host has one
// with room; servers with fsync, or when ORDO_PG_TMPDIR=disk, on disk.
func TestDataDirectoriesWhereTheirFsyncBelongs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	within := func(dir, root string) bool {
		rel, err := filepath.Rel(root, dir)
		return err == nil && !strings.HasPrefix(rel, "..")
	}

	c, err := Start(ctx, Options{N: 1})
	require.NoError(t, err)
	if ramWithRoom("/dev/shm") {
		require.True(t, within(c.Dir, "/dev/shm/ordo-pg"), "a server without fsync is in %s, not on /dev/shm", c.Dir)
		require.True(t, isRAM(c.Servers[0].DataDir))
		b, err := os.ReadFile(filepath.Join(c.Dir, ownerFile))
		require.NoError(t, err)
		require.Equal(t, strconv.Itoa(os.Getpid()), strings.TrimSpace(string(b)))
	} else {
		require.True(t, within(c.Dir, os.TempDir()), "no RAM filesystem with room: %s should be under %s", c.Dir, os.TempDir())
	}
	require.NoError(t, c.Stop())

	c, err = Start(ctx, Options{N: 1, Fsync: true})
	require.NoError(t, err)
	require.True(t, within(c.Dir, os.TempDir()), "a server with fsync is in %s, not under %s", c.Dir, os.TempDir())
	require.NoError(t, c.Stop())

	t.Setenv(DataRootEnv, "disk")
	c, err = Start(ctx, Options{N: 1})
	require.NoError(t, err)
	require.True(t, within(c.Dir, os.TempDir()), "%s=disk: %s is not under %s", DataRootEnv, c.Dir, os.TempDir())
	require.NoError(t, c.Stop())

	root, err := os.MkdirTemp("", "ordo-pg-root-") // t.TempDir's parent is 0700: not for the server user
	require.NoError(t, err)
	defer os.RemoveAll(root)
	require.NoError(t, os.Chmod(root, 0o755))
	t.Setenv(DataRootEnv, filepath.Join(root, "servers"))
	c, err = Start(ctx, Options{N: 1})
	require.NoError(t, err)
	require.True(t, within(c.Dir, filepath.Join(root, "servers")), "%s chose %s: the cluster is in %s", DataRootEnv, root, c.Dir)
	require.NoError(t, c.Stop())
}

// A cluster directory whose owner died without Stop is removed by the next
// Start on that RAM root; the directories of live owners, templates and
// directories being made (no owner file yet) are left alone.
func TestClustersOfDeadOwnersAreSwept(t *testing.T) {
	root := t.TempDir()
	dead := exec.Command("true")
	require.NoError(t, dead.Run())
	mkCluster := func(name, owner string) string {
		dir := filepath.Join(root, name)
		require.NoError(t, os.MkdirAll(filepath.Join(dir, "node1"), 0o755))
		if owner != "" {
			require.NoError(t, os.WriteFile(filepath.Join(dir, ownerFile), []byte(owner+"\n"), 0o644))
		}
		return dir
	}
	gone := mkCluster("ordo-pg-gone", strconv.Itoa(dead.Process.Pid))
	live := mkCluster("ordo-pg-live", strconv.Itoa(os.Getppid()))
	tmpl := mkCluster("ordo-pg-template-abc", "")
	other := mkCluster("not-ours", strconv.Itoa(dead.Process.Pid))
	mine := mkCluster("ordo-pg-mine", "")

	require.NoError(t, markOwner(root, mine))
	_, err := os.Stat(gone)
	require.True(t, os.IsNotExist(err), "the cluster of a dead owner was left")
	for _, d := range []string{live, tmpl, other, mine} {
		_, err := os.Stat(d)
		require.NoError(t, err, "%s was removed", d)
	}
	b, err := os.ReadFile(filepath.Join(mine, ownerFile))
	require.NoError(t, err)
	require.Equal(t, strconv.Itoa(os.Getpid()), strings.TrimSpace(string(b)))
}
