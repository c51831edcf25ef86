package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/ordo-db/ordo/internal/admin"
	"github.com/ordo-db/ordo/internal/ctl"
)

// ordoctl is a built ordoctl binary.
type ordoctl struct {
	t   *testing.T
	bin string
}

func buildOrdoctl(t *testing.T) ordoctl {
	bin := filepath.Join(t.TempDir(), "ordoctl")
	out, err := exec.Command("go", "build", "-o", bin, "../../cmd/ordoctl").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return ordoctl{t: t, bin: bin}
}

// run runs ordoctl with args and returns its output and exit code.
func (o ordoctl) run(args ...string) (stdout, stderr string, code int) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, o.bin, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		o.t.Fatalf("ordoctl %v: %v", args, err)
	}
	return out.String(), errOut.String(), code
}

// ctlStatus is the part of `ordoctl status -o json` the tests read.
type ctlStatus struct {
	Nodes []struct {
		Endpoint string        `json:"endpoint"`
		Status   *admin.Status `json:"status"`
		Error    string        `json:"error"`
	} `json:"nodes"`
}

// TestOrdoctlAgainstACluster runs the real ordoctl against a real 3-node
// cluster whose admin APIs use the defaults: a free loopback port and a
// token each node generated into its data directory. Every command, its
// JSON (and YAML) output parsed; a wrong token, and another node's token,
// refused with exit code 3; usage errors exit 2.
func TestOrdoctlAgainstACluster(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm-si")
	octl := buildOrdoctl(t)
	ctx := context.Background()
	conn := c.connect(0)
	_, err := conn.Exec(ctx, "CREATE TABLE admin_t (k int PRIMARY KEY, v text)")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "INSERT INTO admin_t VALUES (1, 'one')")
	require.NoError(t, err)
	c.waitConverged()

	var dirs []string
	for i := range c.cfgs {
		dirs = append(dirs, "--data-dir", c.cfgs[i].DataDir)
	}
	token := func(i int) string { return filepath.Join(c.cfgs[i].DataDir, admin.TokenFileName) }

	// status of every node, each found through its data directory
	var st ctlStatus
	require.Eventually(t, func() bool {
		out, errOut, code := octl.run(append([]string{"status", "-o", "json"}, dirs...)...)
		require.NoError(t, json.Unmarshal([]byte(out), &st), "%s\n%s", out, errOut)
		return code == ctl.ExitOK
	}, 30*time.Second, 500*time.Millisecond, "every node ready")
	require.Len(t, st.Nodes, 3)
	leader := st.Nodes[0].Status.Leader
	require.NotZero(t, leader)
	for i, n := range st.Nodes {
		s := n.Status
		require.NotNil(t, s, n.Error)
		require.Equal(t, c.nodes[i].AdminAddr(), n.Endpoint)
		require.EqualValues(t, i+1, s.NodeID)
		require.Equal(t, leader, s.Leader, "one leader")
		require.Equal(t, st.Nodes[0].Status.Raft.Term, s.Raft.Term)
		require.Equal(t, "dbsm-si", s.Protocol)
		require.True(t, s.Ready.Ready, s.Ready.Reason)
		require.False(t, s.RefusesUpdates)
		require.Positive(t, s.AppliedPrefix)
		require.True(t, strings.HasPrefix(s.PostgresVersion, c.pg.Version.Full), "server_version %q, harness %s", s.PostgresVersion, c.pg.Version)
		require.Len(t, s.Members, 3)
		commits := map[string]uint64{}
		for _, tc := range s.Transactions {
			if tc.Outcome == "commit" {
				commits[tc.Origin] += tc.Count
			}
		}
		origin := "remote"
		if i == 0 {
			origin = "local"
		}
		require.GreaterOrEqual(t, commits[origin], uint64(2), "node %d: CREATE TABLE and INSERT, %s: %+v", i+1, origin, s.Transactions)
	}

	// one endpoint: its view of the others (their applied prefixes as they
	// reported them: a node reports what it applied once its WAL is
	// flushed, at its next batch, so keep some traffic going)
	one := []string{"--endpoints", c.nodes[0].AdminAddr(), "--token-file", token(0)}
	k := 1
	require.Eventually(t, func() bool {
		k++
		_, err := conn.Exec(ctx, "INSERT INTO admin_t VALUES ($1, 'more')", k)
		require.NoError(t, err)
		out, errOut, code := octl.run(append([]string{"status", "-o", "json"}, one...)...)
		require.Equal(t, ctl.ExitOK, code, errOut)
		require.NoError(t, json.Unmarshal([]byte(out), &st))
		require.Len(t, st.Nodes, 1)
		for _, m := range st.Nodes[0].Status.Members {
			if m.Applied == nil {
				return false
			}
		}
		return true
	}, 10*time.Second, 200*time.Millisecond, "node 1 hears every member's applied prefix")
	out, errOut, code := octl.run(append([]string{"status"}, one...)...)
	require.Equal(t, ctl.ExitOK, code, errOut)
	require.Regexp(t, `(?m)^2 +\(seen by node 1\) +(leader|member) +`, out)
	require.Regexp(t, `(?m)^3 +\(seen by node 1\) +(leader|member) +`, out)
	t.Logf("ordoctl status (one endpoint):\n%s", out)

	// the hottest conflicts: one row updated concurrently through two
	// nodes, three times; each time one of the two aborts on its key
	other := c.connect(1)
	aborts := 0 // certification aborts: the conflicts the status counts
	for i := 0; aborts < 3; i++ {
		// An apply that finds the other transaction still running
		// aborts it by brute force instead (a race), which is no
		// certification conflict: try again.
		require.Less(t, i, 30, "three certification aborts in 30 tries")
		// The last round's winner is applied everywhere first: else the
		// second update can wait for that apply's lock and fail in
		// PostgreSQL (REPEATABLE READ; once, on a loaded machine).
		c.waitConverged()
		t1, err := conn.Begin(ctx)
		require.NoError(t, err)
		t2, err := other.Begin(ctx)
		require.NoError(t, err)
		_, err = t1.Exec(ctx, "UPDATE admin_t SET v = 'first' WHERE k = 1")
		require.NoError(t, err)
		_, err = t2.Exec(ctx, "UPDATE admin_t SET v = 'second' WHERE k = 1")
		require.NoError(t, err)
		for _, e := range []error{t1.Commit(ctx), t2.Commit(ctx)} {
			if e != nil {
				require.Equal(t, "40001", sqlstate(e), "%v", e)
				t.Logf("round %d: %v", i, e)
				if strings.Contains(e.Error(), "concurrent update on another node") {
					aborts++
				}
			}
		}
	}
	require.Equal(t, 3, aborts)
	c.waitConverged()
	out, errOut, code = octl.run(append([]string{"status", "-o", "json"}, dirs...)...)
	require.Equal(t, ctl.ExitOK, code, errOut)
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	// The cluster can count one more certification abort than clients
	// were told of as such (seen once in CI: 4 counted, 3 reported with
	// that message; the rounds' errors are logged above): at least the
	// three, all on the key, and the same number on every node (they are
	// decided in the order).
	conflicts := st.Nodes[0].Status.Hot.Conflicts
	require.GreaterOrEqual(t, conflicts, uint64(3))
	for _, n := range st.Nodes {
		h := n.Status.Hot
		require.Equal(t, conflicts, h.Conflicts, "node %d: %+v", n.Status.NodeID, h)
		require.Equal(t, "public.admin_t(1)", h.Keys[0].Name, "node %d", n.Status.NodeID)
		require.EqualValues(t, conflicts, h.Keys[0].Aborts)
		require.Equal(t, "public.admin_t", h.Tables[0].Name)
		require.Equal(t, 100, h.Tables[0].Percent)
	}
	out, errOut, code = octl.run(append([]string{"status"}, one...)...)
	require.Equal(t, ctl.ExitOK, code, errOut)
	require.Regexp(t, fmt.Sprintf(`(?m)^HOTTEST CONFLICTS \(last 5 min, node 1: %d certification aborts\)`, conflicts), out)
	require.Regexp(t, fmt.Sprintf(`(?m)^key public\.admin_t\(1\) +%d +100%%`, conflicts), out)

	// protocol show, YAML
	out, errOut, code = octl.run(append([]string{"protocol", "show", "-o", "yaml"}, dirs...)...)
	require.Equal(t, ctl.ExitOK, code, errOut)
	var ps struct {
		Nodes []struct {
			Endpoint string         `yaml:"endpoint"`
			Protocol map[string]any `yaml:"protocol"`
		} `yaml:"nodes"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(out), &ps), out)
	require.Len(t, ps.Nodes, 3)
	require.Equal(t, 3, strings.Count(out, "name: dbsm-si"), out)
	require.Equal(t, 3, strings.Count(out, "guarantee: 1-copy snapshot isolation"), out)

	// schema-check through node 2: every node fingerprints, all the same
	out, errOut, code = octl.run("schema-check", "-o", "json", "--data-dir", c.cfgs[1].DataDir)
	require.Equal(t, ctl.ExitOK, code, "%s\n%s", out, errOut)
	var sc struct {
		AtSeqno    uint64             `json:"at_seqno"`
		Complete   bool               `json:"complete"`
		Consistent bool               `json:"consistent"`
		Schema     admin.SchemaStatus `json:"schema"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &sc))
	require.True(t, sc.Complete)
	require.True(t, sc.Consistent)
	require.Positive(t, sc.AtSeqno)
	require.Len(t, sc.Schema.Peers, 2)

	// credentials refused: a wrong token, none, another node's
	_, errOut, code = octl.run("status", "--endpoints", c.nodes[0].AdminAddr(), "--token", "not-the-token-0123456789")
	require.Equal(t, ctl.ExitUnreachable, code, errOut)
	require.Contains(t, errOut, "refused the credentials")
	_, _, code = octl.run("status", "--endpoints", c.nodes[0].AdminAddr())
	require.Equal(t, ctl.ExitUnreachable, code)
	_, _, code = octl.run("status", "--endpoints", c.nodes[0].AdminAddr(), "--token-file", token(1))
	require.Equal(t, ctl.ExitUnreachable, code, "each node generated its own token")
	// the client port is not the admin API
	_, _, code = octl.run("status", "--endpoints", c.cfgs[0].Listen, "--token-file", token(0), "--request-timeout", "2s")
	require.Equal(t, ctl.ExitUnreachable, code)

	// data check and transaction outcomes
	out, errOut, code = octl.run("data-check", "-o", "json", "--data-dir", c.cfgs[1].DataDir)
	require.Equal(t, ctl.ExitOK, code, "%s\n%s", out, errOut)
	var dc struct {
		Complete, Consistent bool
	}
	require.NoError(t, json.Unmarshal([]byte(out), &dc), out)
	require.True(t, dc.Complete && dc.Consistent, out)
	for _, sql := range []string{"SET ordo.txn_label = 'admin-label'", "INSERT INTO admin_t VALUES (42, 'labelled')"} {
		_, err := conn.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	out, errOut, code = octl.run("txn-status", "admin-label", "--data-dir", c.cfgs[2].DataDir)
	require.Equal(t, ctl.ExitOK, code, "%s\n%s", out, errOut)
	require.Contains(t, out, "admin-label: committed")
	out, _, code = octl.run("txn-status", "never-sent", "--data-dir", c.cfgs[2].DataDir)
	require.Equal(t, ctl.ExitFailed, code)
	require.Contains(t, out, "never-sent: unknown")

	// usage errors
	_, _, code = octl.run("status", "--bogus")
	require.Equal(t, ctl.ExitUsage, code)
	_, _, code = octl.run("status", "-o", "xml", "--data-dir", c.cfgs[0].DataDir)
	require.Equal(t, ctl.ExitUsage, code)
}

// TestReadyzMinority: /readyz on the metrics address answers 200 on a
// healthy node and 503 on a node cut off from the majority (the other two
// killed), with the reason; ordoctl status exits 1 for that node; once the
// others are back it is ready again. The metrics address serves nothing of
// the admin API.
func TestReadyzMinority(t *testing.T) {
	t.Parallel()
	c := startProcCluster(t, 3, "dbsm")
	octl := buildOrdoctl(t)
	readyz := func(i int) (int, admin.Ready) {
		cl := &http.Client{Timeout: 10 * time.Second}
		resp, err := cl.Get("http://" + c.metrics[i] + admin.PathReady)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		var rd admin.Ready
		require.NoError(t, json.Unmarshal(b, &rd), "%s", b)
		return resp.StatusCode, rd
	}
	for i := range c.metrics {
		require.Eventually(t, func() bool { code, _ := readyz(i); return code == http.StatusOK }, 30*time.Second, 200*time.Millisecond, "node %d ready", i+1)
	}
	for _, path := range []string{"/schema", "/schema/check", admin.PathStatus} {
		resp, err := http.Get("http://" + c.metrics[0] + path)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusNotFound, resp.StatusCode, "%s is not served on the metrics address", path)
	}
	dataDir := func(i int) string { return filepath.Join(c.dir, fmt.Sprint("node", i+1)) }
	_, errOut, code := octl.run("status", "--data-dir", dataDir(0))
	require.Equal(t, ctl.ExitOK, code, errOut)

	c.kill(1)
	c.kill(2)
	var last admin.Ready
	require.Eventually(t, func() bool {
		var code int
		code, last = readyz(0)
		return code == http.StatusServiceUnavailable
	}, 20*time.Second, 200*time.Millisecond, "node 1 cut off from the majority must not be ready: %+v", last)
	require.False(t, last.Ready)
	require.Regexp(t, "no Raft leader known|no quorum confirmed", last.Reason)
	t.Logf("cut off: /readyz 503: %s", last.Reason)
	out, errOut, code := octl.run("status", "--data-dir", dataDir(0))
	require.Equal(t, ctl.ExitFailed, code, "%s\n%s", out, errOut)
	require.Contains(t, errOut, "node 1 is not ready")

	c.start(1)
	c.start(2)
	require.Eventually(t, func() bool { code, _ := readyz(0); return code == http.StatusOK }, 60*time.Second, 200*time.Millisecond, "ready again")
	// The restarted nodes learn the leader in their own time.
	require.Eventually(t, func() bool {
		_, errOut, code = octl.run("status", "--data-dir", dataDir(0), "--data-dir", dataDir(1), "--data-dir", dataDir(2))
		return code == ctl.ExitOK
	}, 60*time.Second, 500*time.Millisecond, "every node ready again: %s", errOut)
}
