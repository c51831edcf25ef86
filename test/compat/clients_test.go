package compat

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ordo-db/ordo/test/internal/jvmenv"
	"github.com/ordo-db/ordo/test/internal/pyenv"
)

func TestJDBC(t *testing.T) {
	cp := jvmenv.Compile(t, filepath.Join("testdata", "Compat.java"))
	out := same(t, func(t *testing.T, tg target) string {
		ssl := "sslmode=disable"
		if tg.tls {
			// SSL terminated at Ordo; SCRAM without channel binding.
			ssl = "sslmode=require"
		}
		url := fmt.Sprintf("jdbc:postgresql://%s:%d/%s?%s", tg.host, tg.port, tg.db, ssl)
		cmd := exec.Command("java", "-cp", cp, "Compat", url, user, password)
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("java against %s: %v\n%s", tg.name, err, b)
		}
		return string(b)
	})
	for _, want := range []string{"ps 7 14 s7", "batch 100 first=1", "rows 100 sum 4950", "cancel: 57014 fast=true", "error 23505", "after error v42"} {
		if !strings.Contains(out, want) {
			t.Errorf("JDBC output lacks %q:\n%s", want, out)
		}
	}
}

const psycopgVersion = "3.2.3"

// psycopgPath returns a PYTHONPATH holding psycopg 3, installing it from
// PyPI into the cache if needed.
func psycopgPath(t *testing.T) string {
	return pyenv.Install(t, "import psycopg; assert psycopg.__version__ == '"+psycopgVersion+"'", "psycopg[binary]=="+psycopgVersion)
}

func TestPsycopg(t *testing.T) {
	path := psycopgPath(t)
	out := same(t, func(t *testing.T, tg target) string {
		cmd := exec.Command("python3", filepath.Join("testdata", "compat_psycopg.py"), tg.dsn())
		cmd.Env = append(os.Environ(), "PYTHONPATH="+path)
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("psycopg against %s: %v\n%s", tg.name, err, b)
		}
		return string(b)
	})
	for _, want := range []string{"pipeline (20, 190)", "copy in 500", "('599', 'copied 599')", "error 23505", "after ('copied 599',)"} {
		if !strings.Contains(out, want) {
			t.Errorf("psycopg output lacks %q:\n%s", want, out)
		}
	}
}
