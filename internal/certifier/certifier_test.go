package certifier

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/internal/txn"
)

func row(t string, id int) txn.Key { return txn.RowKey("public", t, fmt.Sprint(id)) }
func table(t string) txn.Key       { return txn.TableKey("public", t) }

// write returns the keys of a transaction writing the given rows of t.
func write(t string, ids ...int) []txn.KeyMode {
	ks := []txn.KeyMode{{Key: table(t), Mode: txn.IX}}
	for _, id := range ids {
		ks = append(ks, txn.KeyMode{Key: row(t, id), Mode: txn.X})
	}
	return ks
}

func read(keys ...txn.Key) []txn.KeyMode {
	var ks []txn.KeyMode
	for _, k := range keys {
		ks = append(ks, txn.KeyMode{Key: k, Mode: txn.S})
	}
	return ks
}

func TestConcurrentWritesOfOneRow(t *testing.T) {
	c := New(Config{CheckReads: true}, 0)
	// T1 and T2 both start from snapshot 0 and write row 1.
	d1 := c.Certify(1, &Request{SnapshotSeqno: 0, Keys: write("acct", 1)})
	d2 := c.Certify(2, &Request{SnapshotSeqno: 0, Keys: write("acct", 1)})
	require.True(t, d1.Commit)
	require.False(t, d2.Commit)
	require.Equal(t, ReasonConflict, d2.Reason)
	require.Equal(t, row("acct", 1), d2.Key)
	require.Equal(t, uint64(1), d2.By)
	// T3 saw T1 (snapshot 1, T2 aborted): commits.
	require.True(t, c.Certify(3, &Request{SnapshotSeqno: 1, Keys: write("acct", 1)}).Commit)
	// Different rows never conflict.
	require.True(t, c.Certify(4, &Request{SnapshotSeqno: 0, Keys: write("acct", 2)}).Commit)
}

// TestWriteSkew: T1 reads x,y writes x; T2 reads x,y writes y, concurrently.
// Serializable (dbsm) aborts T2; snapshot isolation (dbsm-si) commits both.
func TestWriteSkew(t *testing.T) {
	for _, tc := range []struct {
		name       string
		checkReads bool
		bothCommit bool
	}{{"dbsm", true, false}, {"dbsm-si", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			c := New(Config{CheckReads: tc.checkReads}, 0)
			t1 := append(read(row("r", 1), row("r", 2)), write("r", 1)...)
			t2 := append(read(row("r", 1), row("r", 2)), write("r", 2)...)
			require.True(t, c.Certify(1, &Request{Keys: t1}).Commit)
			require.Equal(t, tc.bothCommit, c.Certify(2, &Request{Keys: t2}).Commit)
		})
	}
}

// TestSerializableRequestUnderSnapshotIsolation: under dbsm-si and
// dbsm-rc (Config.CheckReads false) a transaction that ran at
// SERIALIZABLE has its reads certified, ReadAll included; the others keep
// snapshot isolation's rule beside it.
func TestSerializableRequestUnderSnapshotIsolation(t *testing.T) {
	c := New(Config{CheckReads: false}, 0)
	t1 := append(read(row("r", 1), row("r", 2)), write("r", 1)...)
	t2 := append(read(row("r", 1), row("r", 2)), write("r", 2)...)
	require.True(t, c.Certify(1, &Request{Keys: t1}).Commit)
	d := c.Certify(2, &Request{Keys: t2, CheckReads: true})
	require.False(t, d.Commit, "write skew refused to a serializable transaction")
	require.Equal(t, row("r", 1), d.Key)
	require.Equal(t, uint64(1), d.By)
	// The same transaction without the flag commits (snapshot isolation).
	require.True(t, c.Certify(3, &Request{Keys: t2}).Commit)
	// Its reads are not recorded: a later writer of what it read does not
	// conflict with it, serializable or not.
	require.True(t, c.Certify(4, &Request{SnapshotSeqno: 3, Keys: write("r", 1), CheckReads: true}).Commit)
	// ReadAll conflicts with any write after the snapshot when checked.
	require.False(t, c.Certify(5, &Request{SnapshotSeqno: 3, ReadAll: true, Keys: write("b", 1), CheckReads: true}).Commit)
	require.True(t, c.Certify(6, &Request{SnapshotSeqno: 3, ReadAll: true, Keys: write("b", 2)}).Commit)
	require.True(t, c.Certify(7, &Request{SnapshotSeqno: 6, ReadAll: true, Keys: write("b", 3), CheckReads: true}).Commit)
}

func TestReadOfTableConflictsWithRowWrite(t *testing.T) {
	c := New(Config{CheckReads: true}, 0)
	require.True(t, c.Certify(1, &Request{Keys: write("a", 7)}).Commit)
	// A table scan of a concurrently written table fails under dbsm.
	d := c.Certify(2, &Request{Keys: append(read(table("a")), write("b", 1)...)})
	require.False(t, d.Commit)
	// The same read after the write (snapshot 1) commits.
	require.True(t, c.Certify(3, &Request{SnapshotSeqno: 1, Keys: append(read(table("a")), write("b", 1)...)}).Commit)
}

func TestTruncateConflictsWithRowKeys(t *testing.T) {
	c := New(Config{CheckReads: false}, 0)
	c.Record(1, []txn.KeyMode{{Key: table("a"), Mode: txn.X}}) // DDL / TRUNCATE
	d := c.Certify(2, &Request{Keys: write("a", 1)})
	require.False(t, d.Commit, "a row write concurrent with a TRUNCATE must fail")
	require.True(t, c.Certify(3, &Request{SnapshotSeqno: 1, Keys: write("a", 1)}).Commit)
	// And a TRUNCATE concurrent with a row write fails (IX on the table).
	d = c.Certify(4, &Request{SnapshotSeqno: 1, Keys: []txn.KeyMode{{Key: table("a"), Mode: txn.X}}})
	require.False(t, d.Commit)
	// A row read (dbsm) concurrent with a TRUNCATE fails through the table key.
	c = New(Config{CheckReads: true}, 0)
	c.Record(1, []txn.KeyMode{{Key: table("a"), Mode: txn.X}})
	require.False(t, c.Certify(2, &Request{Keys: append(read(row("a", 3)), write("b", 1)...)}).Commit)
}

func TestForeignKeyParentReference(t *testing.T) {
	c := New(Config{}, 0)
	// T1 deletes parent 5; T2 concurrently inserts a child referencing it.
	require.True(t, c.Certify(1, &Request{Keys: write("parent", 5)}).Commit)
	child := append(write("child", 1), txn.KeyMode{Key: row("parent", 5), Mode: txn.R})
	require.False(t, c.Certify(2, &Request{Keys: child}).Commit)
	// Two children referencing the same parent do not conflict.
	c2 := New(Config{}, 0)
	require.True(t, c2.Certify(1, &Request{Keys: child}).Commit)
	child2 := append(write("child", 2), txn.KeyMode{Key: row("parent", 5), Mode: txn.R})
	require.True(t, c2.Certify(2, &Request{Keys: child2}).Commit)
}

func TestReadAll(t *testing.T) {
	c := New(Config{CheckReads: true}, 0)
	require.True(t, c.Certify(1, &Request{Keys: write("a", 1)}).Commit)
	require.False(t, c.Certify(2, &Request{ReadAll: true, Keys: write("b", 1)}).Commit)
	require.True(t, c.Certify(3, &Request{SnapshotSeqno: 1, ReadAll: true, Keys: write("b", 2)}).Commit)
	si := New(Config{CheckReads: false}, 0)
	require.True(t, si.Certify(1, &Request{Keys: write("a", 1)}).Commit)
	require.True(t, si.Certify(2, &Request{ReadAll: true, Keys: write("b", 1)}).Commit)
}

func TestWindowTrimsAndAbortsOldSnapshots(t *testing.T) {
	c := New(Config{Window: 10}, 0)
	for s := uint64(1); s <= 100; s++ {
		require.True(t, c.Certify(s, &Request{SnapshotSeqno: s - 1, Keys: write("a", int(s))}).Commit)
	}
	require.LessOrEqual(t, c.Len(), 12, "index must not grow past the window")
	d := c.Certify(101, &Request{SnapshotSeqno: 50, Keys: write("b", 1)})
	require.False(t, d.Commit)
	require.Equal(t, ReasonTooOld, d.Reason)
	require.True(t, c.Certify(102, &Request{SnapshotSeqno: 95, Keys: write("b", 1)}).Commit)
}

func TestSeqnoMustIncrease(t *testing.T) {
	c := New(Config{}, 5)
	require.Panics(t, func() { c.Certify(5, &Request{}) })
}

// TestDeterminism feeds the same random sequence to independent certifiers
// (with a different number of gaps and map iteration orders) and checks
// identical decisions.
func TestDeterminism(t *testing.T) {
	for seed := uint64(0); seed < 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 1))
		type entry struct {
			seqno uint64
			req   Request
		}
		var seq []entry
		s := uint64(0)
		for i := 0; i < 2000; i++ {
			s += 1 + uint64(rng.IntN(2))
			var keys []txn.KeyMode
			for j := rng.IntN(6); j >= 0; j-- {
				tb := fmt.Sprint("t", rng.IntN(3))
				switch rng.IntN(6) {
				case 5:
					if rng.IntN(10) == 0 {
						keys = append(keys, txn.KeyMode{Key: table(tb), Mode: txn.X})
					}
				case 0:
					keys = append(keys, read(table(tb))...)
				case 1, 2:
					keys = append(keys, read(row(tb, rng.IntN(30)))...)
				case 3:
					keys = append(keys, write(tb, rng.IntN(30))...)
				case 4:
					keys = append(keys, txn.KeyMode{Key: row(tb, rng.IntN(30)), Mode: txn.R})
				}
			}
			snap := s - 1 - uint64(rng.IntN(int(min(s, 40))))
			seq = append(seq, entry{s, Request{SnapshotSeqno: snap, Keys: keys, ReadAll: rng.IntN(50) == 0}})
		}
		naive := func(seq []entry, checkReads bool, window uint64) []bool {
			type committed struct {
				seqno uint64
				keys  []txn.KeyMode
			}
			var done []committed
			var out []bool
			for _, e := range seq {
				ok := !(e.seqno > window && e.req.SnapshotSeqno < e.seqno-window)
				for _, u := range done {
					if !ok || u.seqno <= e.req.SnapshotSeqno {
						continue
					}
					hasWrite := false
					for _, uk := range u.keys {
						if uk.Mode&txn.Recorded != 0 {
							hasWrite = true
						}
					}
					if e.req.ReadAll && checkReads && hasWrite {
						ok = false
					}
					for _, tk := range e.req.Keys {
						tm := tk.Mode
						if !checkReads {
							tm &^= txn.S
						}
						for _, uk := range u.keys {
							um := uk.Mode & txn.Recorded
							if tm != 0 && uk.Key == tk.Key && txn.Conflicts(tm, um, true) {
								ok = false
							}
							if tm != 0 && tk.Key.Level != txn.LevelTable && uk.Key == tk.Key.TableKey() && um&txn.X != 0 {
								ok = false
							}
						}
					}
				}
				if ok {
					done = append(done, committed{e.seqno, e.req.Keys})
				}
				out = append(out, ok)
			}
			return out
		}
		for _, checkReads := range []bool{true, false} {
			var runs [3][]Decision
			aborts := 0
			for r := range runs {
				c := New(Config{CheckReads: checkReads, Window: 500}, 0)
				for _, e := range seq {
					req := e.req
					runs[r] = append(runs[r], c.Certify(e.seqno, &req))
				}
			}
			model := naive(seq, checkReads, 500)
			for i := range runs[0] {
				require.Equal(t, model[i], runs[0][i].Commit, "seed %d entry %d: index and naive model disagree", seed, i)
				require.Equal(t, runs[0][i], runs[1][i], "seed %d entry %d", seed, i)
				require.Equal(t, runs[0][i], runs[2][i], "seed %d entry %d", seed, i)
				if !runs[0][i].Commit {
					aborts++
				}
			}
			require.Positive(t, aborts, "the workload must exercise conflicts")
		}
	}
}

// TestEscalatedWritesKeepEveryConflict: a transaction whose row keys of a
// table were escalated to X on the table (txn.KeySet.Escalate) conflicts
// with every concurrent write of a row of that table and every concurrent
// reference to one, in either order, and with nothing else.
func TestEscalatedWritesKeepEveryConflict(t *testing.T) {
	escalated := func(tbl string, ids ...int) []txn.KeyMode {
		var s txn.KeySet
		for _, km := range write(tbl, ids...) {
			s.Add(km.Key, km.Mode)
		}
		require.Equal(t, []txn.Key{table(tbl)}, s.Escalate(len(ids)-1))
		return s.Sorted()
	}
	child := append(write("child", 1), txn.KeyMode{Key: row("parent", 5), Mode: txn.R}, txn.KeyMode{Key: table("parent"), Mode: txn.R})
	for name, other := range map[string][]txn.KeyMode{
		"row write":        write("a", 999),
		"parent reference": child,
	} {
		tbl := "a"
		if name == "parent reference" {
			tbl = "parent"
		}
		c := New(Config{}, 0)
		require.True(t, c.Certify(1, &Request{Keys: other}).Commit)
		require.False(t, c.Certify(2, &Request{Keys: escalated(tbl, 1, 2, 3)}).Commit, "%s, then the escalated transaction", name)

		c = New(Config{}, 0)
		require.True(t, c.Certify(1, &Request{Keys: escalated(tbl, 1, 2, 3)}).Commit)
		require.False(t, c.Certify(2, &Request{Keys: other}).Commit, "the escalated transaction, then a %s", name)
		require.True(t, c.Certify(3, &Request{SnapshotSeqno: 1, Keys: other}).Commit, "not concurrent")
	}
	c := New(Config{}, 0)
	require.True(t, c.Certify(1, &Request{Keys: escalated("a", 1, 2, 3)}).Commit)
	require.True(t, c.Certify(2, &Request{Keys: write("b", 1)}).Commit, "another table")
}

// TestCheckAtRecordsNothing: pgr's origin checks its transaction at its
// seqno; the index learns of it only when its outcome is recorded.
func TestCheckAtRecordsNothing(t *testing.T) {
	c := New(Config{CheckReads: true, Window: 10}, 0)
	require.True(t, c.CheckAt(1, &Request{Keys: write("acct", 1)}).Commit)
	require.True(t, c.CheckAt(1, &Request{Keys: write("acct", 1)}).Commit, "a check changes nothing")
	c.Skip(1) // it aborted after all
	require.True(t, c.CheckAt(2, &Request{Keys: write("acct", 1)}).Commit)
	c.Record(2, write("acct", 1))
	d := c.CheckAt(3, &Request{SnapshotSeqno: 1, Keys: read(row("acct", 1))})
	require.False(t, d.Commit)
	require.Equal(t, uint64(2), d.By)
	require.Equal(t, ReasonTooOld, c.CheckAt(20, &Request{SnapshotSeqno: 5}).Reason, "the window trims at the checked seqno")
	require.Panics(t, func() { c.CheckAt(2, &Request{}) })
}
