package cons

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
// and grants out (regenerate the expected output with -rewrite).
//
//	new window=N [start=N]
//	begin seq=N gid=G classes=(C,...)
//	txn seq=N gid=G begin=N [frags=N] [replayed=commit|abort] [protocol=P]
//	abort seq=N gid=G
//	frag seq=N gid=G index=N
//	other seq=N
//
// A class is name, name[label=value] or *.
func TestTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		var d *Decider
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			if td.Cmd == "new" {
				var err error
				d, err = New(argUint(td, "window", 0), argUint(td, "start", 0))
				if err != nil {
					return "error: " + err.Error() + "\n"
				}
				return "ok\n"
			}
			e := &termination.Entry{Seqno: argUint(td, "seq", 0), GID: txn.GID(arg(td, "gid", ""))}
			switch td.Cmd {
			case "begin":
				e.Kind, e.Origin = termination.KindBegin, e.GID.Node()
				for _, c := range strings.Split(arg(td, "classes", ""), ",") {
					e.Classes = append(e.Classes, parseClass(c))
				}
			case "txn":
				e.Kind, e.Origin, e.Protocol = termination.KindTxn, e.GID.Node(), arg(td, "protocol", termination.CONS)
				e.BeginSeqno, e.Fragments = argUint(td, "begin", 0), uint32(argUint(td, "frags", 0))
				switch arg(td, "replayed", "") {
				case "commit":
					e.Replayed = termination.ReplayCommit
				case "abort":
					e.Replayed = termination.ReplayAbort
				}
			case "abort":
				e.Kind = termination.KindAbort
			case "frag":
				e.Kind, e.Index = termination.KindFragment, uint32(argUint(td, "index", 0))
			case "other":
				e.Kind = termination.KindOther
			default:
				td.Fatalf(t, "unknown command %q", td.Cmd)
			}
			st, err := d.Step(e)
			if err != nil {
				return "error: " + err.Error() + "\n"
			}
			return render(st, d)
		})
	})
}

func parseClass(s string) txn.ClassRef {
	name, rest, split := strings.Cut(strings.TrimSpace(s), "[")
	if !split {
		return txn.ClassRef{Name: name}
	}
	label, value, _ := strings.Cut(strings.TrimSuffix(rest, "]"), "=")
	return txn.ClassRef{Name: name, Label: label, Value: value}
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

func render(st termination.Step, d *Decider) string {
	var b strings.Builder
	for _, gid := range st.Expired {
		fmt.Fprintf(&b, "expired fragments of %s\n", gid)
	}
	if st.Hold {
		b.WriteString("hold\n")
	}
	for _, dec := range st.Decisions {
		at := "before its entry"
		if dec.Seqno > 0 {
			at = "at " + strconv.FormatUint(dec.Seqno, 10)
		}
		if dec.Commit {
			fmt.Fprintf(&b, "commit %s %s", dec.GID, at)
			if dec.Cause != termination.CauseNone {
				fmt.Fprintf(&b, " [%s]", dec.Cause)
			}
			b.WriteString("\n")
		} else {
			fmt.Fprintf(&b, "abort %s %s [%s]: %s\n", dec.GID, at, dec.Cause, dec.Reason)
		}
	}
	for _, g := range st.Granted {
		fmt.Fprintf(&b, "granted %s\n", g)
	}
	var held []string
	for _, h := range d.held {
		s := string(h.gid)
		if !h.granted {
			s += " (waits)"
		}
		held = append(held, s)
	}
	fmt.Fprintf(&b, "held: %s\nsettled %d\n", strings.Join(held, ", "), d.Settled())
	return b.String()
}

// TestDeterminism: two deciders fed one sequence decide and grant alike;
// no two transactions holding conflicting classes are ever granted at
// once, and one is granted only once every earlier conflicting one is
// released (FIFO per class); every transaction is granted once the ones
// before it end; and a decider rebuilt after a restart decides every
// later TxnEntry as the one that never stopped.
func TestDeterminism(t *testing.T) {
	const window = 30
	classes := []txn.ClassRef{{Name: "a"}, {Name: "b"}, {Name: "d", Label: "w", Value: "1"}, {Name: "d", Label: "w", Value: "2"}, {Name: "d"}, {Name: "*"}}
	for seed := range uint64(60) {
		rng := rand.New(rand.NewPCG(seed, 3))
		a, _ := New(window, 0)
		b, _ := New(window, 0)
		var seq []termination.Entry
		var steps []termination.Step
		began := map[txn.GID]uint64{}
		declared := map[txn.GID][]txn.ClassRef{}
		var running []txn.GID // granted, not ended
		n := 0
		deliver := func(e termination.Entry) {
			e.Seqno = uint64(len(seq) + 1)
			seq = append(seq, e)
			sa, err := a.Step(&e)
			require.NoError(t, err)
			sb, err := b.Step(&e)
			require.NoError(t, err)
			require.Equal(t, sa, sb, "seed %d: two deciders differ at %d", seed, e.Seqno)
			steps = append(steps, sa)
			for _, d := range sa.Decisions {
				running = slices.DeleteFunc(running, func(g txn.GID) bool { return g == d.GID })
			}
			for _, g := range sa.Granted {
				for _, r := range running {
					require.False(t, conflicts(declared[r], declared[g]), "seed %d: %s granted while %s holds a conflicting class", seed, g, r)
				}
				running = append(running, g)
			}
		}
		for len(seq) < 400 {
			switch r := rng.IntN(10); {
			case r < 4:
				n++
				gid := txn.GID(fmt.Sprintf("ordo_%d_%d", 1+rng.IntN(3), n))
				var cs []txn.ClassRef
				for range 1 + rng.IntN(2) {
					c := classes[rng.IntN(len(classes)-1)]
					if rng.IntN(40) == 0 {
						c = classes[len(classes)-1]
					}
					cs = append(cs, c)
				}
				declared[gid] = cs
				deliver(termination.Entry{Kind: termination.KindBegin, GID: gid, Origin: gid.Node(), Classes: cs})
				began[gid] = uint64(len(seq))
			case r < 8 && len(running) > 0:
				g := running[rng.IntN(len(running))]
				switch rng.IntN(6) {
				case 0:
					deliver(termination.Entry{Kind: termination.KindAbort, GID: g})
				default:
					deliver(termination.Entry{Kind: termination.KindTxn, GID: g, Origin: g.Node(), Protocol: termination.CONS, BeginSeqno: began[g]})
				}
			default:
				deliver(termination.Entry{Kind: termination.KindOther})
			}
		}
		// Drain: every running transaction ends, so every waiting one is
		// granted in turn.
		for len(running) > 0 {
			g := running[0]
			deliver(termination.Entry{Kind: termination.KindTxn, GID: g, Origin: g.Node(), Protocol: termination.CONS, BeginSeqno: began[g]})
		}
		require.Empty(t, a.held, "seed %d: transactions still wait after every one before them ended", seed)

		// FIFO: a transaction is granted after every earlier conflicting
		// one ended.
		grantedAt, endedAt := map[txn.GID]int{}, map[txn.GID]int{}
		for i, st := range steps {
			for _, g := range st.Granted {
				grantedAt[g] = i
			}
			for _, d := range st.Decisions {
				if _, ok := endedAt[d.GID]; !ok {
					endedAt[d.GID] = i
				}
			}
		}
		for g, at := range grantedAt {
			for u, ub := range began {
				if ub < began[g] && conflicts(declared[u], declared[g]) {
					if _, ok := grantedAt[u]; ok {
						require.LessOrEqual(t, endedAt[u], at, "seed %d: %s granted before the earlier conflicting %s ended", seed, g, u)
					}
				}
			}
		}

		// Restart after a proven prefix.
		proven := uint64(100 + rng.IntN(250))
		committed := map[uint64]bool{}
		for _, st := range steps {
			for _, d := range st.Decisions {
				if d.Commit {
					committed[d.Seqno] = true
				}
			}
		}
		start := proven - window
		r, _ := New(window, start)
		for _, e := range seq[start:] {
			if e.Kind == termination.KindTxn && e.Seqno <= proven {
				e.Replayed = termination.ReplayAbort
				if committed[e.Seqno] {
					e.Replayed = termination.ReplayCommit
				}
			}
			st, err := r.Step(&e)
			require.NoError(t, err)
			if e.Seqno > proven && e.Kind == termination.KindTxn {
				require.Equal(t, steps[e.Seqno-1].Decisions, st.Decisions, "seed %d: the restarted decider decides %d otherwise", seed, e.Seqno)
			}
		}
	}
}
