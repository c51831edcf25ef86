package pglocal

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Superuser is the name of the bootstrap superuser of every server.
const Superuser = "ordo"

// Server is one running PostgreSQL server.
type Server struct {
	Name     string // "node1", "node2", …
	Host     string // always a loopback address
	Port     int
	DataDir  string
	LogFile  string
	User     string
	Password string

	binDir string
	env    []string // added to the postmaster's environment (Options.Env)
	// templateRoot holds the template data directory this server's is
	// copied from: the data root of a cluster on a RAM filesystem, so that
	// the copy stays there; empty for os.TempDir().
	templateRoot string
	as           *runAs
	cmd          *exec.Cmd
	exited       chan struct{} // closed when the postmaster has exited
	mu           sync.Mutex
	waitErr      error
}

// DSN returns a connection URL for database db as the superuser.
func (s *Server) DSN(db string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(s.User, s.Password),
		Host:     net.JoinHostPort(s.Host, strconv.Itoa(s.Port)),
		Path:     "/" + db,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// SocketDSN returns a connection string for database db as the superuser
// through the server's Unix-domain socket (a cluster started with
// Options.Socket).
func (s *Server) SocketDSN(db string) string {
	return fmt.Sprintf("host=%s port=%d dbname=%s user=%s password=%s sslmode=disable", s.DataDir, s.Port, db, s.User, s.Password)
}

// Addr returns host:port.
func (s *Server) Addr() string { return net.JoinHostPort(s.Host, strconv.Itoa(s.Port)) }

// Running reports whether the postmaster process is still alive.
func (s *Server) Running() bool {
	select {
	case <-s.exited:
		return false
	default:
		return s.cmd != nil
	}
}

// errPortInUse is returned by start when the postmaster could not bind its port.
var errPortInUse = errors.New("port in use")

// initDataDir makes s.DataDir a fresh PostgreSQL data directory, unless it
// already is one (data is kept between runs).
func (s *Server) initDataDir(ctx context.Context, o *Options) error {
	if _, err := os.Stat(filepath.Join(s.DataDir, "PG_VERSION")); err == nil {
		return nil
	}
	tmpl, err := template(ctx, s.templateRoot, s.binDir, s.as, o)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(s.DataDir), 0o755); err != nil {
		return fmt.Errorf("pglocal: create %s: %w", filepath.Dir(s.DataDir), err)
	}
	_ = os.RemoveAll(s.DataDir) // a half-made directory from an interrupted run
	if out, err := exec.CommandContext(ctx, "cp", "-a", tmpl, s.DataDir).CombinedOutput(); err != nil {
		return fmt.Errorf("pglocal: copy template data directory to %s: %v: %s", s.DataDir, err, bytes.TrimSpace(out))
	}
	return nil
}

// templateMu serializes template creation inside one process; across
// processes the rename of a finished directory is atomic.
var templateMu sync.Mutex

// template returns a data directory made once by initdb for these binaries
// and this password, copied for every new server: initdb costs seconds, a
// copy tens of milliseconds. It is kept in root (os.TempDir() if empty):
// the data root of the clusters copied from it (dataRoot).
func template(ctx context.Context, root, binDir string, as *runAs, o *Options) (string, error) {
	templateMu.Lock()
	defer templateMu.Unlock()
	if root == "" {
		root = os.TempDir()
	}
	h := sha256.Sum256([]byte(binDir + "\x00" + o.Password + "\x00" + fmt.Sprint(as) + "\x00v1"))
	dir := filepath.Join(root, "ordo-pg-template-"+hex.EncodeToString(h[:6]))
	if _, err := os.Stat(filepath.Join(dir, "PG_VERSION")); err == nil {
		return dir, nil
	}
	work, err := os.MkdirTemp(root, "ordo-pg-initdb-")
	if err != nil {
		return "", fmt.Errorf("pglocal: %w", err)
	}
	defer os.RemoveAll(work)
	if err := os.Chmod(work, 0o755); err != nil {
		return "", fmt.Errorf("pglocal: %w", err)
	}
	if err := as.chown(work); err != nil {
		return "", err
	}
	pwfile := filepath.Join(work, "pw")
	if err := os.WriteFile(pwfile, []byte(o.Password+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("pglocal: write password file: %w", err)
	}
	if err := as.chown(pwfile); err != nil {
		return "", err
	}
	data := filepath.Join(work, "data")
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "initdb"),
		"-D", data, "-U", Superuser, "--pwfile", pwfile,
		"--auth-local=trust", "--auth-host=scram-sha-256",
		"-E", "UTF8", "--locale=C", "--no-sync")
	as.apply(cmd)
	cmd.Dir = work
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("pglocal: initdb failed: %v\n%s", err, bytes.TrimSpace(out))
	}
	if err := os.Rename(data, dir); err != nil {
		if _, statErr := os.Stat(filepath.Join(dir, "PG_VERSION")); statErr == nil {
			return dir, nil // another process made it first
		}
		return "", fmt.Errorf("pglocal: keep template: %w", err)
	}
	return dir, nil
}

// configure writes the settings Ordo needs; it runs before every start, so a
// kept data directory picks up new options.
func (s *Server) configure(o *Options) error {
	settings := map[string]string{
		"listen_addresses":          "'" + s.Host + "'",
		"unix_socket_directories":   "''",
		"wal_level":                 "logical",
		"max_prepared_transactions": "200", // max_connections: every client session may commit at once
		"max_replication_slots":     "20",
		"max_wal_senders":           "20",
		"max_connections":           "200",
		"shared_buffers":            "32MB",
		"password_encryption":       "'scram-sha-256'",
		"logging_collector":         "off",
		"log_min_messages":          "warning",
		"log_timezone":              "'UTC'",
		"timezone":                  "'UTC'",
		"fsync":                     "off",
		"full_page_writes":          "off",
	}
	if o.Socket {
		settings["unix_socket_directories"] = "'" + s.DataDir + "'"
	}
	if o.Fsync {
		settings["fsync"] = "on"
		settings["full_page_writes"] = "on"
	}
	for k, v := range o.Settings {
		settings[k] = quoteSetting(v)
	}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var conf strings.Builder
	conf.WriteString("# Written by Ordo's pglocal at every start; edits are overwritten.\n")
	for _, k := range keys {
		fmt.Fprintf(&conf, "%s = %s\n", k, settings[k])
	}
	if err := s.writeOwned("ordo.conf", conf.String()); err != nil {
		return err
	}
	main := filepath.Join(s.DataDir, "postgresql.conf")
	b, err := os.ReadFile(main)
	if err != nil {
		return fmt.Errorf("pglocal: %w", err)
	}
	if !bytes.Contains(b, []byte("include_if_exists = 'ordo.conf'")) {
		b = append(b, []byte("\ninclude_if_exists = 'ordo.conf'\n")...)
		if err := s.writeOwned("postgresql.conf", string(b)); err != nil {
			return err
		}
	}
	var hba strings.Builder
	hba.WriteString("# Written by Ordo's pglocal at every start; edits are overwritten.\n")
	for _, l := range o.HBA {
		hba.WriteString(l + "\n")
	}
	hba.WriteString("local all all scram-sha-256\n")
	hba.WriteString("local replication all scram-sha-256\n")
	hba.WriteString("host all all 127.0.0.0/8 scram-sha-256\n")
	hba.WriteString("host replication all 127.0.0.0/8 scram-sha-256\n")
	hba.WriteString("host all all ::1/128 scram-sha-256\n")
	hba.WriteString("host replication all ::1/128 scram-sha-256\n")
	return s.writeOwned("pg_hba.conf", hba.String())
}

// quoteSetting quotes v for postgresql.conf unless it is already quoted or a
// plain number/identifier.
func quoteSetting(v string) string {
	if strings.HasPrefix(v, "'") {
		return v
	}
	for _, r := range v {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.') {
			return "'" + strings.ReplaceAll(v, "'", "''") + "'"
		}
	}
	return v
}

func (s *Server) writeOwned(name, content string) error {
	p := filepath.Join(s.DataDir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		return fmt.Errorf("pglocal: write %s: %w", p, err)
	}
	return s.as.chown(p)
}

// start launches the postmaster and waits until it accepts connections.
func (s *Server) start(ctx context.Context, timeout time.Duration) error {
	logf, err := os.OpenFile(s.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("pglocal: open log %s: %w", s.LogFile, err)
	}
	logStart, _ := logf.Seek(0, 2)
	// Not CommandContext: the server must outlive the start context.
	cmd := exec.Command(filepath.Join(s.binDir, "postgres"), "-D", s.DataDir, "-p", strconv.Itoa(s.Port))
	cmd.Stdout, cmd.Stderr = logf, logf
	if len(s.env) > 0 {
		cmd.Env = append(os.Environ(), s.env...)
	}
	s.as.apply(cmd)
	// Immediate shutdown if we die. Linux sends it when the thread that
	// started the server ends, not the process: a goroutine that locks
	// its thread (runtime.LockOSThread) must unlock it before it returns,
	// or Go ends the thread and whichever server it happened to start
	// gets the signal (a benchmark's meter did that).
	cmd.SysProcAttr.Pdeathsig = syscall.SIGQUIT
	cmd.SysProcAttr.Setpgid = true // a Ctrl-C to the terminal reaches us, not the server
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("pglocal: start postgres: %w", err)
	}
	s.cmd = cmd
	s.exited = make(chan struct{})
	go func() {
		err := cmd.Wait()
		logf.Close()
		s.mu.Lock()
		s.waitErr = err
		s.mu.Unlock()
		close(s.exited)
	}()

	deadline := time.Now().Add(timeout)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		conn, err := pgconn.Connect(cctx, s.DSN("postgres")+"&connect_timeout=1")
		cancel()
		if err == nil {
			conn.Close(context.Background())
			return nil
		}
		select {
		case <-s.exited:
			tail := logTail(s.LogFile, logStart)
			if strings.Contains(tail, "could not bind") || strings.Contains(tail, "Address already in use") {
				return fmt.Errorf("pglocal: %s: %w (port %d): %s", s.Name, errPortInUse, s.Port, tail)
			}
			return fmt.Errorf("pglocal: %s: postgres exited during start (%v); log %s:\n%s", s.Name, s.waitError(), s.LogFile, tail)
		case <-ctx.Done():
			s.stop(5 * time.Second)
			return fmt.Errorf("pglocal: %s: start: %w", s.Name, ctx.Err())
		case <-time.After(25 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stop(5 * time.Second)
			return fmt.Errorf("pglocal: %s: not accepting connections after %s (last error: %v); log %s:\n%s",
				s.Name, timeout, err, s.LogFile, logTail(s.LogFile, logStart))
		}
	}
}

func (s *Server) waitError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waitErr
}

// stop shuts the server down: fast shutdown, then immediate, then SIGKILL.
func (s *Server) stop(grace time.Duration) error {
	if s.cmd == nil {
		return nil
	}
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGQUIT, syscall.SIGKILL} {
		_ = s.cmd.Process.Signal(sig)
		select {
		case <-s.exited:
			return nil
		case <-time.After(grace):
		}
	}
	<-s.exited
	return nil
}

// Kill stops the server abruptly, as a crash would: SIGKILL to the
// postmaster and every process it started, and it returns once they are
// all gone. (Each backend is the leader of its own process group, so a
// signal to the postmaster's group alone would leave them serving their
// clients until they notice the postmaster's death.) Restart brings the
// server back on the same port and data directory, through crash recovery.
func (s *Server) Kill() {
	if s.cmd == nil || !s.Running() {
		return
	}
	// Stop the postmaster first, so it cannot start a backend between the
	// scan of its children and the kill.
	pm := s.cmd.Process.Pid
	_ = syscall.Kill(pm, syscall.SIGSTOP)
	for deadline := time.Now().Add(time.Second); !stopped(pm) && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	procs := descendants(pm)
	_ = syscall.Kill(-pm, syscall.SIGKILL)
	for _, pid := range procs {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	<-s.exited
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range procs {
		for alive(pid) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// descendants returns the pids of every process below pid, from /proc.
func descendants(pid int) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, ok := parentOf(child); ok {
			children[ppid] = append(children[ppid], child)
		}
	}
	var out []int
	for queue := children[pid]; len(queue) > 0; queue = queue[1:] {
		out = append(out, queue[0])
		queue = append(queue, children[queue[0]]...)
	}
	return out
}

// parentOf reads a process's parent pid from /proc/<pid>/stat.
func parentOf(pid int) (int, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// pid (comm) state ppid …; comm may hold spaces and parentheses
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
}

// stopped reports whether pid is stopped by a signal (state T), or gone.
func stopped(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	return i < 0 || len(f) == 0 || f[0] == "T" || f[0] == "Z" || f[0] == "X"
}

// alive reports whether pid still runs (a zombie does not).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z'
}

// Stop shuts the server down cleanly (fast shutdown).
func (s *Server) Stop() error { return s.stop(10 * time.Second) }

// Restart starts a stopped or killed server again with the same settings.
func (s *Server) Restart(ctx context.Context) error {
	if s.Running() {
		if err := s.Stop(); err != nil {
			return err
		}
	}
	var err error
	for attempt := 0; attempt < 40; attempt++ {
		if err = s.start(ctx, 30*time.Second); !errors.Is(err, errPortInUse) && !isStaleLock(err) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// isStaleLock reports a start refused because processes of the previous
// incarnation are still exiting.
func isStaleLock(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "lock file") && strings.Contains(msg, "already exists") ||
		strings.Contains(msg, "pre-existing shared memory block")
}

// logTail returns the log written since offset, at most 4 KiB of it.
func logTail(path string, offset int64) string {
	b, err := os.ReadFile(path)
	if err != nil || int64(len(b)) < offset {
		return ""
	}
	b = b[offset:]
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return strings.TrimSpace(string(b))
}

// PID returns the postmaster's process id, 0 if the server is not
// running.
func (s *Server) PID() int {
	if s.cmd == nil || !s.Running() {
		return 0
	}
	return s.cmd.Process.Pid
}
