package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ordo-db/ordo/test/internal/jvmenv"
	"github.com/stretchr/testify/require"
)

// TestCompatJDBCQueryModes: pgjdbc, the real driver, in each of its
// query modes, runs transactions of plain Statements around a prepared
// one (a named portal fetched a row at a time), directly against
// PostgreSQL and through a node: the client sees the same, every
// transaction commits, and the tables converge. In extendedForPrepared
// and extendedCacheEverything modes the driver sends the Closes of dead
// portals, then BEGIN as a simple Query, with no Sync: through Ordo every
// later statement of the transaction was refused (0A000) and its COMMIT
// rolled it back (review).
func TestCompatJDBCQueryModes(t *testing.T) {
	t.Parallel()
	cp := jvmenv.Compile(t, filepath.Join("testdata", "QueryModes.java"))
	sb := startSideBySide(t, "dbsm-si")
	o, p := sb.conns(t)
	plain := sb.plain.Servers[0]
	var tables []string
	for _, mode := range []string{"extendedForPrepared", "extendedCacheEverything", "extended", "simple"} {
		table := "jm_" + strings.ToLower(mode)
		tables = append(tables, table)
		same(t, o, p, "create table "+table+"(id int primary key)")
		run := func(addr, user, password string) string {
			url := fmt.Sprintf("jdbc:postgresql://%s/postgres?sslmode=disable", addr)
			b, err := exec.Command("java", "-cp", cp, "QueryModes", url, user, password, mode, table).CombinedOutput()
			require.NoError(t, err, "%s", b)
			return string(b)
		}
		direct := run(plain.Addr(), plain.User, plain.Password)
		through := run(sb.c.cfgs[0].Listen, "ordo", "ordo")
		require.Equal(t, direct, through, "preferQueryMode=%s: directly and through Ordo", mode)
		require.Contains(t, through, "rows 11", "preferQueryMode=%s", mode)
		require.Contains(t, through, "rows 15", "preferQueryMode=%s", mode)
	}
	sb.c.requireConverged(tables...)
}
