package replica

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/ordo-db/ordo/internal/capture"
	"github.com/ordo-db/ordo/internal/txn"
	ordov1 "github.com/ordo-db/ordo/pkg/api/ordo/v1"
)

// fragments are the delivered fragments of one transaction too large for
// one entry, held by the delivery loop until the transaction's TxnEntry or
// an AbortEntry of its gid is delivered.
//
// Whether a TxnEntry with fragments may commit depends only on the
// delivered sequence: every fragment 0..n-1 delivered in order, the first
// no more than a certification window before the TxnEntry. A restarted
// node takes the outcomes up to its proven prefix from its proof rows
// (proofs.go); after it, it has replayed every fragment a TxnEntry that
// can still commit needs: one whose first fragment is older than where the
// replay started is more than a window old and aborts on every node.
type fragments struct {
	first  uint64   // seqno of the first fragment delivered
	broken bool     // a fragment was missing or out of order
	data   [][]byte // the fragments' entry payloads, in order
	bytes  int
	rows   int // rows in the fragments
}

// holdFragment keeps a delivered fragment (delivery loop only).
func (r *Replica) holdFragment(seqno uint64, f *ordov1.FragmentEntry, payload []byte) {
	gid := txn.GID(f.Gid)
	if _, ok := r.aborted[gid]; ok {
		return // its abort was ordered first: nothing will use it
	}
	fs := r.frags[gid]
	if fs == nil {
		fs = &fragments{first: seqno}
		r.frags[gid] = fs
	}
	if int(f.Index) != len(fs.data) {
		fs.broken = true
	}
	fs.data = append(fs.data, payload)
	fs.bytes += len(payload)
	fs.rows += len(f.Rows)
	r.fragMem += len(payload)
	r.m.fragmentBytes.Set(float64(r.fragMem))
}

// fragmentsComplete reports whether the TxnEntry of gid delivered at seqno
// has its n fragments, in order and within the certification window.
func (r *Replica) fragmentsComplete(seqno uint64, gid txn.GID, n uint32) bool {
	fs := r.frags[gid]
	return fs != nil && !fs.broken && len(fs.data) == int(n) && !r.expired(fs, seqno)
}

func (r *Replica) expired(fs *fragments, seqno uint64) bool {
	return seqno-fs.first > r.cfg.Window
}

// dropFragments forgets and returns the fragments of gid (nil if none).
func (r *Replica) dropFragments(gid txn.GID) *fragments {
	fs := r.frags[gid]
	if fs == nil {
		return nil
	}
	delete(r.frags, gid)
	r.fragMem -= fs.bytes
	r.m.fragmentBytes.Set(float64(r.fragMem))
	return fs
}

// expireFragments forgets the fragments of transactions whose TxnEntry can
// no longer commit when delivered at seqno or later: their origin gave up
// or died before proposing it.
func (r *Replica) expireFragments(seqno uint64) {
	for gid, fs := range r.frags {
		if r.expired(fs, seqno) {
			r.log.Warn("fragments of a transaction whose end was never ordered are forgotten", "gid", gid, "first_seqno", fs.first, "fragments", len(fs.data))
			r.dropFragments(gid)
		}
	}
}

// writeSet decodes the write set of e with its held fragments (nil-safe),
// one fragment at a time.
func (fs *fragments) writeSet(e *ordov1.TxnEntry) (*capture.WriteSet, error) {
	if fs == nil {
		return decodeWriteSet(e)
	}
	return decodeFragmented(e, len(fs.data), fs.rows, func(i int) (*ordov1.FragmentEntry, error) {
		var en ordov1.Entry
		if err := proto.Unmarshal(fs.data[i], &en); err != nil {
			return nil, fmt.Errorf("replica: fragment %d: %w", i, err)
		}
		f := en.GetFragment()
		if f == nil {
			return nil, fmt.Errorf("replica: fragment %d is not a fragment", i)
		}
		return f, nil
	})
}
