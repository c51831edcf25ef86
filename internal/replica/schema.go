package replica

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-db/ordo/internal/schemacheck"
	ordov1 "github.com/ordo-db/ordo/pkg/api/ordo/v1"
)

// Schema consistency: right after a node carries out a transaction with
// DDL, or a SchemaCheckEntry, it fingerprints its schema and proposes the
// fingerprint (a SchemaEntry naming that seqno). Every node compares the
// fingerprints of the others with its own at the same seqno: at the same
// position of the order, schemas must be identical. A mismatch is logged
// with the objects that differ and counted; it does not stop the node (a
// schema difference is reported, an apply that fails stops the node).
//
// A fingerprint is taken off the delivery loop, on a connection of its own
// (it took 10–70 ms on a busy machine, and every commit of the node after
// the DDL waited for it, the DDL's own client too). It still describes the
// schema at exactly its seqno: only DDL changes what it reads, and the loop
// waits for the fingerprint in flight (awaitFingerprint) before it carries
// out a transaction with DDL or takes another fingerprint; another node's
// fingerprint at the same seqno is compared when it is done.

// keptSchemas bounds the fingerprints a node keeps for comparison.
const keptSchemas = 32

// SchemaStatus is the outcome of the latest schema comparisons.
type SchemaStatus struct {
	// AtSeqno is the position of this node's latest fingerprint, Hash its
	// hash.
	AtSeqno uint64 `json:"at_seqno"`
	Hash    string `json:"hash"`
	// Peers holds, per other node, its latest compared fingerprint.
	Peers map[uint32]PeerSchema `json:"peers"`
}

// PeerSchema is the comparison with one other node.
type PeerSchema struct {
	AtSeqno     uint64   `json:"at_seqno"`
	Consistent  bool     `json:"consistent"`
	Differences []string `json:"differences,omitempty"`
}

type schemaState struct {
	mu     sync.Mutex
	own    map[uint64]schemacheck.Snapshot
	status SchemaStatus

	// inflight is the seqno of the fingerprint in flight (0: none), and
	// deferred the other nodes' fingerprints at that seqno, compared once
	// it is done (the loop does not wait for it to compare).
	inflight uint64
	deferred []*ordov1.SchemaEntry

	// Owned by the delivery loop: the fingerprint in flight (closed when
	// it is done) and the connection fingerprints are taken on (used by
	// the one in flight only).
	running chan struct{}
	conn    *pgx.Conn
}

// Schema returns the latest schema comparisons.
func (r *Replica) Schema() SchemaStatus {
	r.schema.mu.Lock()
	defer r.schema.mu.Unlock()
	st := r.schema.status
	st.Peers = make(map[uint32]PeerSchema, len(r.schema.status.Peers))
	for k, v := range r.schema.status.Peers {
		st.Peers[k] = v
	}
	return st
}

// RequestSchemaCheck proposes a SchemaCheckEntry: every node will
// fingerprint its schema at its position and compare. It returns the seqno.
func (r *Replica) RequestSchemaCheck(ctx context.Context) (uint64, error) {
	payload, err := encodeEntry(&ordov1.Entry{Kind: &ordov1.Entry_SchemaCheck{SchemaCheck: &ordov1.SchemaCheckEntry{RequestedBy: r.cfg.NodeID}}})
	if err != nil {
		return 0, err
	}
	return r.cfg.Order.Propose(ctx, payload)
}

// fingerprintLimit bounds a fingerprint, and fingerprintLockTimeout each
// of its waits for a lock taken after it started (schemacheck.Fingerprint
// then tries again, and reports the locked object Unreadable): a prepared
// transaction holds its locks until the loop, which may be waiting for
// this fingerprint, decides it.
const (
	fingerprintLimit       = 30 * time.Second
	fingerprintLockTimeout = "10ms"
)

// fingerprint is called on the delivery loop right after the entry at
// seqno was carried out: it starts recording this node's schema at seqno
// and proposing it, in the background, once the fingerprint in flight is
// done.
func (r *Replica) fingerprint(ctx context.Context, seqno uint64) {
	r.awaitFingerprint()
	done := make(chan struct{})
	r.schema.running = done
	r.schema.mu.Lock()
	r.schema.inflight = seqno
	r.schema.mu.Unlock()
	r.bg.Add(1)
	go func() {
		defer r.bg.Done()
		defer close(done)
		r.takeFingerprint(ctx, seqno)
		r.schema.mu.Lock()
		deferred := r.schema.deferred
		r.schema.inflight, r.schema.deferred = 0, nil
		r.schema.mu.Unlock()
		for _, e := range deferred {
			r.compareSchema(e)
		}
	}()
}

// deliverSchema compares another node's fingerprint with this node's,
// once this node's at the same seqno is done.
func (r *Replica) deliverSchema(e *ordov1.SchemaEntry) {
	r.schema.mu.Lock()
	if e.AtSeqno == r.schema.inflight {
		r.schema.deferred = append(r.schema.deferred, e)
		r.schema.mu.Unlock()
		return
	}
	r.schema.mu.Unlock()
	r.compareSchema(e)
}

// awaitFingerprint waits until the fingerprint in flight, if any, is done.
// Only the delivery loop calls it.
func (r *Replica) awaitFingerprint() {
	if r.schema.running != nil {
		<-r.schema.running
		r.schema.running = nil
	}
}

// closeFingerprints waits for the fingerprint in flight and closes the
// connection fingerprints are taken on (the loop's end).
func (r *Replica) closeFingerprints() {
	r.awaitFingerprint()
	if r.schema.conn != nil {
		r.schema.conn.Close(context.Background())
		r.schema.conn = nil
	}
}

// takeFingerprint records this node's schema at seqno and proposes it.
func (r *Replica) takeFingerprint(ctx context.Context, seqno uint64) {
	fctx, cancel := context.WithTimeout(ctx, fingerprintLimit)
	defer cancel()
	if r.schema.conn == nil || r.schema.conn.IsClosed() {
		conn, err := pgx.Connect(fctx, r.cfg.DSN)
		if err != nil {
			r.log.Warn("schema fingerprint: connect", "seqno", seqno, "err", err)
			return
		}
		if _, err := conn.Exec(fctx, "SET lock_timeout = '"+fingerprintLockTimeout+"'"); err != nil {
			conn.Close(context.Background())
			r.log.Warn("schema fingerprint: connect", "seqno", seqno, "err", err)
			return
		}
		r.schema.conn = conn
	}
	snap, err := schemacheck.Fingerprint(fctx, r.schema.conn)
	if err != nil {
		r.log.Warn("schema fingerprint", "seqno", seqno, "err", err)
		return
	}
	r.schema.mu.Lock()
	r.schema.own[seqno] = snap
	if len(r.schema.own) > keptSchemas {
		var oldest uint64
		for s := range r.schema.own {
			if oldest == 0 || s < oldest {
				oldest = s
			}
		}
		delete(r.schema.own, oldest)
	}
	r.schema.status.AtSeqno, r.schema.status.Hash = seqno, snap.Hash
	r.schema.mu.Unlock()

	e := &ordov1.SchemaEntry{AtSeqno: seqno, Node: r.cfg.NodeID, Hash: snap.Hash}
	names := make([]string, 0, len(snap.Objects))
	for n := range snap.Objects {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		e.Objects = append(e.Objects, &ordov1.SchemaObject{Name: n, Hash: snap.Objects[n]})
	}
	payload, err := encodeEntry(&ordov1.Entry{Kind: &ordov1.Entry_Schema{Schema: e}})
	if err != nil {
		r.log.Warn("schema fingerprint", "err", err)
		return
	}
	r.proposeInBackground(payload, 10, "a schema fingerprint", func(err error) {
		r.log.Warn("schema fingerprint not sent; not compared", "seqno", seqno, "objects", len(e.Objects), "err", err)
	})
}

// compareSchema compares another node's fingerprint with this node's at
// the same seqno (if this node has it: not after a restart).
func (r *Replica) compareSchema(e *ordov1.SchemaEntry) {
	r.schema.mu.Lock()
	defer r.schema.mu.Unlock()
	own, ok := r.schema.own[e.AtSeqno]
	if !ok {
		r.m.schemaCompared.WithLabelValues("unavailable").Inc()
		return
	}
	peer := PeerSchema{AtSeqno: e.AtSeqno, Consistent: true}
	if own.Hash != e.Hash {
		// Different, or objects one of the two could not read (a
		// transaction not yet decided was changing them).
		objs := make(map[string]string, len(e.Objects))
		for _, o := range e.Objects {
			objs[o.Name] = o.Hash
		}
		for _, d := range schemacheck.Diff(own, schemacheck.New(objs)) {
			peer.Differences = append(peer.Differences, d.String())
		}
		peer.Consistent = len(peer.Differences) == 0
	}
	if peer.Consistent {
		r.m.schemaCompared.WithLabelValues("consistent").Inc()
	} else {
		r.m.schemaCompared.WithLabelValues("different").Inc()
		r.m.schemaMismatches.Inc()
		shown := peer.Differences
		if len(shown) > 20 {
			shown = append(shown[:20:20], fmt.Sprintf("… %d more", len(peer.Differences)-20))
		}
		r.log.Error("schema differs from another node's at the same position of the order",
			"seqno", e.AtSeqno, "node", e.Node, "differences", shown)
	}
	if r.schema.status.Peers == nil {
		r.schema.status.Peers = make(map[uint32]PeerSchema)
	}
	r.schema.status.Peers[e.Node] = peer
	consistent := 1.0
	for _, p := range r.schema.status.Peers {
		if !p.Consistent {
			consistent = 0
		}
	}
	r.m.schemaConsistent.Set(consistent)
}
