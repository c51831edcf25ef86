package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/url"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDemoEndToEnd runs the real binary as a user would: `ordo demo`, psql
// through every printed Ordo connection string, the printed ordoctl command,
// then Ctrl-C, and checks that nothing is left listening.
func TestDemoEndToEnd(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "ordo")
	build := exec.Command("go", "build", "-o", bin, ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)

	ordoctl := filepath.Join(t.TempDir(), "ordoctl")
	out, err = exec.Command("go", "build", "-o", ordoctl, "../ordoctl").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)

	psql, err := exec.LookPath("psql")
	require.NoError(t, err, "psql is needed (make test installs postgresql-client)")

	cmd := exec.Command(bin, "demo", "--base-port", "0")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
	}()

	line := regexp.MustCompile(`^(node\d+) ordo=(\S+) postgres=(\S+)$`)
	type node struct{ name, ordo, postgres string }
	var nodes []node
	var admin []string // the printed ordoctl command
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	timeout := time.After(90 * time.Second)
read:
	for {
		select {
		case l, ok := <-lines:
			require.True(t, ok, "demo exited early; stderr:\n%s", stderr.String())
			if m := line.FindStringSubmatch(l); m != nil {
				nodes = append(nodes, node{m[1], m[2], m[3]})
			}
			if f := strings.Fields(l); len(f) > 2 && filepath.Base(f[0]) == "ordoctl" {
				admin = f
			}
			if strings.Contains(l, "Ctrl-C") {
				break read
			}
		case <-timeout:
			t.Fatalf("demo printed no connection strings within 90s; stderr:\n%s", stderr.String())
		}
	}
	go func() {
		for range lines {
		}
	}()
	require.Len(t, nodes, 3)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run := func(dsn, sql string) string {
		out, err := exec.CommandContext(ctx, psql, dsn, "-XAtqc", sql).CombinedOutput()
		require.NoError(t, err, "psql %s -c %q: %s", dsn, sql, out)
		return strings.TrimSpace(string(out))
	}
	var addrs []string
	for i, n := range nodes {
		require.Equal(t, "node"+string(rune('1'+i)), n.name)
		// A table made and written through this node's Ordo port reaches
		// every node's PostgreSQL.
		table := "demo_check_" + n.name
		run(n.ordo, "CREATE TABLE "+table+" (id int PRIMARY KEY)")
		run(n.ordo, "INSERT INTO "+table+" VALUES (7)")
		for _, m := range nodes {
			require.Equal(t, "7", run(m.ordo, "SET ordo.read_consistency = 'sync'; SELECT id FROM "+table), "through %s", m.name)
			require.Equal(t, "7", run(m.postgres, "SELECT id FROM "+table), "in %s's PostgreSQL", m.name)
		}
		for _, s := range []string{n.ordo, n.postgres} {
			u, err := url.Parse(s)
			require.NoError(t, err)
			addrs = append(addrs, u.Host)
		}
	}

	// The printed ordoctl command works as printed (mutual TLS with the
	// demo's admin client certificate) and sees three ready nodes.
	require.NotEmpty(t, admin, "demo printed no ordoctl command")
	ctl, err := exec.CommandContext(ctx, ordoctl, append(admin[1:], "-o", "json")...).Output()
	require.NoError(t, err, "%v: %s", admin, ctl)
	var status struct {
		Nodes []struct {
			Endpoint string
			Status   struct {
				NodeID int `json:"node_id"`
				Ready  struct{ Ready bool }
			}
		}
	}
	require.NoError(t, json.Unmarshal(ctl, &status), "%s", ctl)
	require.Len(t, status.Nodes, 3)
	for i, n := range status.Nodes {
		require.Equal(t, i+1, n.Status.NodeID)
		require.True(t, n.Status.Ready.Ready, "node %d", i+1)
		addrs = append(addrs, n.Endpoint)
	}

	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	select {
	case err := <-exited:
		require.NoError(t, err, "demo did not exit cleanly; stderr:\n%s", stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("demo still running 30s after Ctrl-C; stderr:\n%s", stderr.String())
	}
	for _, a := range addrs {
		c, err := net.DialTimeout("tcp", a, time.Second)
		if err == nil {
			c.Close()
		}
		require.Error(t, err, "%s still listening after the demo stopped", a)
	}
}
