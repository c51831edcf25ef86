// Command order benchmarks Ordo's total-order service: three nodes in one
// process on loopback gRPC, each with its own fsynced log on disk, and
// 1, 16 and 64 concurrent proposers of 256-byte payloads spread round-robin
// over the nodes. For each level it runs several rounds and reports the
// medians of throughput and of p50/p99 commit latency (Propose call to its
// return, which is after the entry is committed and delivered on the
// proposing node). The last line is machine-readable:
//
//	RESULT p50_ms_1=<p50 ms at 1 proposer> tput_64=<proposals/s at 64>
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ordo-db/ordo/internal/totalorder"
	"github.com/ordo-db/ordo/internal/totalorder/transport"
)

func main() {
	var (
		dur    = flag.Duration("duration", 2*time.Second, "length of one round")
		rounds = flag.Int("rounds", 5, "rounds per concurrency level")
		size   = flag.Int("size", 256, "payload bytes")
		dir    = flag.String("dir", "", "data directory (default: a new temporary directory on disk)")
		noSync = flag.Bool("nosync", false, "disable fsync (for comparison only)")
		prof   = flag.String("cpuprofile", "", "write a CPU profile here")
		levels = flag.String("levels", "1,16,64", "comma-separated numbers of concurrent proposers")
	)
	flag.Parse()
	if *prof != "" {
		f, err := os.Create(*prof)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench-order:", err)
			os.Exit(1)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "bench-order:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	var concs []int
	for _, f := range strings.Split(*levels, ",") {
		c, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || c <= 0 {
			fmt.Fprintf(os.Stderr, "bench-order: bad -levels %q\n", *levels)
			os.Exit(2)
		}
		concs = append(concs, c)
	}
	if err := run(concs, *dur, *rounds, *size, *dir, *noSync); err != nil {
		fmt.Fprintln(os.Stderr, "bench-order:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

type result struct {
	tput     float64
	p50, p99 time.Duration
	n        int
	errs     int64
}

func run(concs []int, dur time.Duration, rounds, size int, dir string, noSync bool) error {
	if dir == "" {
		d, err := os.MkdirTemp("", "ordo-bench-order-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	nodes, stop, err := startCluster(dir, noSync)
	if err != nil {
		return err
	}
	defer stop()
	if err := waitLeader(nodes, 10*time.Second); err != nil {
		return err
	}
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte(i)
	}
	// warm up connections and the log
	if _, err := measure(nodes, 16, 500*time.Millisecond, payload); err != nil {
		return err
	}
	fmt.Printf("total order: 3 nodes, loopback gRPC, fsync=%v, %d-byte proposals, %v rounds x %d\n", !noSync, size, dur, rounds)
	fmt.Printf("%-10s %12s %10s %10s   rounds (tput p50 p99)\n", "proposers", "proposals/s", "p50_ms", "p99_ms")
	med := map[int]result{}
	for _, conc := range concs {
		var rs []result
		for r := 0; r < rounds; r++ {
			res, err := measure(nodes, conc, dur, payload)
			if err != nil {
				return err
			}
			rs = append(rs, res)
		}
		m := result{
			tput: median(rs, func(r result) float64 { return r.tput }),
			p50:  time.Duration(median(rs, func(r result) float64 { return float64(r.p50) })),
			p99:  time.Duration(median(rs, func(r result) float64 { return float64(r.p99) })),
		}
		med[conc] = m
		fmt.Printf("%-10d %12.0f %10.3f %10.3f  ", conc, m.tput, ms(m.p50), ms(m.p99))
		for _, r := range rs {
			fmt.Printf(" (%.0f %.3f %.3f)", r.tput, ms(r.p50), ms(r.p99))
		}
		fmt.Println()
	}
	fmt.Printf("RESULT p50_ms_1=%.3f tput_64=%.0f\n", ms(med[1].p50), med[64].tput)
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func median(rs []result, f func(result) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	sort.Float64s(v)
	return v[len(v)/2]
}

// measure runs conc proposers (proposer i on node i%3) for dur.
func measure(nodes []*totalorder.Node, conc int, dur time.Duration, payload []byte) (result, error) {
	var (
		wg       sync.WaitGroup
		stop     atomic.Bool
		mu       sync.Mutex
		lats     []time.Duration
		errs     atomic.Int64
		firstErr error
	)
	start := time.Now()
	for i := 0; i < conc; i++ {
		nd := nodes[i%len(nodes)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, 4096)
			for !stop.Load() {
				t0 := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := nd.Propose(ctx, payload)
				cancel()
				if err != nil {
					// e.g. ErrNoQuorum for a proposal lost in a leader
					// change: counted and reported, the proposer goes on
					errs.Add(1)
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					continue
				}
				local = append(local, time.Since(t0))
			}
			mu.Lock()
			lats = append(lats, local...)
			mu.Unlock()
		}()
	}
	time.Sleep(dur)
	stop.Store(true)
	wg.Wait()
	elapsed := time.Since(start)
	if len(lats) == 0 {
		return result{}, fmt.Errorf("no proposal completed in %v (first error: %v)", dur, firstErr)
	}
	if firstErr != nil {
		fmt.Fprintf(os.Stderr, "bench-order: %d proposals failed at %d proposers, first: %v\n", errs.Load(), conc, firstErr)
	}
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	return result{
		tput: float64(len(lats)) / elapsed.Seconds(),
		p50:  lats[len(lats)/2],
		p99:  lats[len(lats)*99/100],
		n:    len(lats),
		errs: errs.Load(),
	}, nil
}

func startCluster(dir string, noSync bool) ([]*totalorder.Node, func(), error) {
	const n = 3
	listeners := make([]net.Listener, n)
	peers := map[uint64]string{}
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, nil, err
		}
		listeners[i] = l
		peers[uint64(i+1)] = l.Addr().String()
	}
	var (
		nodes []*totalorder.Node
		wg    sync.WaitGroup
	)
	stop := func() {
		for _, nd := range nodes {
			nd.Stop()
		}
		wg.Wait()
	}
	for i := 0; i < n; i++ {
		id := uint64(i + 1)
		tr, err := transport.NewGRPC(transport.GRPCConfig{ID: id, Listener: listeners[i]})
		if err != nil {
			stop()
			return nil, nil, err
		}
		cfg := totalorder.Config{
			ID:             id,
			Dir:            fmt.Sprintf("%s/node%d", dir, id),
			Peers:          peers,
			Transport:      tr,
			TickInterval:   20 * time.Millisecond,
			ElectionTicks:  10,
			HeartbeatTicks: 1,
		}
		cfg.Storage.NoSync = noSync
		nd, err := totalorder.Start(cfg)
		if err != nil {
			stop()
			return nil, nil, err
		}
		nodes = append(nodes, nd)
		wg.Add(1)
		go func() { // the consumer: drain and mark applied
			defer wg.Done()
			for d := range nd.Deliveries() {
				nd.MarkApplied(d.Seqno)
			}
		}()
	}
	return nodes, stop, nil
}

func waitLeader(nodes []*totalorder.Node, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if nodes[0].Leader() != 0 {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("no leader within %v", timeout)
}
