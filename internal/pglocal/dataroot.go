package pglocal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// DataRootEnv names the environment variable that chooses where servers
// without fsync (Options.Fsync false, Options.Dir empty) keep their data
// directories: a directory, or "disk" for os.TempDir(). Unset, they go to
// /dev/shm when it is a RAM filesystem with room (minRAMRoom).
const DataRootEnv = "ORDO_PG_TMPDIR"

// minRAMRoom is the free space a RAM filesystem needs before servers are
// put on it unasked: a 3-node test cluster holds a few hundred MB.
const minRAMRoom = 4 << 30

// ownerFile, in a cluster directory under a RAM root, holds the pid of the
// process that made it, so that a later Start can remove the directory of
// a process that died without Stop (a killed test binary): on a RAM
// filesystem what it left would hold memory until the host restarts.
const ownerFile = "owner.pid"

// dataRoot returns the directory under which a server without fsync keeps
// its data, and whether it is a RAM root (swept of dead owners' clusters).
//
// Why not os.TempDir(): a server's data directory is about a thousand
// files, copied from a template at every start and removed at every stop,
// and the test suites start hundreds. On a host whose disk is ext4 without
// a journal, as the CI machines' are, every file created scans the
// inode table for recently deleted inodes: a copy took 3 s there against
// 0.2 s on /dev/shm, and half the e2e package's CPU was that scan. Fsync
// is off for these servers, so they lose nothing by a RAM filesystem that
// a process crash does not; power loss loses them either way.
func dataRoot() (dir string, ram bool, err error) {
	switch v := os.Getenv(DataRootEnv); v {
	case "disk":
		return os.TempDir(), false, nil
	case "":
		if !ramWithRoom("/dev/shm") {
			return os.TempDir(), false, nil
		}
		dir = "/dev/shm/ordo-pg"
	default:
		dir = v
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", false, fmt.Errorf("pglocal: %s: %w", DataRootEnv, err)
	}
	// MkdirAll leaves an existing directory as it is; another user's umask
	// may have made it 0700, which the server user could not enter.
	if err := os.Chmod(dir, 0o755); err != nil && !errors.Is(err, os.ErrPermission) {
		return "", false, fmt.Errorf("pglocal: %w", err)
	}
	return dir, isRAM(dir), nil
}

// ramWithRoom reports whether dir is a tmpfs with at least minRAMRoom free.
func ramWithRoom(dir string) bool {
	free, ram := tmpfsFree(dir)
	return ram && free >= minRAMRoom
}

func isRAM(dir string) bool {
	_, ram := tmpfsFree(dir)
	return ram
}

// tmpfsMagic is TMPFS_MAGIC of statfs(2).
const tmpfsMagic = 0x01021994

// tmpfsFree returns the bytes free on dir's filesystem, and whether it is
// a tmpfs.
func tmpfsFree(dir string) (uint64, bool) {
	var st syscall.Statfs_t
	if syscall.Statfs(dir, &st) != nil || st.Type != tmpfsMagic {
		return 0, false
	}
	return st.Bavail * uint64(st.Bsize), true
}

// markOwner writes this process's pid into a cluster directory under a RAM
// root, then removes the clusters beside it whose owner has died.
func markOwner(root, clusterDir string) error {
	if err := os.WriteFile(filepath.Join(clusterDir, ownerFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return fmt.Errorf("pglocal: %w", err)
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil // nothing to sweep is no reason to refuse a start
	}
	for _, e := range entries {
		dir := filepath.Join(root, e.Name())
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "ordo-pg-") || dir == clusterDir {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue // a template, or a cluster being made: not ours to judge
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || alive(pid) {
			continue
		}
		_ = os.RemoveAll(dir)
	}
	return nil
}
