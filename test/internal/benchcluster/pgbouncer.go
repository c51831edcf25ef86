package benchcluster

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/ordo-db/ordo/internal/pglocal"
)

// StartPgBouncer runs PgBouncer in session pooling mode in front of pg,
// with pool server connections, as the OS user postgres (it refuses
// root). It returns the port it listens on (127.0.0.1), its process id,
// and how to stop it.
func StartPgBouncer(pg *pglocal.Server, pool int) (int, int, func(), error) {
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		bin = "/usr/sbin/pgbouncer"
		if _, serr := os.Stat(bin); serr != nil {
			return 0, 0, nil, errors.New("pgbouncer not installed (apt-get install -y pgbouncer)")
		}
	}
	dir, err := os.MkdirTemp("", "ordo-bench-pgbouncer-")
	if err != nil {
		return 0, 0, nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, 0, nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%d

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = scram-sha-256
auth_file = %s
pool_mode = session
log_connections = 0
log_disconnections = 0
max_client_conn = 1000
default_pool_size = %d
logfile = %s
pidfile = %s
`, pg.Host, pg.Port, port, filepath.Join(dir, "userlist.txt"), pool, filepath.Join(dir, "pgbouncer.log"), filepath.Join(dir, "pgbouncer.pid"))
	if err := os.WriteFile(filepath.Join(dir, "pgbouncer.ini"), []byte(ini), 0o600); err != nil {
		return 0, 0, nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "userlist.txt"), []byte(fmt.Sprintf("%q %q\n", pg.User, pg.Password)), 0o600); err != nil {
		return 0, 0, nil, err
	}
	cmd := exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return 0, 0, nil, fmt.Errorf("pgbouncer refuses root and there is no user postgres: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		for _, f := range []string{dir, filepath.Join(dir, "pgbouncer.ini"), filepath.Join(dir, "userlist.txt")} {
			if err := os.Chown(f, uid, gid); err != nil {
				return 0, 0, nil, err
			}
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, Pdeathsig: syscall.SIGKILL}
	}
	if err := cmd.Start(); err != nil {
		return 0, 0, nil, err
	}
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		_ = cmd.Wait()
		os.RemoveAll(dir)
	}
	for i := 0; i < 100; i++ {
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			c.Close()
			return port, cmd.Process.Pid, stop, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
	stop()
	return 0, 0, nil, fmt.Errorf("pgbouncer did not start:\n%s", log)
}
