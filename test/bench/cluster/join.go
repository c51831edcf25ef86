package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-db/ordo/internal/admin"
	"github.com/ordo-db/ordo/internal/node"
	"github.com/ordo-db/ordo/internal/pglocal"
	"github.com/ordo-db/ordo/internal/testport"
	"github.com/ordo-db/ordo/pkg/config"
	"github.com/ordo-db/ordo/test/internal/benchcluster"
)

// runJoin is -join (`make bench-join`): nodes join a 3-node dbsm-si
// cluster holding pgbench's tables at -scale from node 2, first with no
// client (node 4), then while pgbench clients write through the three
// original nodes (node 5); each join (until its copy is done, and until it
// is a voter) is compared with pg_dump -Fc | pg_restore of the same
// database under the same conditions (-runs times, median), and under
// load the donor's throughput during the copy with the 10 s before it.
func runJoin(ctx context.Context, pgbench, direct string) error {
	c, err := benchcluster.Start(ctx, benchcluster.Options{Protocol: "dbsm-si", Load: func(dsn string) error { return initPgbench(pgbench, dsn) }})
	if err != nil {
		return err
	}
	defer c.Stop()
	binDir, err := pglocal.FindBinaries()
	if err != nil {
		return err
	}
	const donor = 1 // node 2
	tok, err := os.ReadFile(filepath.Join(c.Configs[donor].DataDir, admin.TokenFileName))
	if err != nil {
		return err
	}
	from := admin.NewClient(c.Nodes[donor].AdminAddr(), admin.ClientOptions{Token: strings.TrimSpace(string(tok))})
	defer from.Close()
	baseline := func(label string) (float64, error) {
		var ss []float64
		for r := range *runs {
			s, err := dumpRestore(ctx, binDir, c.Servers[donor], direct, label+strconv.Itoa(r))
			if err != nil {
				return 0, err
			}
			ss = append(ss, s)
			fmt.Printf("%s run %d: pg_dump -Fc | pg_restore %.2f s\n", label, r+1, s)
		}
		return median(ss), nil
	}
	joined := 0
	join := func(label string) (copied, voter time.Duration, began time.Time, err error) {
		joined++
		id := uint32(3 + joined)
		pg, err := pglocal.Start(ctx, pglocal.Options{N: 1, Fsync: true})
		if err != nil {
			return 0, 0, began, err
		}
		stops = append(stops, func() { _ = pg.Stop() })
		cfg, err := joinerConfig(c, id, pg.Servers[0].DSN("postgres"))
		if err != nil {
			return 0, 0, began, err
		}
		began = time.Now()
		n, err := node.StartJoin(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), node.JoinOptions{From: from, BinDir: binDir, Progress: os.Stdout})
		if err != nil {
			return 0, 0, began, err
		}
		stops = append(stops, n.Stop)
		copied = time.Since(began)
		for {
			ms, err := from.Members(ctx)
			if err != nil {
				return 0, 0, began, err
			}
			for _, m := range ms.Members {
				if m.ID == uint64(id) && m.Role == "voter" {
					voter = time.Since(began)
				}
			}
			if voter > 0 {
				break
			}
			if time.Since(began) > 20*time.Minute {
				return 0, 0, began, fmt.Errorf("node %d did not become a voter", id)
			}
			time.Sleep(100 * time.Millisecond)
		}
		fmt.Printf("%s: node %d copied in %.2f s, a voter after %.2f s\n", label, id, copied.Seconds(), voter.Seconds())
		return copied, voter, began, nil
	}
	defer func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}()

	// Idle.
	idleBase, err := baseline("idle")
	if err != nil {
		return err
	}
	idleCopy, idleVoter, _, err := join("idle")
	if err != nil {
		return err
	}

	// Under load: clients through the three original nodes, each node's
	// pgbench reporting its throughput every second.
	pb := make([]*progress, len(c.DSNs))
	for i, dsn := range c.DSNs {
		if pb[i], err = startProgress(pgbench, dsn, 2); err != nil {
			return err
		}
		defer pb[i].stop()
	}
	time.Sleep(5 * time.Second)
	loadBase, err := baseline("load")
	if err != nil {
		return err
	}
	time.Sleep(10 * time.Second)
	loadCopy, loadVoter, began, err := join("load")
	if err != nil {
		return err
	}
	before := pb[donor].mean(began.Add(-10*time.Second), began)
	during := pb[donor].mean(began, began.Add(loadCopy))
	drop := 100 * (1 - during/before)
	fmt.Printf("\njoin at scale %d, idle: copy %.2f s (a voter after %.2f s) against pg_dump | pg_restore %.2f s: ratio %.2f\n",
		*scale, idleCopy.Seconds(), idleVoter.Seconds(), idleBase, idleCopy.Seconds()/idleBase)
	fmt.Printf("join at scale %d, 2 pgbench clients per node: copy %.2f s (a voter after %.2f s) against %.2f s: ratio %.2f\n",
		*scale, loadCopy.Seconds(), loadVoter.Seconds(), loadBase, loadCopy.Seconds()/loadBase)
	fmt.Printf("donor (node %d) throughput: %.1f tps before, %.1f tps during the copy (%.0f %% less)\n", donor+1, before, during, drop)
	fmt.Printf("RESULT join_s=%.2f baseline_s=%.2f ratio=%.2f join_load_s=%.2f baseline_load_s=%.2f ratio_load=%.2f voter_load_s=%.2f donor_tps_drop_pct=%.0f\n",
		idleCopy.Seconds(), idleBase, idleCopy.Seconds()/idleBase, loadCopy.Seconds(), loadBase, loadCopy.Seconds()/loadBase, loadVoter.Seconds(), drop)
	return nil
}

// stops are what runJoin started for the joiners, stopped in reverse.
var stops []func()

// dumpRestore times pg_dump -Fc of src piped into pg_restore of a new
// database on the server of direct.
func dumpRestore(ctx context.Context, binDir, src, direct, name string) (float64, error) {
	conn, err := pgx.Connect(ctx, direct)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	db := "restore_" + name
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		return 0, err
	}
	u, err := url.Parse(direct)
	if err != nil {
		return 0, err
	}
	u.Path = "/" + db
	t0 := time.Now()
	dump := exec.Command(filepath.Join(binDir, "pg_dump"), "-Fc", "-d", src)
	restore := exec.Command(filepath.Join(binDir, "pg_restore"), "--no-owner", "--exit-on-error", "-d", u.String())
	pipe, err := dump.StdoutPipe()
	if err != nil {
		return 0, err
	}
	restore.Stdin = pipe
	var derr, rerr strings.Builder
	dump.Stderr, restore.Stderr = &derr, &rerr
	if err := dump.Start(); err != nil {
		return 0, err
	}
	if err := restore.Run(); err != nil {
		return 0, fmt.Errorf("pg_restore: %v: %s", err, rerr.String())
	}
	if err := dump.Wait(); err != nil {
		return 0, fmt.Errorf("pg_dump: %v: %s", err, derr.String())
	}
	return time.Since(t0).Seconds(), nil
}

// joinerConfig is joiner id's configuration: the cluster's settings, an
// empty database.
func joinerConfig(c *benchcluster.Cluster, id uint32, pgDSN string) (*config.Node, error) {
	listen, err := testport.Addr()
	if err != nil {
		return nil, err
	}
	peerListen, err := testport.Addr()
	if err != nil {
		return nil, err
	}
	first := c.Configs[0]
	peers := map[uint32]string{id: peerListen}
	for id, a := range first.Peers {
		peers[id] = a
	}
	dir, err := os.MkdirTemp("", "ordo-bench-join-")
	if err != nil {
		return nil, err
	}
	cfg := &config.Node{ID: id, Listen: listen, PeerListen: peerListen, Postgres: pgDSN, DataDir: dir, Peers: peers, Protocol: first.Protocol}
	cfg.Defaults()
	return cfg, cfg.Validate()
}

// progress is a pgbench run that reports its throughput every second.
type progress struct {
	cmd   *exec.Cmd
	began time.Time
	mu    sync.Mutex
	at    []time.Time
	tps   []float64
	done  chan struct{}
}

var progressLine = regexp.MustCompile(`^progress: ([0-9.]+) s, ([0-9.]+) tps`)

// startProgress starts pgbench (TPC-B-like, retrying serialization
// failures as an application would) with clients against dsn, for as long
// as it is not stopped.
func startProgress(pgbench, dsn string, clients int) (*progress, error) {
	p := &progress{done: make(chan struct{})}
	p.cmd = exec.Command(pgbench, "-n", "-c", strconv.Itoa(clients), "-T", "3600", "-P", "1", "--max-tries=20", dsn)
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	p.cmd.Stdout = io.Discard
	p.began = time.Now()
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			m := progressLine.FindStringSubmatch(sc.Text())
			if m == nil {
				continue
			}
			tps, _ := strconv.ParseFloat(m[2], 64)
			p.mu.Lock()
			p.at, p.tps = append(p.at, time.Now()), append(p.tps, tps)
			p.mu.Unlock()
		}
	}()
	return p, nil
}

// mean is the mean of the per-second throughputs reported in [from, to).
func (p *progress) mean(from, to time.Time) float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var sum float64
	n := 0
	for i, at := range p.at {
		if !at.Before(from) && at.Before(to) {
			sum += p.tps[i]
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

func (p *progress) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	<-p.done
	_ = p.cmd.Wait()
}
