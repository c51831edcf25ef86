package benchcluster

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-db/ordo/internal/ownconn"
	"github.com/ordo-db/ordo/internal/pglocal"
)

// CPUUse is the CPU time (user and system) used during a measurement.
type CPUUse struct {
	Self time.Duration // this process (the nodes Start started), the meter's own work left out
	// SelfReads and SelfWrites are this process's read and write system
	// calls (syscr and syscw of /proc/self/io: sockets, files, pipes), the
	// meter's own left out.
	SelfReads, SelfWrites int64
	Postgres              time.Duration // every process of the servers measured
	// Roles splits Postgres by what each process does (the Role*
	// constants), told apart by pg_stat_activity.
	Roles map[string]time.Duration
}

// The roles of a server's processes, in the order they are printed.
const (
	RoleSessions   = "sessions"   // backends of the clients' sessions (relayed by a node, or direct)
	RoleOrdo       = "ordo"       // the nodes' own connections: applies, the delivery loop's COMMIT PREPAREDs and proofs, the blocked-apply monitor, catalog reads
	RoleWalsenders = "walsenders" // the nodes' capture streams
	RoleBackground = "background" // checkpointer, WAL writer, autovacuum, …
	RoleOther      = "other"      // the postmaster, and what processes used after the last look at them (a session that ended)
)

// Roles lists the roles in the order they are printed.
var Roles = []string{RoleSessions, RoleOrdo, RoleWalsenders, RoleBackground, RoleOther}

// CPUMeter measures the CPU time of this process and of every process of
// some PostgreSQL servers (their postmasters and the processes they
// started) from StartCPU to Stop. Only those servers are read: other
// PostgreSQL servers on the machine (a test suite, the benchmark's other
// targets) are not counted.
//
// The servers' total counts the children each postmaster has reaped (a
// backend that exits is counted in its postmaster's cutime and cstime),
// and a reading is taken again if a process exited while it was read
// (readServer). Roles are read from pg_stat_activity, and each
// process's time from /proc, once a second, because the clients'
// sessions start and end within the measurement: what a process used
// after the meter's last look at it is counted as "other". The meter
// looks from a thread of its own and leaves its own CPU time and system
// calls out of this process's figures.
type CPUMeter struct {
	ctx     context.Context
	servers []*pglocal.Server
	conns   []*pgx.Conn // one per server, nil if it could not connect; its backend is not counted
	ownPIDs map[int]bool
	self    selfUse // this process's at the start
	total   time.Duration
	seen    map[int]*procSeen
	own     selfUse // the meter's own between the start and the end
	stop    chan struct{}
	done    chan struct{}
}

// selfUse is CPU time and read and write system calls.
type selfUse struct {
	cpu           time.Duration
	reads, writes int64
}

func (a selfUse) minus(b selfUse) selfUse {
	return selfUse{a.cpu - b.cpu, a.reads - b.reads, a.writes - b.writes}
}

// procSeen is one process as the meter last read it.
type procSeen struct {
	role        string
	first, last time.Duration // its CPU time when first and last read (first is 0 for a process started since StartCPU)
}

// StartCPU starts measuring.
func StartCPU(ctx context.Context, servers []*pglocal.Server) *CPUMeter {
	m := &CPUMeter{ctx: ctx, servers: servers, seen: map[int]*procSeen{}, ownPIDs: map[int]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	for _, s := range servers {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		conn, err := pgx.Connect(cctx, s.DSN("postgres"))
		cancel()
		if err == nil {
			m.ownPIDs[int(conn.PgConn().PID())] = true
		}
		m.conns = append(m.conns, conn)
	}
	m.total = m.look(true)
	m.self = readSelf(false)
	go func() {
		defer close(m.done)
		// Locked, so that its CPU time and system calls are this
		// thread's; unlocked before it returns, or Go ends the thread,
		// and a PostgreSQL server started from it (pglocal sets
		// Pdeathsig, which Linux ties to the parent thread) receives
		// SIGQUIT: servers died under a benchmark that way.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-m.stop:
				return
			case <-t.C:
				before := readSelf(true)
				m.look(false)
				m.own = addUse(m.own, readSelf(true).minus(before))
			}
		}
	}()
	return m
}

func addUse(a, b selfUse) selfUse {
	return selfUse{a.cpu + b.cpu, a.reads + b.reads, a.writes + b.writes}
}

// Stop ends the measurement and returns what was used.
func (m *CPUMeter) Stop() CPUUse {
	close(m.stop)
	<-m.done
	self := readSelf(false).minus(m.self).minus(m.own)
	u := CPUUse{Self: self.cpu, SelfReads: self.reads, SelfWrites: self.writes, Roles: map[string]time.Duration{}}
	u.Postgres = m.look(false) - m.total
	var attributed time.Duration
	for _, p := range m.seen {
		if p.role == "" {
			continue
		}
		u.Roles[p.role] += p.last - p.first
		attributed += p.last - p.first
	}
	u.Roles[RoleOther] += u.Postgres - attributed
	for _, c := range m.conns {
		if c != nil {
			c.Close(context.Background())
		}
	}
	return u
}

// look reads every process of the servers, records what it sees, and
// returns the servers' total CPU time so far (with what the postmasters
// reaped).
func (m *CPUMeter) look(start bool) time.Duration {
	var total time.Duration
	for i, s := range m.servers {
		pm := s.PID()
		if pm == 0 {
			continue
		}
		roles := serverRoles(m.ctx, m.conns[i])
		d, procs := m.readServer(pm)
		total += d
		for pid, d := range procs {
			p := m.seen[pid]
			if p == nil {
				p = &procSeen{}
				if start {
					p.first = d
				}
				m.seen[pid] = p
			}
			p.last = d
			if r := roles[pid]; r != "" {
				p.role = r
			}
		}
	}
	return total
}

// readServer reads the CPU time of a server's postmaster (with what it
// reaped) and of each process it runs, and returns their sum and each
// process's (the meter's own connection left out). A process that exits
// and is reaped between the two reads would be in neither, and the
// kernel's list of children can skip one that exits while it is read:
// the postmaster's time then changes between a read before the children
// and one after, and the reading is taken again.
func (m *CPUMeter) readServer(pm int) (time.Duration, map[int]time.Duration) {
	var total time.Duration
	var procs map[int]time.Duration
	for try := 0; try < 10; try++ {
		before, _ := procCPU(pm, true)
		total, procs = before, map[int]time.Duration{}
		for _, pid := range children(pm) {
			if m.ownPIDs[pid] {
				continue // the meter's own connection
			}
			if d, ok := procCPU(pid, false); ok {
				total += d
				procs[pid] = d
			}
		}
		if after, _ := procCPU(pm, true); after == before {
			break
		}
	}
	return total, procs
}

// children lists the processes pid started that are still running.
func children(pid int) []int {
	p := strconv.Itoa(pid)
	b, err := os.ReadFile("/proc/" + p + "/task/" + p + "/children")
	if err != nil {
		return nil
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		if c, err := strconv.Atoi(f); err == nil {
			out = append(out, c)
		}
	}
	return out
}

// readSelf reads the CPU time and the read and write system calls of
// this process, or of the calling thread.
func readSelf(thread bool) selfUse {
	var u selfUse
	who, dir := syscall.RUSAGE_SELF, "/proc/self"
	if thread {
		who, dir = rusageThread, "/proc/thread-self"
	}
	var ru syscall.Rusage
	if syscall.Getrusage(who, &ru) == nil {
		u.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	b, err := os.ReadFile(dir + "/io")
	if err != nil {
		return u
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(l, ": ")
		n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		switch k {
		case "syscr":
			u.reads = n
		case "syscw":
			u.writes = n
		}
	}
	return u
}

// serverRoles reads the role of each process of a server from
// pg_stat_activity, through conn (nil: none is known).
func serverRoles(ctx context.Context, conn *pgx.Conn) map[int]string {
	roles := map[int]string{}
	if conn == nil {
		return roles
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rows, err := conn.Query(ctx, "SELECT pid, backend_type, coalesce(application_name, '') FROM pg_stat_activity WHERE pid <> pg_backend_pid()")
	if err != nil {
		return roles
	}
	for rows.Next() {
		var pid int
		var kind, app string
		if rows.Scan(&pid, &kind, &app) != nil {
			continue
		}
		switch {
		case kind == "walsender":
			roles[pid] = RoleWalsenders
		case kind == "client backend" && app == ownconn.AppName:
			roles[pid] = RoleOrdo
		case kind == "client backend":
			roles[pid] = RoleSessions
		default:
			roles[pid] = RoleBackground
		}
	}
	return roles
}

// procCPU reads a process's CPU time from /proc (with its reaped
// children's if children).
func procCPU(pid int, children bool) (time.Duration, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	s := string(b)
	rp := strings.LastIndexByte(s, ')')
	if rp < 0 {
		return 0, false
	}
	// After the command: state is field 3; utime, stime, cutime and
	// cstime are fields 14 to 17 (proc(5)), in clock ticks.
	f := strings.Fields(s[rp+1:])
	if len(f) < 15 {
		return 0, false
	}
	n := 13
	if children {
		n = 15
	}
	var ticks int64
	for _, v := range f[11:n] {
		t, _ := strconv.ParseInt(v, 10, 64)
		ticks += t
	}
	return time.Duration(ticks) * time.Second / clockTicks, true
}

// PerTxn is u per committed transaction, in ms: the servers' total,
// and each role's.
func (u CPUUse) PerTxn(txns float64) (total float64, roles map[string]float64) {
	roles = map[string]float64{}
	if txns <= 0 {
		return 0, roles
	}
	for _, r := range Roles {
		roles[r] = u.Roles[r].Seconds() * 1000 / txns
	}
	return u.Postgres.Seconds() * 1000 / txns, roles
}

// MedianRoles is the median of each role's figure over runs (PerTxn's).
func MedianRoles(runs []map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for _, r := range Roles {
		v := make([]float64, len(runs))
		for i, run := range runs {
			v[i] = run[r]
		}
		sort.Float64s(v)
		if len(v) > 0 {
			out[r] = v[len(v)/2]
		}
	}
	return out
}

// FormatRoles prints roles (PerTxn's, or medians of them) as
// "sessions 0.812 ordo 0.301 …".
func FormatRoles(roles map[string]float64) string {
	var b strings.Builder
	for i, r := range Roles {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s %.3f", r, roles[r])
	}
	return b.String()
}

// rusageThread is Linux's RUSAGE_THREAD: getrusage of the calling
// thread.
const rusageThread = 1

// clockTicks is USER_HZ, which Linux fixes at 100 on every architecture
// Go supports.
const clockTicks = 100

// HostCPU is the machine's CPU time so far (the first line of
// /proc/stat), in clock ticks: busy (user, nice, system, irq, softirq),
// idle (idle, iowait) and stolen by the hypervisor for other guests.
type HostCPU struct{ Busy, Idle, Steal int64 }

// SampleHost reads HostCPU (zero if /proc/stat cannot be read).
func SampleHost() HostCPU {
	var h HostCPU
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return h
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return h
	}
	v := func(i int) int64 { n, _ := strconv.ParseInt(f[i], 10, 64); return n }
	h.Busy = v(1) + v(2) + v(3) + v(6) + v(7)
	h.Idle = v(4) + v(5)
	h.Steal = v(8)
	return h
}

// Until returns the shares of the machine's time between h and later
// that were busy and that the hypervisor stole (0–1 each): a run whose
// steal is high shared its cores with another guest, and its figures are
// not comparable with one's that did not.
func (h HostCPU) Until(later HostCPU) (busy, steal float64) {
	b, i, s := later.Busy-h.Busy, later.Idle-h.Idle, later.Steal-h.Steal
	total := b + i + s
	if total <= 0 {
		return 0, 0
	}
	return float64(b) / float64(total), float64(s) / float64(total)
}
