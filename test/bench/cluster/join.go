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
	"github.com/ordo-db/ordo/pkg/config"
	"github.com/ordo-db/ordo/test/internal/benchcluster"
)

// runJoin is -join (`make bench-join`): a fourth node joins a 3-node
// dbsm-si cluster holding pgbench's tables at -scale while pgbench clients
// write through every node; the time the join takes (until its copy is
// done, and until it is a voter) is compared with pg_dump -Fc | pg_restore
// of the same database under the same load, and the donor's throughput
// during the copy with its throughput before it.
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

	// Clients through every node, each node's pgbench reporting its
	// throughput every second.
	pb := make([]*progress, len(c.DSNs))
	for i, dsn := range c.DSNs {
		if pb[i], err = startProgress(pgbench, dsn, 2); err != nil {
			return err
		}
		defer pb[i].stop()
	}
	time.Sleep(5 * time.Second)

	// The baseline, under the same load: pg_dump | pg_restore of the
	// donor's database.
	baseline := make([]float64, 0, *runs)
	for r := range *runs {
		s, err := dumpRestore(ctx, binDir, c.Servers[donor], direct, r)
		if err != nil {
			return err
		}
		baseline = append(baseline, s)
		fmt.Printf("run %d pg_dump -Fc | pg_restore (clients writing through every node): %.2f s\n", r+1, s)
	}
	time.Sleep(10 * time.Second)

	pg, err := pglocal.Start(ctx, pglocal.Options{N: 1, Fsync: true})
	if err != nil {
		return err
	}
	defer pg.Stop()
	cfg, err := joinerConfig(c, pg.Servers[0].DSN("postgres"))
	if err != nil {
		return err
	}
	tok, err := os.ReadFile(filepath.Join(c.Configs[donor].DataDir, admin.TokenFileName))
	if err != nil {
		return err
	}
	from := admin.NewClient(c.Nodes[donor].AdminAddr(), admin.ClientOptions{Token: strings.TrimSpace(string(tok))})
	defer from.Close()
	began := time.Now()
	n, err := node.StartJoin(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), node.JoinOptions{From: from, BinDir: binDir, Progress: os.Stdout})
	if err != nil {
		return err
	}
	defer n.Stop()
	copied := time.Since(began)
	for {
		ms, err := from.Members(ctx)
		if err != nil {
			return err
		}
		voter := false
		for _, m := range ms.Members {
			voter = voter || (m.ID == uint64(cfg.ID) && m.Role == "voter")
		}
		if voter {
			break
		}
		if time.Since(began) > 10*time.Minute {
			return fmt.Errorf("node %d did not become a voter", cfg.ID)
		}
		time.Sleep(100 * time.Millisecond)
	}
	voterAfter := time.Since(began)
	time.Sleep(2 * time.Second)
	before := pb[donor].mean(began.Add(-10*time.Second), began)
	during := pb[donor].mean(began, began.Add(copied))
	var all float64
	for _, p := range pb {
		all += p.mean(began.Add(-10*time.Second), began)
	}
	base := median(baseline)
	fmt.Printf("\njoin (scale %d): copy done in %.2f s, voter after %.2f s; pg_dump | pg_restore %.2f s (median of %d)\n",
		*scale, copied.Seconds(), voterAfter.Seconds(), base, len(baseline))
	fmt.Printf("donor (node %d) throughput: %.1f tps before, %.1f tps during the copy (cluster %.1f tps before)\n", donor+1, before, during, all)
	fmt.Printf("RESULT join_s=%.2f voter_s=%.2f dump_restore_s=%.2f join_ratio=%.2f donor_tps_before=%.1f donor_tps_during=%.1f donor_tps_ratio=%.2f\n",
		copied.Seconds(), voterAfter.Seconds(), base, copied.Seconds()/base, before, during, during/before)
	return nil
}

// dumpRestore times pg_dump -Fc of src piped into pg_restore of a new
// database on the server of direct.
func dumpRestore(ctx context.Context, binDir, src, direct string, run int) (float64, error) {
	conn, err := pgx.Connect(ctx, direct)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	db := fmt.Sprintf("restore_%d", run)
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

// joinerConfig is node 4's configuration: the cluster's settings, an
// empty database.
func joinerConfig(c *benchcluster.Cluster, pgDSN string) (*config.Node, error) {
	listen, err := benchcluster.FreeAddr()
	if err != nil {
		return nil, err
	}
	peerListen, err := benchcluster.FreeAddr()
	if err != nil {
		return nil, err
	}
	first := c.Configs[0]
	peers := map[uint32]string{4: peerListen}
	for id, a := range first.Peers {
		peers[id] = a
	}
	dir, err := os.MkdirTemp("", "ordo-bench-join-")
	if err != nil {
		return nil, err
	}
	cfg := &config.Node{ID: 4, Listen: listen, PeerListen: peerListen, Postgres: pgDSN, DataDir: dir, Peers: peers, Protocol: first.Protocol}
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
