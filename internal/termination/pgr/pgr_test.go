package pgr

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/ordo-db/ordo/internal/termination"
	"github.com/ordo-db/ordo/internal/txn"
)

// TestTranscripts runs the transcripts in testdata/: entries in, decisions
// and this node's proposals out (regenerate the expected output with
// -rewrite).
//
//	new node=N window=N [start=N]
//	txn seq=N gid=G [origin=N] [snap=N] [keys=MODE:KEY,...] [reads=MODE:KEY,...] [readall] [nolocal] [frags=N] [replayed=commit|abort] [protocol=P]
//	outcome seq=N gid=G of=N commit|abort [reason=R] [cause=C]
//	abort seq=N gid=G
//	frag seq=N gid=G index=N
//	other seq=N
//
// keys are the entry's (write) keys; on the decider's own node the origin
// also knows them and its reads (Entry.Local), unless nolocal. A key is
// table, table(v;...) for a row, table@col=v for a granule or
// table#constraint(v) for a unique value, in schema public.
func TestTranscripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		var d *Decider
		var node uint32
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			if td.Cmd == "new" {
				var err error
				node = uint32(argUint(td, "node", 1))
				d, err = New(node, argUint(td, "window", 0), argUint(td, "start", 0))
				if err != nil {
					return "error: " + err.Error() + "\n"
				}
				return "ok\n"
			}
			e, err := parseEntry(td, node)
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

func parseKeys(s string) ([]txn.KeyMode, error) {
	var out []txn.KeyMode
	if s == "" {
		return nil, nil
	}
	for _, k := range strings.Split(s, ",") {
		km, err := parseKeyMode(k)
		if err != nil {
			return nil, err
		}
		out = append(out, km)
	}
	return out, nil
}

func parseEntry(td *datadriven.TestData, node uint32) (*termination.Entry, error) {
	e := &termination.Entry{Seqno: argUint(td, "seq", 0), GID: txn.GID(arg(td, "gid", ""))}
	switch td.Cmd {
	case "txn":
		e.Kind = termination.KindTxn
		e.Origin = uint32(argUint(td, "origin", uint64(e.GID.Node())))
		e.Protocol = arg(td, "protocol", termination.PGR)
		e.SnapshotSeqno = argUint(td, "snap", 0)
		e.Fragments = uint32(argUint(td, "frags", 0))
		switch arg(td, "replayed", "") {
		case "commit":
			e.Replayed = termination.ReplayCommit
		case "abort":
			e.Replayed = termination.ReplayAbort
		}
		var err error
		if e.Keys, err = parseKeys(arg(td, "keys", "")); err != nil {
			return nil, err
		}
		reads, err := parseKeys(arg(td, "reads", ""))
		if err != nil {
			return nil, err
		}
		if e.Origin == node && arg(td, "nolocal", "") == "" {
			e.Local = &termination.Local{Keys: append(append([]txn.KeyMode(nil), e.Keys...), reads...), ReadAll: arg(td, "readall", "") == "true"}
		}
	case "outcome":
		e.Kind = termination.KindOutcome
		e.TxnSeqno = argUint(td, "of", 0)
		e.Commit = arg(td, "commit", "") == "true"
		e.Reason = arg(td, "reason", "")
		e.Cause = termination.Cause(arg(td, "cause", ""))
		if c := arg(td, "conflict", ""); c != "" {
			km, err := parseKeyMode("X:" + c)
			if err != nil {
				return nil, err
			}
			e.Conflict = km.Key
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
			fmt.Fprintf(&b, "abort %s %s (origin %d) [%s]: %s%s\n", d.GID, at, d.Origin, d.Cause, d.Reason, conflictOn(d.Conflict))
		}
	}
	for _, p := range st.Proposals {
		if p.Commit {
			fmt.Fprintf(&b, "propose commit %s at %d\n", p.GID, p.TxnSeqno)
		} else {
			fmt.Fprintf(&b, "propose abort %s at %d [%s]: %s%s\n", p.GID, p.TxnSeqno, p.Cause, p.Reason, conflictOn(p.Conflict))
		}
	}
	fmt.Fprintf(&b, "settled %d\n", settled)
	return b.String()
}

func TestNewRefusesAZeroWindow(t *testing.T) {
	if _, err := New(1, 0, 0); err == nil {
		t.Fatal("a zero window was accepted")
	}
}

// TestDrain: at a protocol switch every undecided transaction aborts, and
// the decisions held behind them are released in seqno order.
func TestDrain(t *testing.T) {
	d, err := New(3, 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	step := func(e termination.Entry) {
		if _, err := d.Step(&e); err != nil {
			t.Fatal(err)
		}
	}
	step(termination.Entry{Seqno: 1, Kind: termination.KindTxn, GID: "ordo_1_1", Origin: 1, Protocol: termination.PGR})
	step(termination.Entry{Seqno: 2, Kind: termination.KindTxn, GID: "ordo_2_1", Origin: 2, Protocol: termination.PGR})
	step(termination.Entry{Seqno: 3, Kind: termination.KindOutcome, GID: "ordo_2_1", TxnSeqno: 2, Commit: true})
	got := render(termination.Step{Decisions: d.Drain()}, d.Settled())
	want := "abort ordo_1_1 at 1 (origin 1) [protocol_switch]: the cluster switched protocols before it was decided\ncommit ordo_2_1 at 2 (origin 2)\nsettled 3\n"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}

// conflictOn renders the key an abort is counted on among the hottest
// conflicts.
func conflictOn(k txn.Key) string {
	if k.Level == 0 {
		return ""
	}
	return " {hot: " + k.String() + "}"
}
