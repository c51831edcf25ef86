package safety

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync/atomic"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-db/ordo/test/safety/checker"
	"github.com/ordo-db/ordo/test/safety/history"
)

// longFork is Jepsen's long-fork workload: registers (rows of table lf)
// each written once, by an autocommit INSERT of a fresh key, and reads of
// a group of lfGroup consecutive registers in one autocommit SELECT,
// mostly of the group being written, so that reads on every node race
// with writes through every node.
//
// Checked (checker.CheckLongFork): the registers the committed reads of
// one group saw are nested sets. A read that saw register x but not y and
// another that saw y but not x observed the two writes in opposite
// orders: a long fork, which serializability and snapshot isolation both
// forbid. Every protocol forbids it: every local snapshot is a prefix of
// the total order (protocols.md), and under dbsm-rc each read is one
// statement, so one snapshot. No read sees a failed write or a value
// nobody wrote; the final read through every node holds every
// acknowledged write and no failed one. The workload must never write a
// register twice, nor read registers in more than one statement.
type longFork struct {
	next atomic.Int64 // the next register to write
}

// lfGroup is the number of registers a read reads.
const lfGroup = 4

func (l *longFork) name() string { return "longfork" }

func (l *longFork) setup(ctx context.Context, conn *pgx.Conn) error {
	_, err := conn.Exec(ctx, "CREATE TABLE lf (k int PRIMARY KEY, v int NOT NULL)")
	return err
}

func (l *longFork) digest() string {
	return "SELECT coalesce(md5(string_agg(k || ':' || v, ',' ORDER BY k)), '') FROM lf"
}

// lfValue is the value written to register k.
func lfValue(k int) int { return 3*k + 1 }

type lfWrite struct {
	K int `json:"k"`
	V int `json:"v"`
}

type lfRead struct {
	Keys []int       `json:"keys"`
	Seen map[int]int `json:"seen"`
}

// autocommitQuery runs one autocommit statement that returns rows as one
// operation (client.exec's counterpart for reads); scan's result is the
// completion's value.
func autocommitQuery(c *client, f string, arg any, scan func(ctx context.Context, conn *pgx.Conn) (any, error)) string {
	c.rec.Record(history.Invoke, c.process, c.node+1, f, arg, "")
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if err := c.connect(ctx); err != nil {
		c.rec.Record(history.Fail, c.process, c.node+1, f, arg, errText(err))
		return history.Fail
	}
	v, err := scan(ctx, c.conn)
	if err != nil {
		typ := history.Info
		if definitelyAborted(err) || sqlstate(err) != "" {
			typ = history.Fail // a read: nothing of it is replicated
		}
		if sqlstate(err) == "" || c.conn.IsClosed() {
			c.close()
		}
		c.rec.Record(typ, c.process, c.node+1, f, arg, errText(err))
		return typ
	}
	c.rec.Record(history.OK, c.process, c.node+1, f, v, "")
	return history.OK
}

// readRegisters reads registers lo ≤ k < hi in one statement (hi < 0: all).
func readRegisters(ctx context.Context, conn *pgx.Conn, lo, hi int) (map[int]int, error) {
	sql, args := "SELECT k, v FROM lf WHERE k >= $1 AND k < $2", []any{lo, hi}
	if hi < 0 {
		sql, args = "SELECT k, v FROM lf", nil
	}
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	seen := map[int]int{}
	for rows.Next() {
		var k, v int
		if err := rows.Scan(&k, &v); err != nil {
			rows.Close()
			return nil, err
		}
		seen[k] = v
	}
	return seen, rows.Err()
}

func (l *longFork) run(r *run, stop <-chan struct{}) {
	r.loop("longfork", r.cfg.Clients, stop, func(c *client, rng *rand.Rand) {
		if rng.IntN(5) < 2 {
			k := int(l.next.Add(1) - 1)
			w := lfWrite{K: k, V: lfValue(k)}
			c.exec("write", w, "INSERT INTO lf (k, v) VALUES ($1, $2)", w.K, w.V)
			return
		}
		// The group of the last register written, sometimes the one before.
		g := max(0, int(l.next.Load()-1)/lfGroup-rng.IntN(2))
		rd := lfRead{}
		for k := g * lfGroup; k < (g+1)*lfGroup; k++ {
			rd.Keys = append(rd.Keys, k)
		}
		autocommitQuery(c, "read", rd, func(ctx context.Context, conn *pgx.Conn) (any, error) {
			seen, err := readRegisters(ctx, conn, g*lfGroup, (g+1)*lfGroup)
			return lfRead{Keys: rd.Keys, Seen: seen}, err
		})
	})
}

func (l *longFork) final(r *run) []string {
	var problems []string
	for i := 0; i < r.cluster.N(); i++ {
		c := r.newClient("longfork-final", i)
		typ := autocommitQuery(c, "read-all", nil, func(ctx context.Context, conn *pgx.Conn) (any, error) {
			return readRegisters(ctx, conn, 0, -1)
		})
		c.close()
		if typ != history.OK {
			problems = append(problems, fmt.Sprintf("longfork: final read through node %d: %s", i+1, typ))
		}
	}
	return problems
}

func (l *longFork) check(r *run, events []history.Event) ([]checker.Anomaly, string) {
	var writes []checker.RegisterWrite
	var reads []checker.RegisterRead
	final := map[int]map[int]int{}
	for _, op := range history.Pair(events) {
		owner := r.owner[op.Process]
		if owner != "longfork" && owner != "longfork-final" {
			continue
		}
		bad := func(err error) ([]checker.Anomaly, string) {
			return []checker.Anomaly{{Kind: "history", Text: err.Error()}}, ""
		}
		switch {
		case op.F == "write":
			var w lfWrite
			if err := json.Unmarshal(op.Value, &w); err != nil {
				return bad(err)
			}
			writes = append(writes, checker.RegisterWrite{ID: op.Index, Status: resolvedType(op), K: w.K, V: w.V})
		case op.F == "read" && op.Type == history.OK:
			var rd lfRead
			if err := json.Unmarshal(op.Value, &rd); err != nil {
				return bad(err)
			}
			reads = append(reads, checker.RegisterRead{ID: op.Index, Node: op.Node, Keys: rd.Keys, Seen: rd.Seen})
		case op.F == "read-all" && op.Type == history.OK:
			var m map[int]int
			if err := json.Unmarshal(op.Value, &m); err != nil {
				return bad(err)
			}
			final[op.Node] = m
		}
	}
	res := checker.CheckLongFork(writes, reads, final)
	counts := map[string]int{}
	for _, w := range writes {
		counts[w.Status]++
	}
	summary := fmt.Sprintf("longfork: %d writes (%d ok, %d failed, %d indeterminate), %d committed reads of %d groups of %d registers, %d incompatible pairs; final reads through %d nodes; %d anomalies",
		len(writes), counts[history.OK], counts[history.Fail], counts[history.Info], res.Reads, res.Groups, lfGroup, res.Forks, len(final), len(res.Anomalies))
	for _, a := range res.Anomalies {
		summary += "\n    " + a.String()
	}
	return res.Anomalies, summary
}
