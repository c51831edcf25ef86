// Package jvmenv fetches pinned Java client jars from Maven Central for
// tests that run real JDBC clients against PostgreSQL and Ordo, and
// compiles and runs their small Java programs. Jars go into a local Maven
// repository under the test cache (pyenv.CacheDir), reused once there.
//
// It never installs into the system's Maven repository and never picks
// versions itself: callers pin every artifact.
package jvmenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/ordo-db/ordo/test/internal/pyenv"
)

// PgjdbcVersion is the pgjdbc release the tests run.
const PgjdbcVersion = "42.7.4"

// Pgjdbc returns the path of the pgjdbc jar, fetching it from Maven
// Central into the cache if needed.
func Pgjdbc(t testing.TB) string {
	t.Helper()
	repo := filepath.Join(pyenv.CacheDir(t), "m2")
	jar := filepath.Join(repo, "org", "postgresql", "postgresql", PgjdbcVersion, "postgresql-"+PgjdbcVersion+".jar")
	if _, err := os.Stat(jar); err == nil {
		return jar
	}
	cmd := exec.Command("mvn", "-q", "-B", "-Dmaven.repo.local="+repo, "dependency:get",
		"-Dartifact=org.postgresql:postgresql:"+PgjdbcVersion)
	cmd.Dir = t.TempDir()
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("fetch pgjdbc %s from Maven Central: %v\n%s", PgjdbcVersion, err, b)
	}
	if _, err := os.Stat(jar); err != nil {
		t.Fatalf("pgjdbc jar missing after mvn dependency:get: %v", err)
	}
	return jar
}

// Compile compiles the Java source file src against the pgjdbc jar and
// returns the class path to run its classes with (the jar's and theirs).
func Compile(t testing.TB, src string) string {
	t.Helper()
	jar := Pgjdbc(t)
	classes := t.TempDir()
	if b, err := exec.Command("javac", "-cp", jar, "-d", classes, src).CombinedOutput(); err != nil {
		t.Fatalf("javac %s: %v\n%s", src, err, b)
	}
	return jar + string(os.PathListSeparator) + classes
}
