package pgr

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/internal/termination"
	"github.com/ordo-db/ordo/internal/txn"
)

// sim is a cluster of three pgr deciders fed one delivered sequence, which
// it builds as a cluster would: transactions proposed by their origins
// with a snapshot at most their node's applied prefix, the outcomes the
// deciders propose delivered later and in any order (some twice), aborts
// from a failure detector and from origins that give up, fragments now
// and then missing, other entries mixed in.
type sim struct {
	rng      *rand.Rand
	window   uint64
	deciders []*Decider
	seq      []termination.Entry
	locals   map[txn.GID]*termination.Local // every transaction's full keys
	pool     []termination.Entry            // proposed, not yet delivered
	steps    [][]termination.Step           // per node, per entry
	started  int
}

func newSim(t *testing.T, seed uint64, window uint64) *sim {
	s := &sim{rng: rand.New(rand.NewPCG(seed, 11)), window: window, locals: map[txn.GID]*termination.Local{}, steps: make([][]termination.Step, 3)}
	for n := range 3 {
		d, err := New(uint32(n+1), window, 0)
		require.NoError(t, err)
		s.deciders = append(s.deciders, d)
	}
	return s
}

// deliver appends e to the sequence and feeds it to every decider, with
// the origin's read keys on the origin only.
func (s *sim) deliver(t *testing.T, e termination.Entry) {
	e.Seqno = uint64(len(s.seq) + 1)
	s.seq = append(s.seq, e)
	for n, d := range s.deciders {
		en := e
		en.Keys = slices.Clone(e.Keys)
		if e.Kind == termination.KindTxn && e.Origin == uint32(n+1) {
			en.Local = s.locals[e.GID]
		}
		st, err := d.Step(&en)
		require.NoError(t, err)
		s.steps[n] = append(s.steps[n], st)
		for _, p := range st.Proposals {
			s.pool = append(s.pool, termination.Entry{Kind: termination.KindOutcome, GID: p.GID, TxnSeqno: p.TxnSeqno, Commit: p.Commit, Reason: p.Reason, Cause: p.Cause})
		}
	}
}

func (s *sim) run(t *testing.T, n int) {
	for len(s.seq) < n {
		switch r := s.rng.IntN(20); {
		case r < 8:
			s.startTxn(t)
		case r < 16 && len(s.pool) > 0:
			i := s.rng.IntN(len(s.pool))
			e := s.pool[i]
			if s.rng.IntN(10) > 0 {
				s.pool = slices.Delete(s.pool, i, i+1)
			}
			s.deliver(t, e)
		case r == 16:
			// The failure detector takes some origin for gone.
			var undecided []*pending
			for _, p := range s.deciders[0].queue {
				if !p.decided {
					undecided = append(undecided, p)
				}
			}
			if len(undecided) > 0 {
				p := undecided[s.rng.IntN(len(undecided))]
				s.deliver(t, termination.Entry{Kind: termination.KindOutcome, GID: p.gid, TxnSeqno: p.seqno, Reason: "its origin failed", Cause: termination.CauseOriginGone})
			}
		default:
			s.deliver(t, termination.Entry{Kind: termination.KindOther})
		}
	}
	// Drain: every proposal is delivered, so nothing stays undecided.
	for len(s.pool) > 0 {
		e := s.pool[0]
		s.pool = s.pool[1:]
		s.deliver(t, e)
	}
}

func (s *sim) startTxn(t *testing.T) {
	s.started++
	origin := uint32(1 + s.rng.IntN(3))
	gid := txn.GID(fmt.Sprintf("ordo_%d_%d", origin, s.started))
	prefix := s.deciders[origin-1].Settled()
	snap := prefix - min(prefix, uint64(s.rng.IntN(4)))
	e := termination.Entry{Kind: termination.KindTxn, GID: gid, Origin: origin, Protocol: termination.PGR, SnapshotSeqno: snap}
	local := &termination.Local{ReadAll: s.rng.IntN(60) == 0}
	for range 1 + s.rng.IntN(2) {
		row := strconv.Itoa(s.rng.IntN(8))
		w := txn.KeyMode{Key: txn.RowKey("public", "t", row), Mode: txn.X}
		e.Keys = append(e.Keys, w, txn.KeyMode{Key: txn.TableKey("public", "t"), Mode: txn.IX})
	}
	if s.rng.IntN(40) == 0 {
		e.Keys = append(e.Keys, txn.KeyMode{Key: txn.TableKey("public", "t"), Mode: txn.X})
	}
	local.Keys = slices.Clone(e.Keys)
	for range s.rng.IntN(3) {
		local.Keys = append(local.Keys, txn.KeyMode{Key: txn.RowKey("public", "t", strconv.Itoa(s.rng.IntN(8))), Mode: txn.S})
	}
	s.locals[gid] = local
	frags := uint32(s.rng.IntN(10) / 8)
	for f := range frags {
		if s.rng.IntN(8) > 0 {
			s.deliver(t, termination.Entry{Kind: termination.KindFragment, GID: gid, Index: f})
		}
	}
	e.Fragments = frags
	abort := s.rng.IntN(15)
	if abort == 0 { // its origin gave up before its entry was delivered
		s.deliver(t, termination.Entry{Kind: termination.KindAbort, GID: gid})
	}
	s.deliver(t, e)
	if abort == 1 { // or after
		s.deliver(t, termination.Entry{Kind: termination.KindAbort, GID: gid})
	}
}

// decisions flattens the decisions of a node's steps, with the index of
// the step that released each.
func decisions(steps []termination.Step) map[uint64]released {
	out := map[uint64]released{}
	for i, st := range steps {
		for _, d := range st.Decisions {
			if d.Seqno > 0 {
				out[d.Seqno] = released{step: i, dec: d}
			}
		}
	}
	return out
}

type released struct {
	step int
	dec  termination.Decision
}

// keysConflict is the conflict rule, written out naively: T's keys (reads
// included) against the write keys of an earlier concurrent U.
func keysConflict(t *termination.Local, u []txn.KeyMode) bool {
	for _, uk := range u {
		if uk.Mode&txn.Recorded == 0 {
			continue
		}
		if t.ReadAll {
			return true
		}
		for _, k := range t.Keys {
			if k.Key == uk.Key && txn.Conflicts(k.Mode, uk.Mode, true) {
				return true
			}
			if uk.Key.Level == txn.LevelTable && uk.Mode&txn.X != 0 && k.Key.TableKey() == uk.Key {
				return true
			}
		}
	}
	return false
}

// TestDeterminism: the three deciders fed the same sequence decide
// identically (only proposals differ); every transaction is decided once
// every proposal is delivered; decisions are released in seqno order and
// the settled prefix never passes an undecided transaction; no committed
// transaction conflicts with a committed one after its snapshot and
// before it (1-copy serializability, checked naively); and a decider
// rebuilt after a restart, fed a window before its proven prefix with the
// outcomes its proof rows give and without its own read keys, decides
// every later transaction as the one that never stopped.
func TestDeterminism(t *testing.T) {
	const window = 40
	for seed := range uint64(60) {
		s := newSim(t, seed, window)
		s.run(t, 400)
		byNode := make([]map[uint64]released, 3)
		for n := range 3 {
			byNode[n] = decisions(s.steps[n])
			require.Equal(t, byNode[0], byNode[n], "seed %d: nodes 1 and %d decide differently", seed, n+1)
			require.Empty(t, s.deciders[n].queue, "seed %d: node %d has undecided transactions after every outcome was delivered", seed, n+1)
		}
		txns := map[uint64]termination.Entry{}
		for _, e := range s.seq {
			if e.Kind == termination.KindTxn {
				txns[e.Seqno] = e
			}
		}
		require.Len(t, byNode[0], len(txns), "seed %d: every transaction is decided once", seed)
		var last uint64
		for _, st := range s.steps[0] {
			for _, d := range st.Decisions {
				if d.Seqno > 0 {
					require.Greater(t, d.Seqno, last, "seed %d: released out of order", seed)
					last = d.Seqno
				}
			}
		}
		// Serializability: T committed at s; no U committed in (snap, s)
		// conflicts with T's keys, reads included.
		for s1, r := range byNode[0] {
			if !r.dec.Commit {
				continue
			}
			e := txns[s1]
			for s2 := e.SnapshotSeqno + 1; s2 < s1; s2++ {
				u, ok := byNode[0][s2]
				if !ok || !u.dec.Commit {
					continue
				}
				require.False(t, keysConflict(s.locals[e.GID], txns[s2].Keys), "seed %d: %s at %d committed over a conflicting %s at %d", seed, e.GID, s1, txns[s2].GID, s2)
			}
		}

		// A restart of node 1 after step k.
		k := 100 + s.rng.IntN(250)
		var proven uint64
		for _, st := range s.steps[0][:k] {
			for _, d := range st.Decisions {
				if d.Commit && d.Seqno > 0 {
					proven = max(proven, d.Seqno)
				}
			}
		}
		start := proven - min(proven, window)
		restarted, err := New(1, window, start)
		require.NoError(t, err)
		var stepsR []termination.Step
		for _, e := range s.seq[start:] {
			e.Keys = slices.Clone(e.Keys)
			if e.Kind == termination.KindTxn && e.Seqno <= proven {
				e.Replayed = termination.ReplayAbort
				if byNode[0][e.Seqno].dec.Commit {
					e.Replayed = termination.ReplayCommit
				}
			}
			st, err := restarted.Step(&e)
			require.NoError(t, err)
			stepsR = append(stepsR, st)
		}
		for seqno, r := range decisions(stepsR) {
			if seqno <= proven {
				continue
			}
			orig := byNode[0][seqno]
			require.Equal(t, orig.dec, r.dec, "seed %d: the restarted decider decides seqno %d otherwise", seed, seqno)
			if orig.step >= k {
				// Released after the restart: at the same delivery. (An
				// abort released before it may be released again sooner.)
				require.Equal(t, orig.step, r.step+int(start), "seed %d: the restarted decider releases seqno %d at another step", seed, seqno)
			}
		}
	}
}
