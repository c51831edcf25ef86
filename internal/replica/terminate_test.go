package replica

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/ordo-db/ordo/internal/capture"
	"github.com/ordo-db/ordo/internal/termination"
	"github.com/ordo-db/ordo/internal/totalorder"
	"github.com/ordo-db/ordo/internal/txn"
	ordov1 "github.com/ordo-db/ordo/pkg/api/ordo/v1"
)

// failingOrder accepts proposals until failAt (counted from 1), then fails
// that one with err; it records what it accepted. A fake is enough here:
// the test is of Terminate's own logic, not of the total order.
type failingOrder struct {
	mu       sync.Mutex
	failAt   int
	err      error
	n        int
	accepted []*ordov1.Entry
}

func (o *failingOrder) Propose(ctx context.Context, payload []byte) (uint64, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.n++
	if o.n == o.failAt {
		return 0, o.err
	}
	var e ordov1.Entry
	if err := proto.Unmarshal(payload, &e); err != nil {
		return 0, err
	}
	o.accepted = append(o.accepted, &e)
	return uint64(o.n), nil
}
func (o *failingOrder) Deliveries() <-chan totalorder.Delivery        { return nil }
func (o *failingOrder) MarkApplied(uint64)                            {}
func (o *failingOrder) ReadIndex(ctx context.Context) (uint64, error) { return 0, nil }

// TestFailedFragmentAbortsTheTransaction: when a fragment cannot be
// proposed, Terminate stops (no TxnEntry is proposed, so the transaction
// cannot commit), says so (termination.ErrNotReplicated, or termination.ErrTooLarge for an entry
// the order refuses), and orders the transaction's abort so every node
// forgets the fragments already delivered.
func TestFailedFragmentAbortsTheTransaction(t *testing.T) {
	tbl := &capture.Table{Schema: "public", Name: "t",
		Columns: []capture.Column{{Name: "id", TypeOID: 23, Key: true}, {Name: "pad", TypeOID: 25}}, KeyColumns: []int{0}}
	ws := &capture.WriteSet{GID: "ordo_1_5"}
	for i := range 200 {
		id := strconv.Itoa(i)
		ws.Rows = append(ws.Rows, capture.Row{Op: capture.OpInsert, Table: tbl, Key: txn.RowKey("public", "t", id),
			Values: []capture.Value{{Kind: capture.Text, Text: id}, {Kind: capture.Text, Text: strings.Repeat("x", 100)}}})
	}
	for name, tc := range map[string]struct {
		err  error
		want error
	}{
		"no quorum": {totalorder.ErrNoQuorum, termination.ErrNotReplicated},
		"too large": {totalorder.ErrTooLarge, termination.ErrTooLarge},
	} {
		order := &failingOrder{failAt: 3, err: tc.err}
		r, err := New(Config{NodeID: 1, Protocol: DBSMSI, Order: order, MaxEntryBytes: 2000})
		require.NoError(t, err)
		_, err = r.Terminate(context.Background(), &Txn{GID: ws.GID, Origin: 1, WriteSet: ws, Keys: ws.Keys().Sorted()})
		require.ErrorIs(t, err, tc.want, name)
		require.NotErrorIs(t, err, termination.ErrUnknownOutcome, "%s: the outcome is known: it cannot commit", name)
		r.bg.Wait()
		var kinds []string
		for _, e := range order.accepted {
			switch {
			case e.GetFragment() != nil:
				kinds = append(kinds, "fragment")
			case e.GetAbort() != nil:
				require.Equal(t, string(ws.GID), e.GetAbort().Gid)
				kinds = append(kinds, "abort")
			default:
				kinds = append(kinds, "other")
			}
		}
		require.Equal(t, []string{"fragment", "fragment", "abort"}, kinds, name)
	}
}

// TestPgrReadKeysStayAtTheOrigin: under pgr the TxnEntry carries the
// write keys only; the read keys (and an unattributed read) stay with the
// origin, which hands them to its decider when the entry is delivered.
func TestPgrReadKeysStayAtTheOrigin(t *testing.T) {
	order := &failingOrder{}
	r, err := New(Config{NodeID: 1, Protocol: PGR, Order: order})
	require.NoError(t, err)
	keys := []txn.KeyMode{
		{Key: txn.TableKey("public", "t"), Mode: txn.IX | txn.S},
		{Key: txn.RowKey("public", "t", "1"), Mode: txn.X | txn.S},
		{Key: txn.RowKey("public", "t", "2"), Mode: txn.S},
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { // nothing delivers its outcome: the session gives up
		for order.count() == 0 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	_, err = r.Terminate(ctx, &Txn{GID: "ordo_1_9", Origin: 1, Keys: keys, ReadAll: true})
	require.ErrorIs(t, err, termination.ErrUnknownOutcome)
	require.Len(t, order.accepted, 1)
	e := order.accepted[0].GetTxn()
	require.Equal(t, "pgr", e.Protocol)
	require.False(t, e.ReadAll)
	require.Equal(t, []txn.KeyMode{
		{Key: txn.TableKey("public", "t"), Mode: txn.IX},
		{Key: txn.RowKey("public", "t", "1"), Mode: txn.X},
	}, decodeKeys(e))
	local := r.localOf("ordo_1_9")
	require.NotNil(t, local, "the origin keeps them until the transaction is decided")
	require.Equal(t, keys, local.Keys)
	require.True(t, local.ReadAll)
	require.True(t, r.CertifiesReads())
}

func (o *failingOrder) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n
}

// TestTerminateRefusesAWriteSetRolledBackEarly: a local transaction rolled
// back early (it blocked an apply) before its session had its write set in
// hand is not proposed: PostgreSQL's decoder, finding it aborted part-way,
// sends its PREPARE with only the changes decoded before, and the order
// would commit that part as if whole (found by the safety suite's ddl
// workload: an acknowledged insert on no node, the outcome check saying
// committed).
func TestTerminateRefusesAWriteSetRolledBackEarly(t *testing.T) {
	order := &failingOrder{}
	r, err := New(Config{NodeID: 1, Protocol: DBSMSI, Order: order})
	require.NoError(t, err)
	ws := &capture.WriteSet{GID: "ordo_1_7"}
	r.rolledMu.Lock()
	r.rolledBack[ws.GID] = true // as rollBackEarly records it
	r.rolledMu.Unlock()
	_, err = r.Terminate(context.Background(), &Txn{GID: ws.GID, Origin: 1, WriteSet: ws, Label: "pay-7"})
	require.ErrorIs(t, err, termination.ErrNotReplicated)
	r.bg.Wait()
	require.Len(t, order.accepted, 1, "only its abort is proposed (the outcome check answers aborted)")
	a := order.accepted[0].GetAbort()
	require.NotNil(t, a, "%v", order.accepted[0])
	require.Equal(t, string(ws.GID), a.Gid)
	require.Equal(t, "pay-7", a.Label)
}

// TestTerminateWaitsForEntryOrAbort: after its TxnEntry was not confirmed
// in time, Terminate orders the abort and waits a while for whichever of
// the two the delivery loop carries out first: the abort (a definite
// rollback, 40001) or the entry itself (ordered late: its decision); with
// neither, the outcome is unknown. A test of Terminate's own logic: the
// test plays the delivery loop's part (notify). The system behaviour, with
// real nodes and a proposal lost on the network, is e2e
// TestCommitLostOnItsWayToTheLeader (which covers the abort only).
func TestTerminateWaitsForEntryOrAbort(t *testing.T) {
	for name, tc := range map[string]struct {
		outcome Outcome
		commit  bool
	}{
		"the abort first":         {Outcome{Reason: "aborted by its origin", Unordered: true}, false},
		"the entry, ordered late": {Outcome{Commit: true, Seqno: 9}, true},
	} {
		order := &failingOrder{failAt: 1, err: totalorder.ErrNoQuorum}
		r, err := New(Config{NodeID: 1, Protocol: DBSMSI, Order: order, CommitTimeout: time.Minute})
		require.NoError(t, err)
		gid := txn.GID("ordo_1_11")
		go func() {
			for order.count() < 2 { // the entry, then its abort
				time.Sleep(time.Millisecond)
			}
			r.notify(gid, tc.outcome)
		}()
		out, err := r.Terminate(context.Background(), &Txn{GID: gid, Origin: 1, WriteSet: &capture.WriteSet{GID: gid}})
		require.NoError(t, err, name)
		require.Equal(t, tc.commit, out.Commit, name)
		if !tc.commit {
			require.True(t, out.Unordered, name)
			require.Contains(t, out.Reason, "not ordered in time", name)
		}
		r.bg.Wait()
	}
	// Nothing carried out within resolveWait: the outcome is unknown.
	order := &failingOrder{failAt: 1, err: totalorder.ErrNoQuorum}
	r, err := New(Config{NodeID: 1, Protocol: DBSMSI, Order: order, CommitTimeout: 50 * time.Millisecond})
	require.NoError(t, err)
	_, err = r.Terminate(context.Background(), &Txn{GID: "ordo_1_12", Origin: 1, WriteSet: &capture.WriteSet{GID: "ordo_1_12"}})
	require.ErrorIs(t, err, termination.ErrUnknownOutcome)
	r.bg.Wait()
}

// TestConsClassesReleasedWhenNothingIsProposed: a cons transaction whose
// TxnEntry cannot be encoded (a text value that is not UTF-8, as a
// database in another encoding gives them) is not replicated, and its
// classes are released through the order: the session can no longer
// release them (its End comes after Terminate forgot the gid), and every
// conflicting transaction in the cluster would wait for them for good.
func TestConsClassesReleasedWhenNothingIsProposed(t *testing.T) {
	order := &failingOrder{}
	r, err := New(Config{NodeID: 1, Protocol: CONS, Order: order})
	require.NoError(t, err)
	gid := txn.GID("ordo_1_11")
	r.mu.Lock()
	r.cons[gid] = &consTxn{granted: make(chan struct{}), begin: 4} // granted (Begin)
	r.mu.Unlock()
	tbl := &capture.Table{Schema: "public", Name: "t",
		Columns: []capture.Column{{Name: "id", TypeOID: 23, Key: true}, {Name: "name", TypeOID: 25}}, KeyColumns: []int{0}}
	ws := &capture.WriteSet{GID: gid, Rows: []capture.Row{{Op: capture.OpInsert, Table: tbl, Key: txn.RowKey("public", "t", "1"),
		Values: []capture.Value{{Kind: capture.Text, Text: "1"}, {Kind: capture.Text, Text: "caf\xe9"}}}}}
	_, err = r.Terminate(context.Background(), &Txn{GID: gid, Origin: 1, WriteSet: ws, Keys: ws.Keys().Sorted()})
	require.ErrorIs(t, err, termination.ErrNotUTF8)
	require.Contains(t, err.Error(), `a value of column "name" of table "public"."t"`)
	r.End(gid) // the session's, after the failure
	r.bg.Wait()
	require.Len(t, order.accepted, 1, "the release of its classes, once")
	a := order.accepted[0].GetAbort()
	require.NotNil(t, a, "%v", order.accepted[0])
	require.Equal(t, string(gid), a.Gid)
}
