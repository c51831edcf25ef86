// Package proto_test checks that the generated Go code in pkg/api/ordo/v1 is
// what `make proto` makes from proto/ordo/v1 today.
package proto_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestGeneratedCodeIsFresh(t *testing.T) {
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	out := t.TempDir()
	cmd := exec.Command("bash", filepath.Join(root, "scripts", "genproto.sh"), out)
	cmd.Dir = root
	msg, err := cmd.CombinedOutput()
	require.NoError(t, err, "scripts/genproto.sh failed:\n%s", msg)

	committed := filepath.Join(root, "pkg", "api", "ordo", "v1")
	fresh := filepath.Join(out, "pkg", "api", "ordo", "v1")
	want := listGo(t, fresh)
	got := listGo(t, committed)
	require.NotEmpty(t, want, "genproto generated nothing")
	require.Equal(t, want, got, "generated files differ from committed ones: run `make proto`")
	for _, name := range want {
		a, err := os.ReadFile(filepath.Join(fresh, name))
		require.NoError(t, err)
		b, err := os.ReadFile(filepath.Join(committed, name))
		require.NoError(t, err)
		require.Equal(t, string(a), string(b), "%s is stale: run `make proto` and commit the result", name)
	}
}

func listGo(t *testing.T, dir string) []string {
	matches, err := filepath.Glob(filepath.Join(dir, "*.pb.go"))
	require.NoError(t, err)
	names := make([]string, len(matches))
	for i, m := range matches {
		names[i] = filepath.Base(m)
	}
	return names
}
