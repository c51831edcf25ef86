package main

import (
	"context"
	"fmt"
	"os/exec"
	"sort"
	"strconv"
	"time"

	"github.com/ordo-db/ordo/test/internal/benchcluster"
)

// runFollow is -follow: 1 client on a node that does not lead, the links
// delayed, leader_follows_writes off and on (see the package comment).
func runFollow(ctx context.Context, pgbench string) error {
	var p50 = map[bool][]float64{}
	moved := 0
	rounds := *runs
	*runs = 1 // measure's own repetitions: one per round here
	for r := 0; r < rounds; r++ {
		for _, on := range []bool{false, true} {
			c, err := benchcluster.Start(ctx, benchcluster.Options{Protocol: "dbsm-si", Delayable: true, LeaderStays: !on,
				Load: func(dsn string) error { return initPgbench(pgbench, dsn) }})
			if err != nil {
				return err
			}
			lead := c.Nodes[0].Order().Leader()
			for i := 0; lead == 0 && i < 200; i++ {
				time.Sleep(50 * time.Millisecond)
				lead = c.Nodes[0].Order().Leader()
			}
			target := 0
			for uint64(target+1) == lead {
				target++
			}
			c.SetDelay(*follow)
			// The same client for 15 s first: followQuiet (10 s after the
			// election) and a window (2 s) before a leader may move.
			warm := exec.Command(pgbench, "-n", "-c", "1", "-T", "15", "-M", "prepared", c.DSNs[target])
			if out, err := warm.CombinedOutput(); err != nil {
				c.Stop()
				return fmt.Errorf("pgbench (warm-up): %v\n%s", err, out)
			}
			res, err := measure(pgbench, c.DSNs[target:target+1], c.PG(), 1)
			after := c.Nodes[target].Order().Leader()
			c.Stop()
			if err != nil {
				return err
			}
			if on && after == uint64(target+1) {
				moved++
			}
			p50[on] = append(p50[on], res.p50ms)
			fmt.Printf("run %d  leader_follows_writes=%-5v client on node %d, leader %d then %d: tps=%.1f p50=%.3fms\n",
				r+1, on, target+1, lead, after, res.tps, res.p50ms)
		}
	}
	med := func(v []float64) float64 {
		sort.Float64s(v)
		return v[len(v)/2]
	}
	fmt.Printf("RESULT follow_off_p50_ms=%.3f follow_on_p50_ms=%.3f follow_on_moved=%s\n", med(p50[false]), med(p50[true]), strconv.Itoa(moved))
	return nil
}
