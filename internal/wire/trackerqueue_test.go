package wire

import (
	"reflect"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

// BenchmarkTrackerUnit: the tracker's work for one prepared statement's
// unit (Bind, Execute, Sync and their replies), as pgbench -M prepared
// sends it.
func BenchmarkTrackerUnit(b *testing.B) {
	var u unnamedTracker
	bind := &pgproto3.Bind{PreparedStatement: "P0_1"}
	exec := &pgproto3.Execute{}
	sync := &pgproto3.Sync{}
	replies := []pgproto3.BackendMessage{&pgproto3.BindComplete{}, &pgproto3.DataRow{}, &pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")}, &pgproto3.ReadyForQuery{TxStatus: 'I'}}
	b.ReportAllocs()
	for b.Loop() {
		u.sent(bind)
		u.sent(exec)
		u.sent(sync)
		for _, r := range replies {
			u.reply(r)
		}
	}
}

// TestTrackerQueueKeepsNothing: the tracker's queue reuses its array, but
// neither keeps what popped messages pointed to, nor a large array after a
// deep pipeline, which would cost every later unit.
func TestTrackerQueueKeepsNothing(t *testing.T) {
	var u unnamedTracker
	for range 100000 {
		u.sent(&pgproto3.Parse{Query: "select 1"})
	}
	for range 100000 {
		u.reply(&pgproto3.ParseComplete{})
	}
	u.sent(&pgproto3.Sync{})
	u.reply(&pgproto3.ReadyForQuery{TxStatus: 'I'})
	for range 3 {
		u.sent(&pgproto3.Parse{Query: "select 2"})
		u.sent(&pgproto3.Bind{})
		u.sent(&pgproto3.Execute{})
		u.sent(&pgproto3.Sync{})
		for _, r := range []pgproto3.BackendMessage{&pgproto3.ParseComplete{}, &pgproto3.BindComplete{}, &pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")}, &pgproto3.ReadyForQuery{TxStatus: 'I'}} {
			u.reply(r)
		}
	}
	if cap(u.spare) > spareMax || cap(u.queue) > spareMax {
		t.Fatalf("the queue keeps an array of %d (spare %d) after a deep pipeline", cap(u.queue), cap(u.spare))
	}
	for i, m := range u.spare[:cap(u.spare)] {
		if !reflect.DeepEqual(m, trackedMsg{}) {
			t.Fatalf("slot %d of the spare array keeps %+v", i, m)
		}
	}
}
