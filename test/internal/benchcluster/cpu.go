package benchcluster

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CPUTimes is CPU time (user and system) used so far.
type CPUTimes struct {
	Self     time.Duration // this process (the nodes Start started)
	Postgres time.Duration // every PostgreSQL process on the machine
	// Walsenders is the part of Postgres used by WAL senders (the nodes'
	// capture streams), told apart by their process titles.
	Walsenders time.Duration
}

// SampleCPU reads the CPU time of this process and of every PostgreSQL
// process, counting the children each has reaped (a backend that exits is
// counted in its postmaster's cutime and cstime), so the difference of two
// samples is what was used between them.
func SampleCPU() CPUTimes {
	var c CPUTimes
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		c.Self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := string(b)
		lp, rp := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if lp < 0 || rp < lp || s[lp+1:rp] != "postgres" {
			continue
		}
		// After the command: state is field 3; utime, stime, cutime and
		// cstime are fields 14 to 17 (proc(5)), in clock ticks.
		f := strings.Fields(s[rp+1:])
		if len(f) < 15 {
			continue
		}
		var ticks int64
		for _, v := range f[11:15] {
			n, _ := strconv.ParseInt(v, 10, 64)
			ticks += n
		}
		d := time.Duration(ticks) * time.Second / clockTicks
		c.Postgres += d
		if title, err := os.ReadFile(filepath.Join(filepath.Dir(p), "cmdline")); err == nil && strings.Contains(string(title), "walsender") {
			c.Walsenders += d
		}
	}
	return c
}

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
