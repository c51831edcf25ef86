package session

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ordo-db/ordo/internal/wire"
)

// SQLSTATEs the session uses.
const (
	codeSerializationFailure     = "40001"
	codeDeadlock                 = "40P01"
	codeResolutionUnknown        = "08007"
	codeFeatureNotSupported      = "0A000"
	codeReadOnly                 = "25006"
	codeInternal                 = "XX000"
	codeProgramLimitExceeded     = "54000"
	codeInFailedTransaction      = "25P02"
	codeInvalidParameterValue    = "22023"
	codeProtocolViolation        = "08P01"
	codeCharacterNotInRepertoire = "22021"
	codeQueryCanceled            = "57014"
	codeCannotConnectNow         = "57P03"
)

// canceled reports a statement canceled by a CancelRequest (57014). On
// the session's own statements that is a brute-force abort: Hooks.Abort
// cancels a session busy in its commit path (its aborted flag may already
// have been reset by a late ReadyForQuery of an earlier unit).
func canceled(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "57014"
}

// bruteForced reports whether res failed because Hooks.Abort canceled the
// session's statement (the transaction is a brute-force victim), rather
// than for PostgreSQL's own reasons: a query cancel of a statement timeout
// that fired as the client's statement ended hits the next statement,
// often one of Ordo's, and is PostgreSQL's error to report, not a
// replication conflict.
//
// A transaction Hooks.Abort chose (s.aborted) fails with the cancel or, if
// the cancel hit an earlier statement, with 25P02; any other error is the
// statement's own.
func (s *session) bruteForced(res *wire.Result) bool {
	if res.Err == nil {
		return false
	}
	if res.Aborted && canceled(res.Err) {
		return true
	}
	var pe *pgconn.PgError
	return s.aborted.Load() && errors.As(res.Err, &pe) && (pe.Code == "57014" || pe.Code == codeInFailedTransaction)
}

func pgErr(code, format string, args ...any) *pgconn.PgError {
	return &pgconn.PgError{Severity: "ERROR", Code: code, Message: fmt.Sprintf(format, args...)}
}
