package pglocal

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"sync"
	"syscall"
)

// runAs is the OS identity the servers run as. When the current process is
// not root it is nil: servers run as the current user.
type runAs struct {
	name     string
	uid, gid uint32
}

// unprivilegedUsers are tried in order when running as root; the last one is
// created if none exists.
var unprivilegedUsers = []string{"postgres", "ordo-pg"}

var (
	runAsOnce   sync.Once
	runAsResult *runAs
	runAsErr    error
)

// serverUser returns the identity PostgreSQL must run as.
func serverUser() (*runAs, error) {
	runAsOnce.Do(func() { runAsResult, runAsErr = lookupServerUser() })
	return runAsResult, runAsErr
}

func lookupServerUser() (*runAs, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range unprivilegedUsers {
		if u, err := user.Lookup(name); err == nil {
			return toRunAs(u)
		}
	}
	name := unprivilegedUsers[len(unprivilegedUsers)-1]
	out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("pglocal: PostgreSQL refuses to run as root and creating user %q failed: %v: %s", name, err, out)
	}
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("pglocal: look up created user %q: %w", name, err)
	}
	return toRunAs(u)
}

func toRunAs(u *user.User) (*runAs, error) {
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pglocal: user %s: bad uid %q", u.Username, u.Uid)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pglocal: user %s: bad gid %q", u.Username, u.Gid)
	}
	return &runAs{name: u.Username, uid: uint32(uid), gid: uint32(gid)}, nil
}

// apply makes cmd run as r (no-op for nil r).
func (r *runAs) apply(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	if r != nil {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: r.uid, Gid: r.gid}
	}
}

// chown gives path to r (no-op for nil r).
func (r *runAs) chown(path string) error {
	if r == nil {
		return nil
	}
	if err := os.Chown(path, int(r.uid), int(r.gid)); err != nil {
		return fmt.Errorf("pglocal: chown %s to %s: %w", path, r.name, err)
	}
	return nil
}
