package replica

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	ordov1 "github.com/ordo-db/ordo/pkg/api/ordo/v1"
)

// Data consistency: a DataCheckEntry asks every node to checksum its
// replicated tables at that position of the order, where they must be
// identical. The delivery loop, on reaching it, opens a REPEATABLE READ
// snapshot before carrying out anything after it (the consistent snapshot
// at a seqno that a state transfer needs too); a background goroutine then
// sums every table in that snapshot, per bucket of primary-key hashes, and
// proposes the sums (a DataEntry). Every node compares the others' sums
// with its own: a difference names the table and the keys of the bucket.
// Like a schema difference it is reported, logged and counted, and does
// not stop the node.

// DefaultDataBuckets is how many key buckets a table is split into.
const DefaultDataBuckets = 16

// keptData bounds the checks a node keeps for comparison.
const keptData = 8

// DataStatus is the outcome of the latest data comparisons.
type DataStatus struct {
	// AtSeqno is the position of this node's latest checksums, Tables
	// how many tables they cover, Error why it could not sum them.
	AtSeqno uint64 `json:"at_seqno"`
	Tables  int    `json:"tables"`
	Error   string `json:"error,omitempty"`
	// Peers holds, per other node, its latest comparison.
	Peers map[uint32]PeerData `json:"peers"`
}

// PeerData is the comparison with one other node.
type PeerData struct {
	AtSeqno     uint64   `json:"at_seqno"`
	Consistent  bool     `json:"consistent"`
	Differences []string `json:"differences,omitempty"`
}

type dataState struct {
	mu     sync.Mutex
	own    map[uint64]*ordov1.DataEntry
	peers  map[uint64][]*ordov1.DataEntry // received before this node's own sums
	status DataStatus
}

// Data returns the latest data comparisons.
func (r *Replica) Data() DataStatus {
	r.data.mu.Lock()
	defer r.data.mu.Unlock()
	st := r.data.status
	st.Peers = make(map[uint32]PeerData, len(r.data.status.Peers))
	for k, v := range r.data.status.Peers {
		st.Peers[k] = v
	}
	return st
}

// RequestDataCheck proposes a DataCheckEntry: every node checksums its
// data at that position and compares. It returns the seqno.
func (r *Replica) RequestDataCheck(ctx context.Context) (uint64, error) {
	payload, err := encodeEntry(&ordov1.Entry{Kind: &ordov1.Entry_DataCheck{DataCheck: &ordov1.DataCheckEntry{RequestedBy: r.cfg.NodeID, Buckets: DefaultDataBuckets}}})
	if err != nil {
		return 0, err
	}
	return r.cfg.Order.Propose(ctx, payload)
}

// LastDataCheck is when this node was last delivered a data check request
// (or, before any, when it started): the leader schedules the next one
// from it (config data_check_interval).
func (r *Replica) LastDataCheck() time.Time {
	return time.Unix(0, r.lastDataCheck.Load())
}

// dataSnapshot runs on the delivery loop at the DataCheckEntry at seqno:
// it takes the snapshot, and sums and proposes in the background.
func (r *Replica) dataSnapshot(ctx context.Context, seqno uint64, buckets uint32) {
	if buckets == 0 || buckets > 1024 {
		buckets = DefaultDataBuckets
	}
	conn, err := r.snapshotAt(ctx)
	if err != nil {
		r.log.Warn("data check: snapshot", "seqno", seqno, "err", err)
		r.proposeData(&ordov1.DataEntry{AtSeqno: seqno, Node: r.cfg.NodeID, Error: err.Error()})
		return
	}
	r.bg.Add(1)
	go func() {
		defer r.bg.Done()
		defer conn.Close(context.Background())
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		began := time.Now()
		e := &ordov1.DataEntry{AtSeqno: seqno, Node: r.cfg.NodeID}
		if e.Tables, err = sumTables(sctx, conn, buckets); err != nil {
			e.Tables, e.Error = nil, err.Error()
			r.log.Warn("data check: checksums", "seqno", seqno, "err", err)
		} else {
			r.log.Info("data check: checksums taken", "seqno", seqno, "tables", len(e.Tables), "took", time.Since(began).Round(time.Millisecond))
		}
		r.ownData(e)
		r.proposeData(e)
	}()
}

// snapshotAt opens a connection whose REPEATABLE READ snapshot holds
// exactly what the loop has carried out so far.
func (r *Replica) snapshotAt(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.Connect(ctx, r.cfg.DSN)
	if err != nil {
		return nil, err
	}
	// The canonical text of every value, whatever the server's defaults.
	if _, err := conn.Exec(ctx, "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY; "+
		"SET LOCAL DateStyle = 'ISO, MDY'; SET LOCAL IntervalStyle = postgres; SET LOCAL TimeZone = 'UTC'; "+
		"SET LOCAL extra_float_digits = 3; SET LOCAL bytea_output = hex; SELECT 1"); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	return conn, nil
}

// sumTables sums every replicated table in conn's snapshot.
func sumTables(ctx context.Context, conn *pgx.Conn, buckets uint32) ([]*ordov1.TableSum, error) {
	rows, err := conn.Query(ctx, `SELECT n.nspname, c.relname,
			coalesce((SELECT array_agg(a.attname ORDER BY k.i)
				FROM pg_index x CROSS JOIN LATERAL unnest(x.indkey) WITH ORDINALITY k(attnum, i)
				JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.attnum
				WHERE x.indrelid = c.oid AND x.indisprimary), '{}')
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind = 'r' AND c.relpersistence = 'p'
		  AND n.nspname NOT IN ('pg_catalog', 'information_schema', '_ordo') AND n.nspname NOT LIKE 'pg\_%'
		ORDER BY 1, 2`)
	if err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	type table struct {
		schema, name string
		key          []string
		from         string // in place of the table: a query
	}
	var tables []table
	for rows.Next() {
		var t table
		if err := rows.Scan(&t.schema, &t.name, &t.key); err != nil {
			return nil, err
		}
		tables = append(tables, t)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	// Large objects live in system catalogs; each node holds them as the
	// transactions that changed them left them (privileges compared as
	// what they grant: the default and its explicit form are equal;
	// content as its size and the pages that hold data, so that objects
	// of more than 1 GB are read a page at a time).
	tables = append(tables, table{schema: "pg_catalog", name: "pg_largeobject", key: []string{"oid"},
		from: `(SELECT m.oid, pg_get_userbyid(m.lomowner) AS owner, coalesce(m.lomacl, acldefault('L', m.lomowner)) AS acl,
			obj_description(m.oid, 'pg_largeobject') AS comment,
			(SELECT l.pageno::bigint * (current_setting('block_size')::int / 4) + length(l.data) FROM pg_largeobject l
				WHERE l.loid = m.oid ORDER BY l.pageno DESC LIMIT 1) AS size,
			(SELECT md5(string_agg(l.pageno || ':' || md5(l.data), ',' ORDER BY l.pageno)) FROM pg_largeobject l
				WHERE l.loid = m.oid AND length(l.data) > 0) AS data
			FROM pg_largeobject_metadata m)`})
	var out []*ordov1.TableSum
	for _, t := range tables {
		key := "t" // no primary key: the whole row
		if len(t.key) > 0 {
			cols := make([]string, len(t.key))
			for i, c := range t.key {
				cols[i] = "t." + pgx.Identifier{c}.Sanitize()
			}
			key = "ROW(" + strings.Join(cols, ", ") + ")"
		}
		from := pgx.Identifier{t.schema, t.name}.Sanitize()
		if t.from != "" {
			from = t.from
		}
		q := fmt.Sprintf(`SELECT b, count(*), sum(h)::text, min(k), max(k) FROM (
			SELECT abs(hashtext(%[1]s::text)) %% %[2]d AS b,
			       ('x' || substr(md5(t::text), 1, 15))::bit(60)::bigint::numeric AS h,
			       left(%[1]s::text, 64) AS k
			FROM %[3]s t) s GROUP BY b ORDER BY b`, key, buckets, from)
		brows, err := conn.Query(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("sum %s.%s: %w", t.schema, t.name, err)
		}
		ts := &ordov1.TableSum{Name: t.schema + "." + t.name}
		for brows.Next() {
			var b int32
			var n int64
			bs := &ordov1.BucketSum{}
			if err := brows.Scan(&b, &n, &bs.Sum, &bs.MinKey, &bs.MaxKey); err != nil {
				brows.Close()
				return nil, fmt.Errorf("sum %s: %w", ts.Name, err)
			}
			bs.Bucket, bs.Rows = uint32(b), uint64(n)
			ts.Buckets = append(ts.Buckets, bs)
		}
		if err := brows.Err(); err != nil {
			return nil, fmt.Errorf("sum %s: %w", ts.Name, err)
		}
		out = append(out, ts)
	}
	return out, nil
}

// proposeData proposes this node's sums, retrying a while.
func (r *Replica) proposeData(e *ordov1.DataEntry) {
	payload, err := encodeEntry(&ordov1.Entry{Kind: &ordov1.Entry_Data{Data: e}})
	if err != nil {
		r.log.Warn("data check", "err", err)
		return
	}
	r.proposeInBackground(payload, 10, "data check checksums", func(err error) {
		r.log.Warn("data check: checksums not sent; not compared", "seqno", e.AtSeqno, "tables", len(e.Tables), "err", err)
	})
}

// ownData records this node's sums and compares the peers' that came
// first.
func (r *Replica) ownData(e *ordov1.DataEntry) {
	r.data.mu.Lock()
	defer r.data.mu.Unlock()
	if r.data.own == nil {
		r.data.own = map[uint64]*ordov1.DataEntry{}
	}
	r.data.own[e.AtSeqno] = e
	for len(r.data.own) > keptData {
		oldest := e.AtSeqno
		for s := range r.data.own {
			oldest = min(oldest, s)
		}
		delete(r.data.own, oldest)
		delete(r.data.peers, oldest)
	}
	r.data.status.AtSeqno, r.data.status.Tables, r.data.status.Error = e.AtSeqno, len(e.Tables), e.Error
	for _, p := range r.data.peers[e.AtSeqno] {
		r.compareDataLocked(e, p)
	}
	delete(r.data.peers, e.AtSeqno)
}

// compareData compares another node's sums with this node's at the same
// seqno, now or once this node has its own.
func (r *Replica) compareData(p *ordov1.DataEntry) {
	r.data.mu.Lock()
	defer r.data.mu.Unlock()
	if own, ok := r.data.own[p.AtSeqno]; ok {
		r.compareDataLocked(own, p)
		return
	}
	if r.data.peers == nil {
		r.data.peers = map[uint64][]*ordov1.DataEntry{}
	}
	if len(r.data.peers) < keptData {
		r.data.peers[p.AtSeqno] = append(r.data.peers[p.AtSeqno], p)
	}
}

func (r *Replica) compareDataLocked(own, p *ordov1.DataEntry) {
	peer := PeerData{AtSeqno: p.AtSeqno, Differences: dataDiff(own, p)}
	peer.Consistent = len(peer.Differences) == 0
	if !peer.Consistent {
		r.m.dataMismatches.Inc()
		shown := peer.Differences
		if len(shown) > 20 {
			shown = append(shown[:20:20], fmt.Sprintf("… %d more", len(peer.Differences)-20))
		}
		r.log.Error("data differs from another node's at the same position of the order",
			"seqno", p.AtSeqno, "node", p.Node, "differences", shown)
	}
	if r.data.status.Peers == nil {
		r.data.status.Peers = map[uint32]PeerData{}
	}
	r.data.status.Peers[p.Node] = peer
	consistent := 1.0
	for _, q := range r.data.status.Peers {
		if !q.Consistent {
			consistent = 0
		}
	}
	r.m.dataConsistent.Set(consistent)
}

// dataDiff describes how p's sums differ from own's.
func dataDiff(own, p *ordov1.DataEntry) []string {
	switch {
	case own.Error != "":
		return []string{"this node could not checksum its data: " + own.Error}
	case p.Error != "":
		return []string{fmt.Sprintf("node %d could not checksum its data: %s", p.Node, p.Error)}
	}
	mine := map[string]*ordov1.TableSum{}
	for _, t := range own.Tables {
		mine[t.Name] = t
	}
	theirs := map[string]*ordov1.TableSum{}
	for _, t := range p.Tables {
		theirs[t.Name] = t
	}
	var out []string
	for name, t := range mine {
		o, ok := theirs[name]
		if !ok {
			out = append(out, fmt.Sprintf("table %s: missing on node %d", name, p.Node))
			continue
		}
		out = append(out, bucketDiff(name, t, o, p.Node)...)
	}
	for name := range theirs {
		if _, ok := mine[name]; !ok {
			out = append(out, fmt.Sprintf("table %s: only on node %d", name, p.Node))
		}
	}
	sort.Strings(out)
	return out
}

func bucketDiff(name string, mine, theirs *ordov1.TableSum, node uint32) []string {
	index := func(t *ordov1.TableSum) map[uint32]*ordov1.BucketSum {
		m := map[uint32]*ordov1.BucketSum{}
		for _, b := range t.Buckets {
			m[b.Bucket] = b
		}
		return m
	}
	a, b := index(mine), index(theirs)
	seen := map[uint32]bool{}
	var out []string
	for _, m := range []map[uint32]*ordov1.BucketSum{a, b} {
		for n := range m {
			if seen[n] {
				continue
			}
			seen[n] = true
			x, y := a[n], b[n]
			if x != nil && y != nil && x.Rows == y.Rows && x.Sum == y.Sum {
				continue
			}
			desc := func(s *ordov1.BucketSum) string {
				if s == nil {
					return "no rows"
				}
				return fmt.Sprintf("%d rows, keys %s..%s", s.Rows, s.MinKey, s.MaxKey)
			}
			out = append(out, fmt.Sprintf("table %s, key bucket %d: here %s; node %d %s", name, n, desc(x), node, desc(y)))
		}
	}
	return out
}

// TxnStatus answers, once this node has caught up with the cluster (a
// sync read), what became of the transaction labelled label: "committed",
// "aborted" or "unknown" (_ordo.txn_status; docs/outcomes.md).
func (r *Replica) TxnStatus(ctx context.Context, label string) (string, error) {
	if err := r.SyncRead(ctx); err != nil {
		return "", fmt.Errorf("replica: catch up with the cluster: %w", err)
	}
	conn, err := pgx.Connect(ctx, r.cfg.DSN)
	if err != nil {
		return "", fmt.Errorf("replica: %w", err)
	}
	defer conn.Close(context.Background())
	var st string
	if err := conn.QueryRow(ctx, "SELECT _ordo.txn_status($1)", label).Scan(&st); err != nil {
		return "", fmt.Errorf("replica: %w", err)
	}
	return st, nil
}
