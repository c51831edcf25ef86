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
