package session

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/internal/analysis"
)

// TestBoundControlLog: the log of transaction control bound into portals
// (txState.bound) gives each portal what was last bound into it, brings
// back what a ROLLBACK TO undoes the rebinding of, and does not grow
// with a transaction's statements when no savepoint can bring anything
// back.
func TestBoundControlLog(t *testing.T) {
	s := &session{unitStatus: 'T'} // (in a block: nothing asks PostgreSQL)
	ctl := func(op analysis.TxnOp, name string) *analysis.TxnControl {
		return &analysis.TxnControl{Op: op, Savepoint: name}
	}
	bind := func(portal string, c *analysis.TxnControl) {
		s.unbind(portal)
		if c != nil {
			s.logBound(boundCtl{portal: portal, txn: c})
		}
	}
	// pgjdbc's autosave: a savepoint set and released around every
	// statement, each through the unnamed portal.
	for i := 0; i < 1000; i++ {
		bind("", ctl(analysis.TxnSavepoint, "a"))
		s.Executed("")
		bind("", nil) // the statement
		s.Executed("")
		bind("", ctl(analysis.TxnRelease, "a"))
		s.Executed("")
	}
	require.Empty(t, s.tx.savepoints)
	require.LessOrEqual(t, len(s.tx.bound), 1, "the log after 1000 statements")
	require.Nil(t, s.boundInto(""), "a portal runs once")

	// A RELEASE bound into p waits; a SAVEPOINT set after it; a Bind of
	// p after that (which PostgreSQL refuses: p exists) and a ROLLBACK
	// TO the savepoint: p holds the RELEASE again.
	s.savepointOp(ctl(analysis.TxnSavepoint, "outer"))
	bind("p", ctl(analysis.TxnRelease, "outer"))
	s.savepointOp(ctl(analysis.TxnSavepoint, "s1"))
	bind("p", ctl(analysis.TxnSavepoint, "zz"))
	require.Equal(t, analysis.TxnSavepoint, s.boundInto("p").Op)
	s.savepointOp(ctl(analysis.TxnRollbackTo, "s1"))
	require.Equal(t, analysis.TxnRelease, s.boundInto("p").Op)
	// Its Execute releases both savepoints; then nothing waits in p, and
	// the log holds nothing.
	s.Executed("p")
	require.Empty(t, s.tx.savepoints)
	require.Nil(t, s.boundInto("p"))
	require.Empty(t, s.tx.bound)
}
