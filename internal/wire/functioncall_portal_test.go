package wire

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

// TestFunctionCallKeepsAPendingUnnamedPortal: a FunctionCall ends the
// batch (endBatchAtQuery) but, unlike a Query, leaves the client's
// unnamed portal alive in a block. Without the Sync's bookkeeping of a
// pending unnamed portal (unnamedLater), an Exec of the hooks at the next
// unit went as a simple Query, which dropped that portal: the client's
// Execute of it failed (34000) and its block with it. Found by a review
// of e5956fc; fails without the fix.
func TestFunctionCallKeepsAPendingUnnamedPortal(t *testing.T) {
	p := startProxy(t, &execingHooks{}, nil)
	fc := &pgproto3.FunctionCall{Function: 1251 /* int4abs */, ArgFormatCodes: []uint16{0}, Arguments: [][]byte{[]byte("-5")}}
	for _, tc := range []struct {
		name string
		end  pgproto3.FrontendMessage
	}{
		{"Sync (control)", &pgproto3.Sync{}},
		{"FunctionCall", fc},
	} {
		t.Run(tc.name, func(t *testing.T) {
			compareBatch(t, p, "BEGIN",
				[]pgproto3.FrontendMessage{
					&pgproto3.Parse{Name: "s1", Query: "SELECT 42"},
					&pgproto3.Bind{PreparedStatement: "s1"}, // unnamed portal, not executed
					tc.end,
					// next unit: the test hook Execs at its boundary ("probe")
					&pgproto3.Parse{Name: "s2", Query: "SELECT 'exec1'"},
					&pgproto3.Execute{}, // the client's unnamed portal: 42
					&pgproto3.Sync{},
				})
		})
	}
}

// execingHooks Exec one plain statement at a Parse whose text says exec1.
type execingHooks struct{ testHooks }

type execingSession struct{ *testSession }

func (h *execingHooks) NewSession(ctx context.Context, info SessionInfo, be Backend) (SessionHooks, error) {
	s, err := h.testHooks.NewSession(ctx, info, be)
	if err != nil {
		return nil, err
	}
	return execingSession{s.(*testSession)}, nil
}

func (s execingSession) Statement(ctx context.Context, st *Statement) error {
	if err := s.testSession.Statement(ctx, st); err != nil {
		return err
	}
	if strings.Contains(st.SQL, "exec1") {
		if _, err := s.be.Exec(ctx, "SELECT 7"); err != nil && err != ErrNotAtBoundary {
			return err
		}
	}
	return nil
}
