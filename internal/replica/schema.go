package replica

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

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

// fingerprint runs on the delivery loop right after the entry at seqno was
// carried out: it records this node's schema at seqno and proposes it.
func (r *Replica) fingerprint(ctx context.Context, seqno uint64) {
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	snap, err := schemacheck.Fingerprint(fctx, r.conn)
	cancel()
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
	r.proposeInBackground(payload, 10, func(err error) {
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
		return
	}
	peer := PeerSchema{AtSeqno: e.AtSeqno, Consistent: own.Hash == e.Hash}
	if !peer.Consistent {
		objs := make(map[string]string, len(e.Objects))
		for _, o := range e.Objects {
			objs[o.Name] = o.Hash
		}
		for _, d := range schemacheck.Diff(own, schemacheck.New(objs)) {
			peer.Differences = append(peer.Differences, d.String())
		}
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
