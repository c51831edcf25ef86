package dbsm

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/internal/termination"
	"github.com/ordo-db/ordo/internal/txn"
)

// TestTranscripts runs the transcripts in testdata/: entries in, decisions
// out (regenerate the expected output with -rewrite).
//
//	new protocol=dbsm|dbsm-si|dbsm-rc window=N [start=N]
//	txn seq=N gid=G [origin=N] [snap=N] [keys=MODE:KEY,...] [readall] [serializable] [frags=N] [replayed=commit|abort] [protocol=P]
//	abort seq=N gid=G
//	frag seq=N gid=G index=N
//	other seq=N
//
// A key is table, table(v,...) for a row, table@col=v for a granule or
// table#constraint(v) for a unique value, in schema public.
func TestTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		var d *Decider
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			if td.Cmd == "new" {
				var err error
				d, err = New(arg(td, "protocol", ""), argUint(td, "window", 0), argUint(td, "start", 0))
				if err != nil {
					return "error: " + err.Error() + "\n"
				}
				return "ok\n"
			}
			e, err := parseEntry(td)
			if err != nil {
				td.Fatalf(t, "%v", err)
			}
			st, err := d.Step(e)
			if err != nil {
				return "error: " + err.Error() + "\n"
			}
			return render(st, d.Settled())
		})
	})
}

func arg(td *datadriven.TestData, key, def string) string {
	for _, a := range td.CmdArgs {
		if a.Key == key {
			if len(a.Vals) == 0 {
				return "true"
			}
			return strings.Join(a.Vals, ",")
		}
	}
	return def
}

func argUint(td *datadriven.TestData, key string, def uint64) uint64 {
	v := arg(td, key, "")
	if v == "" {
		return def
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		panic(fmt.Sprintf("%s=%q: %v", key, v, err))
	}
	return n
}

func parseEntry(td *datadriven.TestData) (*termination.Entry, error) {
	e := &termination.Entry{Seqno: argUint(td, "seq", 0), GID: txn.GID(arg(td, "gid", ""))}
	switch td.Cmd {
	case "txn":
		e.Kind = termination.KindTxn
		e.Origin = uint32(argUint(td, "origin", uint64(e.GID.Node())))
		e.Protocol = arg(td, "protocol", "")
		e.SnapshotSeqno = argUint(td, "snap", 0)
		e.ReadAll = arg(td, "readall", "") == "true"
		e.Serializable = arg(td, "serializable", "") == "true"
		e.Fragments = uint32(argUint(td, "frags", 0))
		switch arg(td, "replayed", "") {
		case "commit":
			e.Replayed = termination.ReplayCommit
		case "abort":
			e.Replayed = termination.ReplayAbort
		}
		if ks := arg(td, "keys", ""); ks != "" {
			for _, s := range strings.Split(ks, ",") {
				km, err := parseKeyMode(s)
				if err != nil {
					return nil, err
				}
				e.Keys = append(e.Keys, km)
			}
		}
	case "abort":
		e.Kind = termination.KindAbort
	case "frag":
		e.Kind, e.Index = termination.KindFragment, uint32(argUint(td, "index", 0))
	case "other":
		e.Kind = termination.KindOther
	default:
		return nil, fmt.Errorf("unknown command %q", td.Cmd)
	}
	return e, nil
}

// parseKeyMode parses MODE:KEY, MODE being S, IX, X or R joined by |.
func parseKeyMode(s string) (txn.KeyMode, error) {
	mode, key, ok := strings.Cut(s, ":")
	if !ok {
		return txn.KeyMode{}, fmt.Errorf("key %q: want MODE:KEY", s)
	}
	var km txn.KeyMode
	for _, m := range strings.Split(mode, "|") {
		switch m {
		case "S":
			km.Mode |= txn.S
		case "IX":
			km.Mode |= txn.IX
		case "X":
			km.Mode |= txn.X
		case "R":
			km.Mode |= txn.R
		default:
			return km, fmt.Errorf("key %q: unknown mode %q", s, m)
		}
	}
	values := func(v string) []string { return strings.Split(strings.TrimSuffix(v, ")"), ";") }
	switch {
	case strings.Contains(key, "#"):
		tbl, rest, _ := strings.Cut(key, "#")
		con, v, _ := strings.Cut(rest, "(")
		km.Key = txn.UniqueKey("public", tbl, con, values(v)...)
	case strings.Contains(key, "@"):
		tbl, rest, _ := strings.Cut(key, "@")
		col, v, _ := strings.Cut(rest, "=")
		km.Key = txn.GranuleKey("public", tbl, col, v)
	case strings.Contains(key, "("):
		tbl, v, _ := strings.Cut(key, "(")
		km.Key = txn.RowKey("public", tbl, values(v)...)
	default:
		km.Key = txn.TableKey("public", key)
	}
	return km, nil
}

func render(st termination.Step, settled uint64) string {
	var b strings.Builder
	for _, gid := range st.Expired {
		fmt.Fprintf(&b, "expired fragments of %s\n", gid)
	}
	if st.Hold {
		b.WriteString("hold\n")
	}
	for _, d := range st.Decisions {
		at := "before its entry"
		if d.Seqno > 0 {
			at = "at " + strconv.FormatUint(d.Seqno, 10)
		}
		if d.Commit {
			fmt.Fprintf(&b, "commit %s %s (origin %d)", d.GID, at, d.Origin)
			if d.Cause != termination.CauseNone {
				fmt.Fprintf(&b, " [%s]", d.Cause)
			}
			b.WriteString("\n")
		} else {
			fmt.Fprintf(&b, "abort %s %s (origin %d) [%s]: %s\n", d.GID, at, d.Origin, d.Cause, d.Reason)
		}
	}
	fmt.Fprintf(&b, "settled %d\n", settled)
	return b.String()
}

// randomSequence returns about n entries over a few rows, as a cluster
// would deliver them: unique gids, a transaction's snapshot taken before
// its fragments and its abort (if its origin gave up), fragments now and
// then missing, other entries mixed in.
func randomSequence(rng *rand.Rand, protocol string, n int) []termination.Entry {
	var out []termination.Entry
	s := uint64(0)
	next := func() uint64 { s++; return s }
	for i := 0; s < uint64(n); i++ {
		gid := txn.GID(fmt.Sprintf("ordo_%d_%d", 1+rng.IntN(3), i))
		snap := s - min(s, uint64(rng.IntN(24)))
		frags := uint32(rng.IntN(10) / 8)
		for f := range frags {
			if rng.IntN(10) > 0 {
				out = append(out, termination.Entry{Seqno: next(), Kind: termination.KindFragment, GID: gid, Index: f})
			}
		}
		abort := rng.IntN(12)
		if abort == 0 {
			out = append(out, termination.Entry{Seqno: next(), Kind: termination.KindAbort, GID: gid})
		}
		if rng.IntN(10) == 0 {
			out = append(out, termination.Entry{Seqno: next(), Kind: termination.KindOther})
		}
		e := termination.Entry{Seqno: next(), Kind: termination.KindTxn, GID: gid, Origin: gid.Node(), Protocol: protocol,
			SnapshotSeqno: snap, Fragments: frags, ReadAll: rng.IntN(50) == 0}
		for range 1 + rng.IntN(3) {
			row := strconv.Itoa(rng.IntN(6))
			mode := []txn.Mode{txn.X, txn.S, txn.S, txn.R}[rng.IntN(4)]
			e.Keys = append(e.Keys, txn.KeyMode{Key: txn.RowKey("public", "t", row), Mode: mode})
			if mode == txn.X {
				e.Keys = append(e.Keys, txn.KeyMode{Key: txn.TableKey("public", "t"), Mode: txn.IX})
			}
		}
		if rng.IntN(30) == 0 {
			e.Keys = append(e.Keys, txn.KeyMode{Key: txn.TableKey("public", "t"), Mode: txn.X})
		}
		out = append(out, e)
		if abort == 1 {
			out = append(out, termination.Entry{Seqno: next(), Kind: termination.KindAbort, GID: gid})
		}
	}
	return out
}

func feed(t *testing.T, d *Decider, entries []termination.Entry) []termination.Step {
	var steps []termination.Step
	for i := range entries {
		e := entries[i]
		e.Keys = slices.Clone(e.Keys)
		st, err := d.Step(&e)
		require.NoError(t, err)
		steps = append(steps, st)
	}
	return steps
}

// TestDeterminism: independent deciders fed the same sequence decide
// identically, and a decider rebuilt after a restart (fed a window before
// its proven prefix with the outcomes its proof rows give, as the engine
// does) decides every later entry as the one that never stopped.
func TestDeterminism(t *testing.T) {
	const window = 20
	for _, protocol := range []string{termination.DBSM, termination.DBSMSI} {
		for seed := range uint64(50) {
			rng := rand.New(rand.NewPCG(seed, 7))
			entries := randomSequence(rng, protocol, 300)
			a, err := New(protocol, window, 0)
			require.NoError(t, err)
			b, err := New(protocol, window, 0)
			require.NoError(t, err)
			stepsA := feed(t, a, entries)
			require.Equal(t, stepsA, feed(t, b, entries), "%s seed %d: two deciders differ", protocol, seed)

			proven := uint64(100 + rng.IntN(150))
			committed := map[uint64]bool{}
			for _, st := range stepsA {
				for _, d := range st.Decisions {
					if d.Seqno > 0 && d.Commit {
						committed[d.Seqno] = true
					}
				}
			}
			start := proven - window
			restarted, err := New(protocol, window, start)
			require.NoError(t, err)
			tail := slices.Clone(entries[start:])
			for i := range tail {
				if tail[i].Kind == termination.KindTxn && tail[i].Seqno <= proven {
					tail[i].Replayed = termination.ReplayAbort
					if committed[tail[i].Seqno] {
						tail[i].Replayed = termination.ReplayCommit
					}
				}
			}
			stepsR := feed(t, restarted, tail)
			for i, st := range stepsR {
				s := tail[i].Seqno
				if s <= proven {
					continue
				}
				require.Equal(t, decisions(stepsA[s-1]), decisions(st), "%s seed %d: the restarted decider decides seqno %d otherwise", protocol, seed, s)
			}
		}
	}
}

// decisions are what a step decided, without the fragment bookkeeping (a
// restarted node may hold fewer fragments, of transactions that abort
// anyway).
func decisions(st termination.Step) []termination.Decision { return st.Decisions }

func TestNewRefusesUnknownProtocols(t *testing.T) {
	_, err := New("pgr", 10, 0)
	require.ErrorContains(t, err, `unknown protocol "pgr"`)
	_, err = New(termination.DBSM, 0, 0)
	require.Error(t, err)
}

// TestReadCommittedCertifiesWritesOnly: dbsm-rc decides like dbsm-si (its
// sessions differ, in the snapshot_seqno they give).
func TestReadCommittedCertifiesWritesOnly(t *testing.T) {
	d, err := New(termination.DBSMRC, 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	row := txn.RowKey("public", "t", "1")
	w := func(s uint64, gid string, snap uint64, mode txn.Mode) termination.Decision {
		st, err := d.Step(&termination.Entry{Seqno: s, Kind: termination.KindTxn, GID: txn.GID(gid), Origin: 1,
			Protocol: termination.DBSMRC, SnapshotSeqno: snap, Keys: []txn.KeyMode{{Key: row, Mode: mode}}})
		if err != nil || len(st.Decisions) != 1 {
			t.Fatalf("step %d: %v %+v", s, err, st)
		}
		return st.Decisions[0]
	}
	if !w(1, "a", 0, txn.X).Commit {
		t.Fatal("the first writer aborted")
	}
	if !w(2, "b", 0, txn.S).Commit {
		t.Fatal("a read of a row written after its snapshot aborted: dbsm-rc certifies writes only")
	}
	if w(3, "c", 0, txn.X).Commit {
		t.Fatal("a write of a row written after its snapshot committed")
	}
	if !w(4, "d", 3, txn.X).Commit {
		t.Fatal("a write whose snapshot includes the earlier writes aborted")
	}
}
