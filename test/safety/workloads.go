package safety

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-db/ordo/test/safety/checker"
	"github.com/ordo-db/ordo/test/safety/history"
)

// A workload owns its tables, its clients' operations, its final reads and
// its check.
type workload interface {
	name() string
	// setup creates its tables through one node (DDL is replicated).
	setup(ctx context.Context, conn *pgx.Conn) error
	// run drives clients until stop is closed.
	run(r *run, stop <-chan struct{})
	// digest is a query (one text value) that must answer the same on
	// every node's PostgreSQL at the end.
	digest() string
	// final reads the end state through every node (recorded in the
	// history) once the cluster has converged.
	final(r *run) []string
	// check checks the history; it returns the anomalies the protocol
	// forbids and a summary for the report.
	check(r *run, events []history.Event) (forbidden []checker.Anomaly, summary string)
}

func newWorkload(name string) (workload, error) {
	switch name {
	case "bank":
		return &bank{accounts: 8, initial: 100}, nil
	case "append":
		return &listAppend{table: "la", keys: 8}, nil
	case "wskew":
		return &listAppend{table: "ws", skew: true}, nil
	case "sets":
		return &sets{}, nil
	case "hot":
		return &hot{keys: 4}, nil
	case "counter":
		return &counter{keys: 3}, nil
	case "longfork":
		return &longFork{}, nil
	case "ddl":
		return &ddlWorkload{}, nil
	case "phantom":
		return &phantom{windows: 6, max: 2}, nil
	}
	return nil, fmt.Errorf("safety: unknown workload %q (bank, append, wskew, sets, hot, counter, longfork, ddl, phantom)", name)
}

// loop runs n clients spread over the nodes, each calling op until stop.
func (r *run) loop(w string, n int, stop <-chan struct{}, op func(c *client, rng *rand.Rand)) {
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		c := r.newClient(w, i%r.cluster.N())
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.close()
			rng := rand.New(rand.NewPCG(uint64(c.process), r.seed))
			for {
				select {
				case <-stop:
					return
				default:
				}
				op(c, rng)
				if c.conn == nil {
					// The connection broke or could not be opened: do not
					// flood the history with refused connections.
					time.Sleep(200 * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
}

// ---- bank ----

type bank struct {
	accounts int
	initial  int64
}

func (b *bank) name() string { return "bank" }

func (b *bank) setup(ctx context.Context, conn *pgx.Conn) error {
	if _, err := conn.Exec(ctx, "CREATE TABLE bank (id int PRIMARY KEY, balance bigint NOT NULL)"); err != nil {
		return err
	}
	_, err := conn.Exec(ctx, "INSERT INTO bank SELECT g, $1 FROM generate_series(0, $2 - 1) g", b.initial, b.accounts)
	return err
}

func (b *bank) digest() string {
	return "SELECT coalesce(string_agg(id || ':' || balance, ',' ORDER BY id), '') FROM bank"
}

type transfer struct {
	From   int   `json:"from"`
	To     int   `json:"to"`
	Amount int64 `json:"amount"`
}

func readBalances(ctx context.Context, tx pgx.Tx) (map[int]int64, error) {
	return readNumbers(ctx, tx, "SELECT id, balance FROM bank")
}

// readNumbers reads a query's rows of a key and a number into a map
// (balances, counters).
func readNumbers(ctx context.Context, tx pgx.Tx, sql string) (map[int]int64, error) {
	rows, err := tx.Query(ctx, sql)
	if err != nil {
		return nil, err
	}
	m := map[int]int64{}
	for rows.Next() {
		var k int
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			rows.Close()
			return nil, err
		}
		m[k] = n
	}
	return m, rows.Err()
}

// createCounters creates table (k, n) with keys counters at 0 (hot,
// counter).
func createCounters(ctx context.Context, conn *pgx.Conn, table string, keys int) error {
	if _, err := conn.Exec(ctx, fmt.Sprintf("CREATE TABLE %s (k int PRIMARY KEY, n bigint NOT NULL)", table)); err != nil {
		return err
	}
	_, err := conn.Exec(ctx, fmt.Sprintf("INSERT INTO %s SELECT g, 0 FROM generate_series(0, $1 - 1) g", table), keys)
	return err
}

func (b *bank) run(r *run, stop <-chan struct{}) {
	r.loop("bank", r.cfg.Clients, stop, func(c *client, rng *rand.Rand) {
		if rng.IntN(2) == 0 {
			c.txn("bank-read", nil, func(ctx context.Context, tx pgx.Tx) (any, error) {
				m, err := readBalances(ctx, tx)
				return m, err
			})
			return
		}
		t := transfer{From: rng.IntN(b.accounts), Amount: 1 + rng.Int64N(5)}
		t.To = (t.From + 1 + rng.IntN(b.accounts-1)) % b.accounts
		c.txn("bank-transfer", t, func(ctx context.Context, tx pgx.Tx) (any, error) {
			var from, to int64
			if err := tx.QueryRow(ctx, "SELECT balance FROM bank WHERE id = $1", t.From).Scan(&from); err != nil {
				return nil, err
			}
			if err := tx.QueryRow(ctx, "SELECT balance FROM bank WHERE id = $1", t.To).Scan(&to); err != nil {
				return nil, err
			}
			if _, err := tx.Exec(ctx, "UPDATE bank SET balance = $2 WHERE id = $1", t.From, from-t.Amount); err != nil {
				return nil, err
			}
			_, err := tx.Exec(ctx, "UPDATE bank SET balance = $2 WHERE id = $1", t.To, to+t.Amount)
			return nil, err
		})
	})
}

func (b *bank) final(r *run) []string {
	const owner = "bank"
	var problems []string
	for i := 0; i < r.cluster.N(); i++ {
		c := r.newClient(owner, i)
		typ, v := c.txn("bank-read", nil, func(ctx context.Context, tx pgx.Tx) (any, error) {
			return readBalances(ctx, tx)
		})
		c.close()
		if typ != history.OK {
			problems = append(problems, fmt.Sprintf("bank: final read through node %d: %s", i+1, typ))
			continue
		}
		var sum int64
		for _, bal := range v.(map[int]int64) {
			sum += bal
		}
		if sum != int64(b.accounts)*b.initial {
			problems = append(problems, fmt.Sprintf("bank: final balances on node %d sum to %d, want %d: %v", i+1, sum, int64(b.accounts)*b.initial, v))
		}
	}
	return problems
}

func (b *bank) check(r *run, events []history.Event) ([]checker.Anomaly, string) {
	var reads []checker.BankRead
	for _, op := range history.Pair(events) {
		if op.F != "bank-read" || op.Type != history.OK {
			continue
		}
		var m map[int]int64
		if err := json.Unmarshal(op.Value, &m); err != nil {
			return []checker.Anomaly{{Kind: "history", Text: err.Error()}}, ""
		}
		reads = append(reads, checker.BankRead{ID: op.Index, Node: op.Node, Balances: m})
	}
	bad := checker.CheckBank(reads, b.accounts, int64(b.accounts)*b.initial)
	return bad, fmt.Sprintf("bank: %d committed total reads checked, %d wrong", len(reads), len(bad))
}

// ---- list-append (and the write-skew control) ----

// listAppend keeps one int[] per key in table (k int PRIMARY KEY, v int[]).
// With skew set it is the write-skew control: pairs of transactions on two
// nodes each read two fresh keys, wait for each other, and append to one
// key each; under dbsm-si both may commit (G2-item), under dbsm at most one.
type listAppend struct {
	table string
	keys  int
	skew  bool
	next  atomic.Int64
	used  atomic.Int64 // keys in use (skew: grows by 2 a round)
}

func (l *listAppend) name() string {
	if l.skew {
		return "wskew"
	}
	return "append"
}

func (l *listAppend) setup(ctx context.Context, conn *pgx.Conn) error {
	if _, err := conn.Exec(ctx, fmt.Sprintf("CREATE TABLE %s (k int PRIMARY KEY, v int[] NOT NULL DEFAULT '{}')", l.table)); err != nil {
		return err
	}
	if l.skew {
		l.keys = 2 * 400 // rounds at most
	}
	_, err := conn.Exec(ctx, fmt.Sprintf("INSERT INTO %s (k) SELECT g FROM generate_series(0, $1 - 1) g", l.table), l.keys)
	return err
}

func (l *listAppend) digest() string {
	return fmt.Sprintf("SELECT coalesce(string_agg(k || ':' || v::text, ',' ORDER BY k), '') FROM %s", l.table)
}

// do runs the micro-ops of one transaction and returns them with the reads filled in.
func (l *listAppend) do(ctx context.Context, tx pgx.Tx, ops []checker.MOp) ([]checker.MOp, error) {
	out := make([]checker.MOp, len(ops))
	for i, op := range ops {
		out[i] = op
		switch op.F {
		case "append":
			if _, err := tx.Exec(ctx, fmt.Sprintf("UPDATE %s SET v = array_append(v, $2) WHERE k = $1", l.table), op.K, op.V); err != nil {
				return nil, err
			}
		case "r":
			var v []int32
			if err := tx.QueryRow(ctx, fmt.Sprintf("SELECT v FROM %s WHERE k = $1", l.table), op.K).Scan(&v); err != nil {
				return nil, err
			}
			out[i].R = make([]int, len(v))
			for j, x := range v {
				out[i].R[j] = int(x)
			}
		}
	}
	return out, nil
}

func (l *listAppend) run(r *run, stop <-chan struct{}) {
	if l.skew {
		l.runSkew(r, stop)
		return
	}
	r.loop("append", r.cfg.Clients, stop, func(c *client, rng *rand.Rand) {
		n := 1 + rng.IntN(4)
		ops := make([]checker.MOp, n)
		for i := range ops {
			k := rng.IntN(l.keys)
			if rng.IntN(2) == 0 {
				ops[i] = checker.MOp{F: "append", K: k, V: int(l.next.Add(1))}
			} else {
				ops[i] = checker.MOp{F: "r", K: k}
			}
		}
		c.txn("txn", ops, func(ctx context.Context, tx pgx.Tx) (any, error) {
			return l.do(ctx, tx, ops)
		})
	})
}

// runSkew runs rounds of two transactions on nodes 1 and 2 until stop.
func (l *listAppend) runSkew(r *run, stop <-chan struct{}) {
	a, b := r.newClient(l.name(), 0), r.newClient(l.name(), 1%r.cluster.N())
	defer a.close()
	defer b.close()
	for round := 0; 2*round+1 < l.keys; round++ {
		select {
		case <-stop:
			return
		default:
		}
		k1, k2 := 2*round, 2*round+1
		l.used.Store(int64(2*round + 2))
		var barrier sync.WaitGroup
		barrier.Add(2)
		var wg sync.WaitGroup
		for i, c := range []*client{a, b} {
			target := []int{k1, k2}[i]
			ops := []checker.MOp{{F: "r", K: k1}, {F: "r", K: k2}, {F: "append", K: target, V: int(l.next.Add(1))}}
			wg.Add(1)
			go func() {
				defer wg.Done()
				arrived := false
				defer func() {
					if !arrived {
						barrier.Done()
					}
				}()
				c.txn("txn", ops, func(ctx context.Context, tx pgx.Tx) (any, error) {
					reads, err := l.do(ctx, tx, ops[:2])
					arrived = true
					barrier.Done()
					if err != nil {
						return nil, err
					}
					barrier.Wait() // both snapshots are taken before either appends
					rest, err := l.do(ctx, tx, ops[2:])
					if err != nil {
						return nil, err
					}
					return append(reads, rest...), nil
				})
			}()
		}
		wg.Wait()
	}
}

func (l *listAppend) final(r *run) []string {
	owner := l.name() + "-final" // check tells the final reads by it
	var problems []string
	keys := l.keys
	if l.skew {
		keys = int(l.used.Load())
	}
	ops := make([]checker.MOp, keys)
	for k := range ops {
		ops[k] = checker.MOp{F: "r", K: k}
	}
	for i := 0; i < r.cluster.N(); i++ {
		c := r.newClient(owner, i)
		typ, _ := c.txn("txn", ops, func(ctx context.Context, tx pgx.Tx) (any, error) {
			return l.do(ctx, tx, ops)
		})
		c.close()
		if typ != history.OK {
			problems = append(problems, fmt.Sprintf("%s: final read through node %d: %s", l.name(), i+1, typ))
		}
	}
	return problems
}

// listAppendTxns extracts the transactions of one list-append workload
// (the processes it owns) from a history.
func listAppendTxns(events []history.Event, owns func(process int) bool) ([]checker.Txn, error) {
	var txns []checker.Txn
	for _, op := range history.Pair(events) {
		if op.F != "txn" || !owns(op.Process) {
			continue
		}
		var ops []checker.MOp
		if err := json.Unmarshal(op.Value, &ops); err != nil {
			return nil, err
		}
		txns = append(txns, checker.Txn{ID: op.Index, Status: op.Type, Outcome: op.Outcome, Ops: ops, Node: op.Node})
	}
	return txns, nil
}

func (l *listAppend) check(r *run, events []history.Event) ([]checker.Anomaly, string) {
	finalOwner := l.name() + "-final"
	txns, err := listAppendTxns(events, func(p int) bool { return r.owner[p] == l.name() || r.owner[p] == finalOwner })
	if err != nil {
		return []checker.Anomaly{{Kind: "history", Text: err.Error()}}, ""
	}
	res := checker.CheckListAppend(txns)
	forbidden := res.Forbidden(r.model())
	final := map[int]bool{}
	for _, op := range history.Pair(events) {
		if r.owner[op.Process] == finalOwner {
			final[op.Index] = true
		}
	}
	lost := checker.CheckFinalReads(txns, final)
	forbidden = append(forbidden, lost...)
	res.Anomalies = append(res.Anomalies, lost...)
	counts := map[string]int{}
	for _, a := range res.Anomalies {
		counts[a.Kind]++
	}
	var kinds []string
	for k, n := range counts {
		kinds = append(kinds, fmt.Sprintf("%s×%d", k, n))
	}
	sort.Strings(kinds)
	found := "none"
	if len(kinds) > 0 {
		found = strings.Join(kinds, " ")
	}
	summary := fmt.Sprintf("%s: %d txns, %d committed in the graph (%d indeterminate resolved as committed, %d unresolved), %d edges; anomalies found: %s; forbidden under %s: %d",
		l.name(), len(txns), res.Committed, res.InfoCommitted, res.InfoUnknown, res.Edges, found, r.model(), len(forbidden))
	for i, a := range res.Anomalies {
		if i == 20 {
			summary += fmt.Sprintf("\n    … %d more", len(res.Anomalies)-20)
			break
		}
		summary += "\n    " + a.String()
	}
	if l.skew {
		// The control: the checker must see write skew under dbsm-si, and
		// nothing under dbsm (nor at SERIALIZABLE under any protocol).
		if r.model() == "dbsm-si" && counts[checker.G2Item] == 0 {
			forbidden = append(forbidden, checker.Anomaly{Kind: "control", Text: "wskew under dbsm-si: the checker found no G2-item (the control must see write skew)"})
		}
	}
	return forbidden, summary
}

// ---- sets ----

type sets struct{ next atomic.Int64 }

func (s *sets) name() string { return "sets" }

func (s *sets) setup(ctx context.Context, conn *pgx.Conn) error {
	_, err := conn.Exec(ctx, "CREATE TABLE sets (v int PRIMARY KEY)")
	return err
}

func (s *sets) digest() string {
	return "SELECT coalesce(md5(string_agg(v::text, ',' ORDER BY v)), '') FROM sets"
}

func (s *sets) run(r *run, stop <-chan struct{}) {
	r.loop("sets", r.cfg.Clients, stop, func(c *client, rng *rand.Rand) {
		v := int(s.next.Add(1))
		c.exec("add", v, "INSERT INTO sets VALUES ($1)", v)
	})
}

func (s *sets) final(r *run) []string {
	const owner = "sets"
	var problems []string
	for i := 0; i < r.cluster.N(); i++ {
		c := r.newClient(owner, i)
		typ, _ := c.txn("read", nil, func(ctx context.Context, tx pgx.Tx) (any, error) {
			rows, err := tx.Query(ctx, "SELECT v FROM sets ORDER BY v")
			if err != nil {
				return nil, err
			}
			return pgx.CollectRows(rows, pgx.RowTo[int])
		})
		c.close()
		if typ != history.OK {
			problems = append(problems, fmt.Sprintf("sets: final read through node %d: %s", i+1, typ))
		}
	}
	return problems
}

func (s *sets) check(r *run, events []history.Event) ([]checker.Anomaly, string) {
	adds := map[int]string{}
	final := map[int]map[int]bool{}
	for _, op := range history.Pair(events) {
		if r.owner[op.Process] != "sets" {
			continue
		}
		switch op.F {
		case "add":
			var v int
			if err := json.Unmarshal(op.Value, &v); err != nil {
				return []checker.Anomaly{{Kind: "history", Text: err.Error()}}, ""
			}
			adds[v] = op.Type
			if op.Type == history.Info && op.Outcome == history.Committed {
				adds[v] = history.OK // the outcome check answered: it must be there
			}
		case "read":
			if op.Type != history.OK {
				continue
			}
			var vs []int
			if err := json.Unmarshal(op.Value, &vs); err != nil {
				return []checker.Anomaly{{Kind: "history", Text: err.Error()}}, ""
			}
			final[op.Node] = map[int]bool{}
			for _, v := range vs {
				final[op.Node][v] = true
			}
		}
	}
	res := checker.CheckSets(adds, final)
	summary := fmt.Sprintf("sets: %d adds (%d ok, %d failed, %d indeterminate: %d present at the end, %d absent); final reads from %d nodes; %d anomalies",
		len(adds), res.OK, res.Failed, res.Info, res.InfoPresent, res.InfoAbsent, len(final), len(res.Anomalies))
	for _, a := range res.Anomalies {
		summary += "\n    " + a.String()
	}
	return res.Anomalies, summary
}
