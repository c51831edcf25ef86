package wire

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// rawConn speaks the protocol by hand, for scripts that must be sent
// byte for byte the same to PostgreSQL and to the proxy.
type rawConn struct {
	t    testing.TB
	conn net.Conn
	fe   *pgproto3.Frontend
}

// dialRaw connects to addr and, if user != "", completes a trust startup.
func dialRaw(t testing.TB, addr, user string) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	r := &rawConn{t: t, conn: c, fe: pgproto3.NewFrontend(c, c)}
	if user != "" {
		r.send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber,
			Parameters: map[string]string{"user": user, "database": "postgres"}})
		if got := r.untilReady(); !strings.Contains(got, "AuthenticationOk") {
			t.Fatalf("startup as %s: %s", user, got)
		}
	}
	return r
}

func (r *rawConn) send(msgs ...pgproto3.FrontendMessage) {
	r.t.Helper()
	for _, m := range msgs {
		r.fe.Send(m)
	}
	if err := r.fe.Flush(); err != nil {
		r.t.Fatal(err)
	}
}

// writeBytes sends raw bytes.
func (r *rawConn) writeBytes(b []byte) error {
	_, err := r.conn.Write(b)
	return err
}

// untilReady reads messages up to and including ReadyForQuery and returns
// them as a transcript, one message per line, with the fields that differ
// between a direct and a proxied session (keys, pids, parameter values)
// normalized.
func (r *rawConn) untilReady() string {
	r.t.Helper()
	var sb strings.Builder
	for {
		m, err := r.fe.Receive()
		if err != nil {
			fmt.Fprintf(&sb, "receive error: %v\n", err)
			return sb.String()
		}
		sb.WriteString(describe(m))
		sb.WriteByte('\n')
		switch m := m.(type) {
		case *pgproto3.ReadyForQuery:
			return sb.String()
		case *pgproto3.ErrorResponse:
			if m.Severity == "FATAL" {
				return sb.String()
			}
		}
	}
}

// receiveN reads n messages.
func (r *rawConn) receiveN(n int) string {
	r.t.Helper()
	var sb strings.Builder
	for i := 0; i < n; i++ {
		m, err := r.fe.Receive()
		if err != nil {
			fmt.Fprintf(&sb, "receive error: %v\n", err)
			return sb.String()
		}
		sb.WriteString(describe(m))
		sb.WriteByte('\n')
	}
	return sb.String()
}

// readError reads until an ErrorResponse (returned) or the connection ends.
func (r *rawConn) readError() *pgproto3.ErrorResponse {
	for {
		m, err := r.fe.Receive()
		if err != nil {
			return nil
		}
		if e, ok := m.(*pgproto3.ErrorResponse); ok {
			cp := *e
			return &cp
		}
	}
}

// silence returns what the peer sent until it closed the connection, and
// whether it closed it (within 5s).
func (r *rawConn) silence() ([]byte, bool) {
	_ = r.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	var got []byte
	buf := make([]byte, 1024)
	for {
		n, err := r.conn.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			ne, ok := err.(net.Error)
			return got, !(ok && ne.Timeout())
		}
	}
}

// closed reports whether the peer closed the connection (within 5s).
func (r *rawConn) closed() bool {
	_ = r.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 1024)
	for {
		_, err := r.conn.Read(buf)
		if err != nil {
			ne, ok := err.(net.Error)
			return !(ok && ne.Timeout())
		}
	}
}

func describe(m pgproto3.BackendMessage) string {
	switch m := m.(type) {
	case *pgproto3.BackendKeyData:
		return "BackendKeyData"
	case *pgproto3.ParameterStatus:
		if m.Name == "application_name" || m.Name == "search_path" || m.Name == "TimeZone" || m.Name == "DateStyle" {
			return fmt.Sprintf("ParameterStatus %s=%s", m.Name, m.Value)
		}
		return "ParameterStatus " + m.Name
	case *pgproto3.ErrorResponse:
		return fmt.Sprintf("ErrorResponse %s %s %s", m.Severity, m.Code, m.Message)
	case *pgproto3.NoticeResponse:
		return fmt.Sprintf("NoticeResponse %s %s %s", m.Severity, m.Code, m.Message)
	case *pgproto3.DataRow:
		vals := make([]string, len(m.Values))
		for i, v := range m.Values {
			if v == nil {
				vals[i] = "NULL"
			} else {
				vals[i] = fmt.Sprintf("%q", v)
			}
		}
		return "DataRow " + strings.Join(vals, ",")
	case *pgproto3.CommandComplete:
		return "CommandComplete " + string(m.CommandTag)
	case *pgproto3.ReadyForQuery:
		return "ReadyForQuery " + string(m.TxStatus)
	case *pgproto3.RowDescription:
		names := make([]string, len(m.Fields))
		for i, f := range m.Fields {
			names[i] = fmt.Sprintf("%s:%d", f.Name, f.DataTypeOID)
		}
		return "RowDescription " + strings.Join(names, ",")
	case *pgproto3.CopyData:
		return fmt.Sprintf("CopyData %q", m.Data)
	case *pgproto3.NotificationResponse:
		return fmt.Sprintf("NotificationResponse %s %s", m.Channel, m.Payload)
	default:
		return strings.TrimPrefix(fmt.Sprintf("%T", m), "*pgproto3.")
	}
}
