package tpcc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Config is one run of the workload.
type Config struct {
	// DSNs are the servers, one per node. Warehouse w is homed on node
	// (w-1) mod len(DSNs); each client connects to one node and works
	// for a warehouse homed there (paper 003: clients of one node have
	// locality to its warehouses).
	DSNs           []string
	Warehouses     int
	Scale          Scale
	ClientsPerNode int
	Duration       time.Duration
	// Grain: the classes transactions declare (GrainNone unless the
	// cluster runs cons).
	Grain Grain
	// MaxRetries bounds the attempts of one transaction after a
	// serialization failure (40001) or deadlock (40P01); 0 means 100.
	MaxRetries int
	// KeyingThink turns on the keying and think times of clause 5.2.5.
	KeyingThink bool
	Seed        uint64
}

// mix is the cumulative percentage of each type (clause 5.2.3's minima:
// Payment 43 %, Order-Status, Delivery and Stock-Level 4 % each, the
// rest New-Order).
var mix = [numKinds]int{NewOrder: 45, Payment: 88, OrderStatus: 92, Delivery: 96, StockLevel: 100}

// keying and thinking are clause 5.2.5.7's keying times and mean think
// times, per type.
var (
	keying   = [numKinds]time.Duration{18 * time.Second, 3 * time.Second, 2 * time.Second, 2 * time.Second, 2 * time.Second}
	thinking = [numKinds]time.Duration{12 * time.Second, 12 * time.Second, 10 * time.Second, 5 * time.Second, 5 * time.Second}
)

// Stats are one transaction type's results.
type Stats struct {
	Committed  int
	RolledBack int            // New-Order's intended rollbacks
	Aborts     map[string]int // failed attempts retried, by SQLSTATE (40001, 40P01)
	GaveUp     int            // transactions that failed MaxRetries times
	Failed     int            // transactions that failed otherwise
	Latencies  []time.Duration
}

// Attempts is every attempt: committed, rolled back, aborted, given up, failed.
func (s *Stats) Attempts() int {
	n := s.Committed + s.RolledBack + s.Failed
	for _, a := range s.Aborts {
		n += a
	}
	return n
}

// AbortCount is the attempts aborted by the database or the protocol.
func (s *Stats) AbortCount() int {
	n := 0
	for _, a := range s.Aborts {
		n += a
	}
	return n
}

// Percentile returns the latency at p (0 < p <= 1) of completed
// transactions, from the first attempt to the last (retries included).
func (s *Stats) Percentile(p float64) time.Duration {
	if len(s.Latencies) == 0 {
		return 0
	}
	i := int(float64(len(s.Latencies))*p+0.5) - 1
	return s.Latencies[max(0, min(i, len(s.Latencies)-1))]
}

// Report is a run's results.
type Report struct {
	Elapsed time.Duration
	Stats   [numKinds]*Stats
	// Remote accesses kept from the specification: New-Order lines
	// supplied by another warehouse, Payments of a customer of another
	// warehouse.
	OrderLines, RemoteOrderLines int
	Payments, RemotePayments     int
	Errors                       []string // the first few unexpected errors
}

// TpmC is New-Orders committed per minute.
func (r *Report) TpmC() float64 {
	return float64(r.Stats[NewOrder].Committed) / r.Elapsed.Minutes()
}

// Committed is every committed transaction.
func (r *Report) Committed() int {
	n := 0
	for _, s := range r.Stats {
		n += s.Committed + s.RolledBack
	}
	return n
}

// AbortPct is the aborted attempts as a percentage of all attempts.
func (r *Report) AbortPct() float64 {
	a, n := 0, 0
	for _, s := range r.Stats {
		a += s.AbortCount()
		n += s.Attempts()
	}
	if n == 0 {
		return 0
	}
	return 100 * float64(a) / float64(n)
}

// Failures is the transactions that failed for good (given up or
// failed with an unexpected error).
func (r *Report) Failures() int {
	n := 0
	for _, s := range r.Stats {
		n += s.GaveUp + s.Failed
	}
	return n
}

// Print writes the report as a table.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "%.1f s, tpmC %.1f, aborted attempts %.2f %%\n", r.Elapsed.Seconds(), r.TpmC(), r.AbortPct())
	fmt.Fprintf(w, "%-13s %9s %8s %8s %8s %7s %7s %9s %9s %9s\n", "type", "committed", "rollback", "40001", "40P01", "gaveup", "failed", "p50_ms", "p95_ms", "p99_ms")
	for k, s := range r.Stats {
		fmt.Fprintf(w, "%-13s %9d %8d %8d %8d %7d %7d %9.2f %9.2f %9.2f\n", Kind(k), s.Committed, s.RolledBack, s.Aborts["40001"], s.Aborts["40P01"],
			s.GaveUp, s.Failed, ms(s.Percentile(0.5)), ms(s.Percentile(0.95)), ms(s.Percentile(0.99)))
	}
	fmt.Fprintf(w, "remote: %d of %d order lines (%.2f %%), %d of %d payments (%.1f %%)\n",
		r.RemoteOrderLines, r.OrderLines, pct(r.RemoteOrderLines, r.OrderLines), r.RemotePayments, r.Payments, pct(r.RemotePayments, r.Payments))
	for _, e := range r.Errors {
		fmt.Fprintf(w, "error: %s\n", e)
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func pct(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

// Home returns the node warehouse w is homed on.
func Home(w, nodes int) int { return (w - 1) % nodes }

// Run runs the workload for cfg.Duration (or until ctx ends) and returns
// its report. Connection failures end the run with an error; a
// transaction that fails otherwise is counted and the client goes on.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.MaxRetries == 0 {
		cfg.MaxRetries = 100
	}
	if cfg.Warehouses < 1 || len(cfg.DSNs) == 0 || cfg.ClientsPerNode < 1 {
		return nil, fmt.Errorf("tpcc: need warehouses, servers and clients")
	}
	var terms []*terminal
	defer func() {
		for _, t := range terms {
			t.conn.Close(context.Background())
		}
	}()
	for i, dsn := range cfg.DSNs {
		var homes []int
		for w := 1; w <= cfg.Warehouses; w++ {
			if Home(w, len(cfg.DSNs)) == i {
				homes = append(homes, w)
			}
		}
		for j := range cfg.ClientsPerNode {
			conn, err := pgx.Connect(ctx, dsn)
			if err != nil {
				return nil, fmt.Errorf("tpcc: connect to node %d: %w", i+1, err)
			}
			w := (i+j)%cfg.Warehouses + 1 // more nodes than warehouses
			if len(homes) > 0 {
				w = homes[j%len(homes)]
			}
			seq := uint64(len(terms))
			terms = append(terms, &terminal{conn: conn, r: rand.New(rand.NewPCG(cfg.Seed, seq)), scale: cfg.Scale,
				warehouses: cfg.Warehouses, w: w, grain: cfg.Grain, hid: int64(rand.Uint64() >> 2 &^ 0xffffff)})
		}
	}
	rep := &Report{}
	for k := range rep.Stats {
		rep.Stats[k] = &Stats{Aborts: map[string]int{}}
	}
	var mu sync.Mutex
	runCtx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for _, t := range terms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := &Report{}
			for k := range local.Stats {
				local.Stats[k] = &Stats{Aborts: map[string]int{}}
			}
			t.loop(ctx, runCtx, cfg, local)
			mu.Lock()
			rep.merge(local)
			mu.Unlock()
		}()
	}
	wg.Wait()
	rep.Elapsed = time.Since(start)
	for _, s := range rep.Stats {
		slices.Sort(s.Latencies)
	}
	sort.Strings(rep.Errors)
	if len(rep.Errors) > 10 {
		rep.Errors = rep.Errors[:10]
	}
	return rep, ctx.Err()
}

func (r *Report) merge(o *Report) {
	for k, s := range o.Stats {
		d := r.Stats[k]
		d.Committed += s.Committed
		d.RolledBack += s.RolledBack
		d.GaveUp += s.GaveUp
		d.Failed += s.Failed
		for c, n := range s.Aborts {
			d.Aborts[c] += n
		}
		d.Latencies = append(d.Latencies, s.Latencies...)
	}
	r.OrderLines += o.OrderLines
	r.RemoteOrderLines += o.RemoteOrderLines
	r.Payments += o.Payments
	r.RemotePayments += o.RemotePayments
	r.Errors = append(r.Errors, o.Errors...)
}

// loop runs transactions, under ctx, until stop ends: the transaction in
// flight then completes and is counted.
func (t *terminal) loop(ctx, stop context.Context, cfg Config, rep *Report) {
	for stop.Err() == nil {
		p := t.r.IntN(100)
		k := NewOrder
		for k < numKinds-1 && p >= mix[k] {
			k++
		}
		if cfg.KeyingThink && !sleep(stop, keying[k]) {
			return
		}
		var run func() error
		switch k {
		case NewOrder:
			in := t.newOrderInput()
			run = func() error { return t.newOrder(ctx, in) }
			rep.OrderLines += len(in.lines)
			rep.RemoteOrderLines += in.remote
		case Payment:
			in := t.paymentInput()
			run = func() error { return t.payment(ctx, in) }
			rep.Payments++
			if in.cw != in.w {
				rep.RemotePayments++
			}
		case OrderStatus:
			run = func() error { return t.orderStatus(ctx) }
		case Delivery:
			run = func() error { return t.delivery(ctx) }
		case StockLevel:
			run = func() error { return t.stockLevel(ctx) }
		}
		s := rep.Stats[k]
		begin := time.Now()
		for attempt := 1; ; attempt++ {
			err := run()
			if ctx.Err() != nil {
				return
			}
			var pe *pgconn.PgError
			switch {
			case err == nil:
				s.Committed++
				s.Latencies = append(s.Latencies, time.Since(begin))
			case errors.Is(err, errRollback):
				s.RolledBack++
				s.Latencies = append(s.Latencies, time.Since(begin))
			case retryable(err) && errors.As(err, &pe):
				s.Aborts[pe.Code]++
				if attempt < cfg.MaxRetries {
					continue
				}
				s.GaveUp++
			default:
				s.Failed++
				rep.Errors = append(rep.Errors, fmt.Sprintf("%s: %v", k, err))
				if t.conn.IsClosed() {
					return
				}
			}
			break
		}
		if cfg.KeyingThink && !sleep(stop, time.Duration(-float64(thinking[k])*logUniform(t.r))) {
			return
		}
	}
}

// logUniform is ln(U) for U uniform in (0, 1], clause 5.2.5.4's think
// time distribution (capped at 10 means).
func logUniform(r *rand.Rand) float64 {
	u := 1 - r.Float64()
	return max(logf(u), -10)
}

func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

func logf(x float64) float64 { return math.Log(x) }
