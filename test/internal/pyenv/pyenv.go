// Package pyenv installs pinned Python packages from PyPI for tests that
// run real Python clients (psycopg, SQLAlchemy) against PostgreSQL and
// Ordo. Packages go into a directory per set of requirements under the
// test cache (ORDO_COMPAT_CACHE, or the user's cache directory), used as
// PYTHONPATH; an installed set is reused.
//
// It never installs into the system's Python and never picks versions
// itself: callers pin every requirement.
package pyenv

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// CacheDir is where the tests' downloaded clients are kept.
func CacheDir(t testing.TB) string {
	t.Helper()
	d := os.Getenv("ORDO_COMPAT_CACHE")
	if d == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			t.Fatal(err)
		}
		d = filepath.Join(base, "ordo-compat")
	}
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// Install makes the pinned requirements (pip syntax, "name==version")
// importable and returns the PYTHONPATH that holds them. check is a Python
// statement that must run without error once they are installed (for
// example an import and a version assertion); it decides whether an
// earlier install can be reused.
func Install(t testing.TB, check string, requirements ...string) string {
	t.Helper()
	sum := sha256.Sum256([]byte(strings.Join(requirements, "\n")))
	dir := filepath.Join(CacheDir(t), "py-"+hex.EncodeToString(sum[:6]))
	ok := func() error {
		cmd := exec.Command("python3", "-c", check)
		cmd.Env = append(os.Environ(), "PYTHONPATH="+dir)
		return cmd.Run()
	}
	if ok() == nil {
		return dir
	}
	args := append([]string{"-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--target", dir}, requirements...)
	cmd := exec.Command("python3", args...)
	cmd.Env = append(os.Environ(), "PIP_ROOT_USER_ACTION=ignore")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("pip install %v: %v\n%s", requirements, err, b)
	}
	if err := ok(); err != nil {
		t.Fatalf("%v not importable after pip install: %v", requirements, err)
	}
	return dir
}
