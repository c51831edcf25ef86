package replica

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/ordo-db/ordo/internal/capture"
	"github.com/ordo-db/ordo/internal/txn"
	ordov1 "github.com/ordo-db/ordo/pkg/api/ordo/v1"
)

// fragments are the held payloads of one transaction too large for one
// entry, kept by the delivery loop while the decider says the transaction
// may still commit with them (termination.Step.Hold), until it is decided
// or its fragments expire. Whether they are complete is the decider's
// rule (termination.Fragments), not the engine's.
type fragments struct {
	first uint64   // seqno of the first fragment held
	data  [][]byte // the fragments' entry payloads, in order
	bytes int
	rows  int // rows in the fragments
}

// holdFragment keeps a delivered fragment (delivery loop only).
func (r *Replica) holdFragment(seqno uint64, f *ordov1.FragmentEntry, payload []byte) {
	gid := txn.GID(f.Gid)
	fs := r.frags[gid]
	if fs == nil {
		fs = &fragments{first: seqno}
		r.frags[gid] = fs
	}
	fs.data = append(fs.data, payload)
	fs.bytes += len(payload)
	fs.rows += len(f.Rows)
	r.fragMem += len(payload)
	r.m.fragmentBytes.Set(float64(r.fragMem))
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
