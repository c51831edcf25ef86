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

// Version is the version of a set of server binaries, as `postgres
// --version` reports it.
type Version struct {
	Major int    // 15, 18, …
	Full  string // "15.14", "18.6", "19beta1"
}

func (v Version) String() string { return "PostgreSQL " + v.Full }

// BinaryVersion returns the version of the server binaries in binDir.
func BinaryVersion(binDir string) (Version, error) {
	out, err := exec.Command(filepath.Join(binDir, "postgres"), "--version").Output()
	if err != nil {
		return Version{}, fmt.Errorf("pglocal: run %s --version: %w", filepath.Join(binDir, "postgres"), err)
	}
	v, ok := parseVersion(string(out))
	if !ok {
		return Version{}, fmt.Errorf("pglocal: unexpected postgres --version output %q", out)
	}
	return v, nil
}

// parseVersion reads the output of `postgres --version`:
// "postgres (PostgreSQL) 15.14 (Debian 15.14-0+deb12u1)", "postgres
// (PostgreSQL) 18.6", "postgres (PostgreSQL) 19devel".
func parseVersion(out string) (Version, bool) {
	fields := strings.Fields(out)
	if len(fields) < 3 || fields[1] != "(PostgreSQL)" {
		return Version{}, false
	}
	full := fields[2]
	digits := 0
	for digits < len(full) && full[digits] >= '0' && full[digits] <= '9' {
		digits++
	}
	major, err := strconv.Atoi(full[:digits])
	if err != nil {
		return Version{}, false
	}
	return Version{Major: major, Full: full}, true
}
