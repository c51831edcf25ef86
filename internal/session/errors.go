package session

import (
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// SQLSTATEs the session uses.
const (
	codeSerializationFailure = "40001"
	codeResolutionUnknown    = "08007"
	codeFeatureNotSupported  = "0A000"
	codeReadOnly             = "25006"
	codeInternal             = "XX000"
	codeProgramLimitExceeded = "54000"
)

func pgErr(code, format string, args ...any) *pgconn.PgError {
	return &pgconn.PgError{Severity: "ERROR", Code: code, Message: fmt.Sprintf(format, args...)}
}
