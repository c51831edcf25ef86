package wire

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// SQLSTATEs the proxy itself reports. Everything else is PostgreSQL's own,
// relayed verbatim.
const (
	codeProtocolViolation    = "08P01"
	codeConnectionFailure    = "08006"
	codeCannotConnectNow     = "57P03"
	codeAdminShutdown        = "57P01"
	codeQueryCanceled        = "57014"
	codeTooManyConnections   = "53300"
	codeInvalidAuthorization = "28000"
	codeFeatureNotSupported  = "0A000"
	codeIdleSessionTimeout   = "57P05"
	codeIdleInTxTimeout      = "25P03"
	codeInternal             = "XX000"
)

// errMalformed is returned (wrapped) by receive for a client message
// pgproto3 cannot decode without panicking.
var errMalformed = errors.New("wire: malformed message")

// receive reads the next client message. pgproto3 (v5.7.2) panics
// decoding some malformed messages (a Query with an empty body, a
// SASLInitialResponse shorter than its mechanism and length: found by
// FuzzStartup); those are protocol violations like any other malformed
// message, answered with FATAL 08P01. The message was read whole before it
// was decoded, so the stream stays in step.
func receive(be *pgproto3.Backend) (msg pgproto3.FrontendMessage, err error) {
	defer func() {
		if r := recover(); r != nil {
			msg, err = nil, fmt.Errorf("%w: %v", errMalformed, r)
		}
	}()
	return be.Receive()
}

// errIdle is returned by the client reader when the session was idle past
// its timeout; code is the SQLSTATE to report.
type errIdle struct{ code, msg string }

func (e *errIdle) Error() string { return e.msg }

// fatal builds a FATAL ErrorResponse with the given SQLSTATE.
func fatal(code, format string, args ...any) *pgproto3.ErrorResponse {
	return &pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: code, Message: fmt.Sprintf(format, args...)}
}

// errorResponse turns a hook's error into the ErrorResponse the client sees.
// This is the only place where a hook error becomes a SQLSTATE.
func errorResponse(err error) *pgproto3.ErrorResponse {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		sev := pe.Severity
		if sev == "" {
			sev = "ERROR"
		}
		code := pe.Code
		if code == "" {
			code = codeInternal
		}
		return &pgproto3.ErrorResponse{
			Severity: sev, SeverityUnlocalized: sev, Code: code, Message: pe.Message,
			Detail: pe.Detail, Hint: pe.Hint, Position: pe.Position, InternalPosition: pe.InternalPosition,
			InternalQuery: pe.InternalQuery, Where: pe.Where, SchemaName: pe.SchemaName, TableName: pe.TableName,
			ColumnName: pe.ColumnName, DataTypeName: pe.DataTypeName, ConstraintName: pe.ConstraintName,
			File: pe.File, Line: pe.Line, Routine: pe.Routine,
		}
	}
	if errors.Is(err, ErrNotAtBoundary) {
		// A hook that needed a boundary where the client's batch has
		// none (an update or transaction control in a simple Query
		// inside an extended-protocol batch, after a portal bound and
		// not executed, …): the client's to change, not an internal error.
		return &pgproto3.ErrorResponse{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: codeFeatureNotSupported,
			Message: "ordo: this statement cannot be replicated where it stands in its batch (inside an extended-protocol batch, after a portal bound and not executed yet, a refused statement or a COPY)",
			Hint:    "Send it after a Sync, or in a batch of its own."}
	}
	return &pgproto3.ErrorResponse{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: codeInternal, Message: err.Error()}
}

// pgError converts PostgreSQL's ErrorResponse into a *pgconn.PgError for
// Result.Err.
func pgError(m *pgproto3.ErrorResponse) *pgconn.PgError {
	return &pgconn.PgError{
		Severity: m.Severity, SeverityUnlocalized: m.SeverityUnlocalized, Code: m.Code, Message: m.Message,
		Detail: m.Detail, Hint: m.Hint, Position: m.Position, InternalPosition: m.InternalPosition,
		InternalQuery: m.InternalQuery, Where: m.Where, SchemaName: m.SchemaName, TableName: m.TableName,
		ColumnName: m.ColumnName, DataTypeName: m.DataTypeName, ConstraintName: m.ConstraintName,
		File: m.File, Line: m.Line, Routine: m.Routine,
	}
}

// negotiateProtocolVersion is the NegotiateProtocolVersion ('v') message
// as the wire layer sends it (pgproto3 defined none before v5.9).
type negotiateProtocolVersion struct {
	newest  uint32 // the newest version the server speaks: major<<16 | minor
	unknown []string
}

func (*negotiateProtocolVersion) Backend() {}

func (m *negotiateProtocolVersion) Decode([]byte) error {
	return errors.New("wire: NegotiateProtocolVersion is never decoded")
}

func (m *negotiateProtocolVersion) Encode(dst []byte) ([]byte, error) {
	start := len(dst)
	dst = append(dst, 'v', 0, 0, 0, 0)
	dst = appendUint32(dst, m.newest)
	dst = appendUint32(dst, uint32(len(m.unknown)))
	for _, s := range m.unknown {
		dst = append(dst, s...)
		dst = append(dst, 0)
	}
	putUint32(dst[start+1:], uint32(len(dst)-start-1))
	return dst, nil
}

func appendUint32(b []byte, v uint32) []byte {
	return append(b, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}

func putUint32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
}
