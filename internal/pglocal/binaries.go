package pglocal

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// ErrNoBinaries is returned by FindBinaries and Start when no PostgreSQL
// server binaries (initdb and postgres) can be found.
var ErrNoBinaries = errors.New("pglocal: PostgreSQL server binaries (initdb, postgres) not found; " +
	"install them, e.g. `apt-get install postgresql-15` on Debian/Ubuntu, or set ORDO_PG_BIN to their directory")

// FindBinaries returns the directory holding initdb and postgres.
//
// If $ORDO_PG_BIN is set, only that directory is used. Otherwise it looks,
// in order, at `pg_config --bindir`, the newest /usr/lib/postgresql/*/bin,
// /usr/local/pgsql/bin, then PATH.
func FindBinaries() (string, error) {
	if d := os.Getenv("ORDO_PG_BIN"); d != "" {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "postgres")) {
			return d, nil
		}
		return "", fmt.Errorf("%w (ORDO_PG_BIN=%s has no initdb and postgres)", ErrNoBinaries, d)
	}
	var candidates []string
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		candidates = append(candidates, strings.TrimSpace(string(out)))
	}
	versions, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(versions, func(i, j int) bool { return majorOf(versions[i]) > majorOf(versions[j]) })
	candidates = append(candidates, versions...)
	candidates = append(candidates, "/usr/local/pgsql/bin")
	if p, err := exec.LookPath("postgres"); err == nil {
		candidates = append(candidates, filepath.Dir(p))
	}
	for _, d := range candidates {
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", ErrNoBinaries
}

func majorOf(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

func isExec(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// serverVersion returns the major version reported by `postgres --version`.
func serverVersion(binDir string) (int, error) {
	out, err := exec.Command(filepath.Join(binDir, "postgres"), "--version").Output()
	if err != nil {
		return 0, fmt.Errorf("pglocal: run postgres --version: %w", err)
	}
	// "postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)"
	fields := strings.Fields(string(out))
	if len(fields) < 3 {
		return 0, fmt.Errorf("pglocal: unexpected postgres --version output %q", out)
	}
	major, err := strconv.Atoi(strings.SplitN(fields[2], ".", 2)[0])
	if err != nil {
		return 0, fmt.Errorf("pglocal: unexpected postgres --version output %q", out)
	}
	return major, nil
}
