package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/internal/ctl"
)

// TestOnlineProtocolSwitch: the cluster switches dbsm → pgr → cons →
// dbsm-si with the real ordoctl while bank transfers run through every
// node. Every transfer also records itself in a ledger, so at the end the
// ledger holds exactly the transfers clients were told committed (none
// lost, none applied twice); the total is kept on every node, replicas are
// identical, every node shows the protocol in force, and a node restarted
// after the switches still runs the last one.
func TestOnlineProtocolSwitch(t *testing.T) {
	t.Parallel()
	c := startCluster(t, 3, "dbsm")
	octl := buildOrdoctl(t)
	ctx := context.Background()
	setup := c.connect(0)
	for _, sql := range []string{
		"CREATE TABLE bank (id int PRIMARY KEY, bal bigint NOT NULL)",
		"CREATE TABLE ledger (id bigint PRIMARY KEY, amount int NOT NULL)",
		"INSERT INTO bank SELECT g, 1000 FROM generate_series(1, 10) g",
	} {
		_, err := setup.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	c.waitConverged()

	var committed, retried, next atomic.Int64
	var failure errorSlot
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 6; w++ {
		conn := c.connect(w % 3)
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			for {
				select {
				case <-stop:
					return
				default:
				}
				from, to := 1+rng.IntN(10), 1+rng.IntN(10)
				if from == to {
					continue
				}
				id := next.Add(1)
				err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, "UPDATE bank SET bal = bal - 1 WHERE id = $1", from); err != nil {
						return err
					}
					if _, err := tx.Exec(ctx, "UPDATE bank SET bal = bal + 1 WHERE id = $1", to); err != nil {
						return err
					}
					_, err := tx.Exec(ctx, "INSERT INTO ledger VALUES ($1, 1)", id)
					return err
				})
				switch sqlstate(err) {
				case "":
					if err != nil {
						failure.Store(fmt.Errorf("client %d: %w", w, err))
						return
					}
					committed.Add(1)
				case "40001", "40P01":
					retried.Add(1)
				default:
					failure.Store(fmt.Errorf("client %d: %w", w, err))
					return
				}
			}
		}()
	}
	// show returns the protocol each node runs. Until the last node has
	// applied a switch, the nodes differ and ordoctl says so with
	// ExitFailed: that is a state to wait through, not a failure. It runs
	// inside require.Eventually's goroutine, so it reports a real failure
	// by returning nil, never by require (FailNow there would only stop
	// the goroutine and leave Eventually waiting).
	show := func() []string {
		t.Helper()
		out, errOut, code := octl.run("protocol", "show", "-o", "json", "--data-dir", c.cfgs[0].DataDir, "--data-dir", c.cfgs[1].DataDir, "--data-dir", c.cfgs[2].DataDir)
		if code != ctl.ExitOK && !(code == ctl.ExitFailed && strings.Contains(errOut, "the nodes run different protocols")) {
			t.Errorf("ordoctl protocol show: exit %d\n%s\n%s", code, out, errOut)
			return nil
		}
		var ps struct {
			Nodes []struct {
				Protocol struct {
					Name  string `json:"name"`
					Since uint64 `json:"since"`
				} `json:"protocol"`
			} `json:"nodes"`
		}
		if err := json.Unmarshal([]byte(out), &ps); err != nil {
			t.Errorf("ordoctl protocol show -o json: %v\n%s", err, out)
			return nil
		}
		var names []string
		for _, n := range ps.Nodes {
			names = append(names, n.Protocol.Name)
		}
		return names
	}
	for i, p := range []string{"pgr", "cons", "dbsm-si"} {
		time.Sleep(1200 * time.Millisecond)
		before := committed.Load()
		out, errOut, code := octl.run("protocol", "set", p, "--data-dir", c.cfgs[i].DataDir)
		require.Equal(t, ctl.ExitOK, code, "%s\n%s", out, errOut)
		t.Logf("switched to %s through node %d after %d commits", p, i+1, before)
		require.Eventually(t, func() bool {
			names := show()
			return len(names) == 3 && names[0] == p && names[1] == p && names[2] == p
		}, 10*time.Second, 200*time.Millisecond, "every node runs %s", p)
	}
	// A switch to or from dbsm-rc, or to a name that is no protocol, is
	// refused, saying why and what to do.
	for p, want := range map[string]string{
		"dbsm-rc": "dbsm-rc cannot be switched to or from online",
		"dbsm-x":  `unknown protocol "dbsm-x"`,
	} {
		out, errOut, code := octl.run("protocol", "set", p, "--data-dir", c.cfgs[0].DataDir)
		require.NotEqual(t, ctl.ExitOK, code, "%s\n%s", out, errOut)
		require.Contains(t, errOut, "protocol switch refused: "+want)
	}
	time.Sleep(1200 * time.Millisecond)
	close(stop)
	wg.Wait()
	if f := failure.Load(); f != nil {
		t.Fatalf("unexpected error: %v", f)
	}
	t.Logf("%d transfers committed, %d aborted and not retried", committed.Load(), retried.Load())
	require.Positive(t, committed.Load())

	c.waitConverged()
	sum := c.checksum(0, "bank")
	ledger := c.checksum(0, "ledger")
	for i := range c.nodes {
		require.Equal(t, sum, c.checksum(i, "bank"), "node %d differs", i+1)
		require.Equal(t, ledger, c.checksum(i, "ledger"), "node %d differs", i+1)
		var total, rows int64
		require.NoError(t, c.direct(i).QueryRow(ctx, "SELECT sum(bal), (SELECT count(*) FROM ledger) FROM bank").Scan(&total, &rows))
		require.Equal(t, int64(10000), total, "node %d", i+1)
		require.Equal(t, committed.Load(), rows, "node %d: the ledger holds exactly the committed transfers", i+1)
		require.Zero(t, c.unreplicated(i))
	}

	// A restart keeps the protocol in force, and the node commits again.
	c.nodes[2].Stop()
	c.startNode(2)
	require.Equal(t, []string{"dbsm-si", "dbsm-si", "dbsm-si"}, show())
	_, err := c.connect(2).Exec(ctx, "UPDATE bank SET bal = bal WHERE id = 1")
	require.NoError(t, err)
	c.waitConverged()
}
