package pglocal

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ordo-db/ordo/internal/testport"
)

// Options configures Start. The zero value starts one server in a temporary
// directory on a free port.
type Options struct {
	// N is the number of servers (default 1).
	N int
	// Dir holds the servers' data directories (Dir/node1, Dir/node2, …) and
	// logs. Empty means a temporary directory removed by Stop; otherwise
	// existing data directories are reused and kept.
	Dir string
	// BasePort, if non-zero, puts server i on BasePort+i-1; a port in use is
	// then an error. Zero picks free ports.
	BasePort int
	// Password of the superuser "ordo" (default "ordo").
	Password string
	// Settings are extra postgresql.conf settings; they override the
	// defaults (see Server.configure).
	Settings map[string]string
	// HBA lines are placed before the default pg_hba.conf lines.
	HBA []string
	// Fsync turns fsync and full_page_writes on. Off by default: tests do
	// not survive power loss, and process crashes lose nothing without it.
	Fsync bool
	// StartTimeout bounds each server's start (default 60s).
	StartTimeout time.Duration
	// Env is added to each postmaster's environment ("NAME=value"; @NAME@
	// in a value becomes the server's name, node1, node2, …): a test's
	// fault injection (LD_PRELOAD). Its files must be readable by the
	// unprivileged user the servers run as.
	Env []string
	// Socket makes each server listen on a Unix-domain socket in its data
	// directory too (Server.SocketDSN), besides its loopback port. Its
	// connections ask for the password like TCP ones.
	Socket bool
}

// Cluster is a set of running servers.
type Cluster struct {
	Servers []*Server
	Dir     string
	// BinDir holds the server binaries every server runs (see FindBinaries).
	BinDir string
	// Version is their version; tests that depend on it read Version.Major.
	Version Version

	removeDir bool
	stopOnce  sync.Once
}

// Start starts o.N servers in parallel and returns once all accept
// connections. On error every server already started is stopped.
func Start(ctx context.Context, o Options) (*Cluster, error) {
	if o.N <= 0 {
		o.N = 1
	}
	if o.Password == "" {
		o.Password = "ordo"
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = 60 * time.Second
	}
	binDir, err := FindBinaries()
	if err != nil {
		return nil, err
	}
	version, err := BinaryVersion(binDir)
	if err != nil {
		return nil, err
	}
	if version.Major < 15 {
		return nil, fmt.Errorf("pglocal: %s found in %s; Ordo needs 15 or newer (two-phase logical decoding): install postgresql-15", version, binDir)
	}
	as, err := serverUser()
	if err != nil {
		return nil, err
	}
	c := &Cluster{Dir: o.Dir, BinDir: binDir, Version: version}
	var templateRoot string
	if c.Dir == "" {
		root, ram := os.TempDir(), false
		if !o.Fsync {
			if root, ram, err = dataRoot(); err != nil {
				return nil, err
			}
		}
		if c.Dir, err = os.MkdirTemp(root, "ordo-pg-"); err != nil {
			return nil, fmt.Errorf("pglocal: %w", err)
		}
		c.removeDir = true
		if ram {
			templateRoot = root
			if err := markOwner(root, c.Dir); err != nil {
				c.Stop()
				return nil, err
			}
		}
	} else if c.Dir, err = filepath.Abs(c.Dir); err != nil {
		return nil, fmt.Errorf("pglocal: %w", err)
	} else if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("pglocal: create %s: %w", c.Dir, err)
	}
	if err := os.Chmod(c.Dir, 0o755); err != nil {
		c.Stop()
		return nil, fmt.Errorf("pglocal: %w", err)
	}
	if err := reachable(c.Dir, as); err != nil {
		c.Stop()
		return nil, err
	}

	c.Servers = make([]*Server, o.N)
	for i := range c.Servers {
		name := fmt.Sprintf("node%d", i+1)
		c.Servers[i] = &Server{
			Name:     name,
			Host:     "127.0.0.1",
			DataDir:  filepath.Join(c.Dir, name),
			LogFile:  filepath.Join(c.Dir, name+".log"),
			User:     Superuser,
			Password: o.Password,
			binDir:   binDir,
			as:       as,

			templateRoot: templateRoot,
		}
		for _, e := range o.Env {
			c.Servers[i].env = append(c.Servers[i].env, strings.ReplaceAll(e, "@NAME@", name))
		}
	}
	errs := make([]error, o.N)
	var wg sync.WaitGroup
	for i, s := range c.Servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = startOne(ctx, s, &o, i)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

func startOne(ctx context.Context, s *Server, o *Options, i int) error {
	if err := s.initDataDir(ctx, o); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		if o.BasePort != 0 {
			s.Port = o.BasePort + i
			if err := portFree(s.Host, s.Port); err != nil {
				return fmt.Errorf("pglocal: %s: port %d is in use (choose another base port): %w", s.Name, s.Port, err)
			}
		} else {
			p, err := freePort(s.Host)
			if err != nil {
				return err
			}
			s.Port = p
		}
		if err := s.configure(o); err != nil {
			return err
		}
		err := s.start(ctx, o.StartTimeout)
		if err == nil || !errors.Is(err, errPortInUse) || o.BasePort != 0 || attempt == 5 {
			return err
		}
	}
}

// Stop stops every server and removes the temporary directory, if Start
// made one. It is safe to call more than once.
func (c *Cluster) Stop() error {
	var errs []error
	c.stopOnce.Do(func() {
		var wg sync.WaitGroup
		errs = make([]error, len(c.Servers))
		for i, s := range c.Servers {
			if s == nil {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = s.Stop()
			}()
		}
		wg.Wait()
		if c.removeDir {
			if err := os.RemoveAll(c.Dir); err != nil {
				errs = append(errs, err)
			}
		}
	})
	return errors.Join(errs...)
}

// freePort picks a port for a server whose Options leave BasePort zero.
// It comes from testport, below the kernel's ephemeral range and locked
// for this process: a port the kernel picked (":0") is in that range, where
// any outgoing connection may take it while the server is down, and a
// server restarted on it (Server.Restart, crash tests) would then fail
// with "address already in use".
func freePort(host string) (int, error) {
	if host != "127.0.0.1" {
		return 0, fmt.Errorf("pglocal: find a free port: host %s is not 127.0.0.1", host)
	}
	addr, err := testport.Addr()
	if err != nil {
		return 0, fmt.Errorf("pglocal: find a free port: %w", err)
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, fmt.Errorf("pglocal: find a free port: %w", err)
	}
	return strconv.Atoi(port)
}

func portFree(host string, port int) error {
	l, err := net.Listen("tcp", fmt.Sprintf("%s:%d", host, port))
	if err != nil {
		return err
	}
	return l.Close()
}

// reachable checks that the server user can traverse every parent of dir.
func reachable(dir string, as *runAs) error {
	if as == nil {
		return nil
	}
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("pglocal: %w", err)
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("pglocal: directory %s is not reachable by OS user %q, which PostgreSQL runs as "+
				"(PostgreSQL refuses to run as root); choose a data directory outside it, e.g. under /tmp", d, as.name)
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}
