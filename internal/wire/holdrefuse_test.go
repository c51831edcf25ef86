package wire

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// holdRefuseHooks opens a block for a statement, holds its ReadyForQuery,
// then refuses it, as Ordo's session does when it wraps an autocommit
// update and then cannot take the statement's conflict classes.
type holdRefuseHooks struct{}

func (holdRefuseHooks) NewSession(ctx context.Context, info SessionInfo, be Backend) (SessionHooks, error) {
	return &holdRefuseSession{be: be}, nil
}

type holdRefuseSession struct {
	be     Backend
	status byte
}

func (s *holdRefuseSession) Statement(ctx context.Context, st *Statement) error {
	if !strings.Contains(st.SQL, "refuse after hold") {
		return nil
	}
	if res, err := s.be.Exec(ctx, "BEGIN"); err != nil || res.Err != nil {
		return errors.Join(err, res.Err)
	}
	s.be.HoldReady()
	return errForbidden
}

func (s *holdRefuseSession) ReadyForQuery(status byte) { s.status = status }
func (s *holdRefuseSession) Close()                    {}

// BeforeReady ends the block the refused statement left.
func (s *holdRefuseSession) BeforeReady(ctx context.Context) error {
	if s.status != 'I' {
		if _, err := s.be.Exec(ctx, "ROLLBACK"); err != nil {
			return err
		}
	}
	return nil
}

// TestQueryRefusedAfterHoldReady: a Query the hooks refuse after holding
// its ReadyForQuery is answered (the hook's error, then ReadyForQuery). The
// proxy used to wait for the end of a unit it had not relayed: the client
// never got an answer (under cons, every autocommit update that could not
// get its classes hung its client).
func TestQueryRefusedAfterHoldReady(t *testing.T) {
	p := startProxy(t, holdRefuseHooks{}, nil)
	c := connect(t, p.superDSN(""))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.Exec(ctx, "SELECT 'refuse after hold'", pgx.QueryExecModeSimpleProtocol)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != errForbidden.Code {
		t.Fatalf("want the hook's %s, got %v", errForbidden.Code, err)
	}
	var n int
	if err := c.QueryRow(ctx, "SELECT 1").Scan(&n); err != nil || n != 1 {
		t.Fatalf("session unusable after the refusal: %v", err)
	}
	if s := c.PgConn().TxStatus(); s != 'I' {
		t.Fatalf("transaction status %c after the refusal, want I", s)
	}
}
