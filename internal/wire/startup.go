package wire

import (
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
)

// Startup packet codes (PostgreSQL's pqcomm.h).
const (
	sslRequestCode    = 80877103
	gssEncRequestCode = 80877104
	cancelRequestCode = 80877102
)

// prefixReader replays a header already read, then reads from r.
type prefixReader struct {
	head []byte
	r    io.Reader
}

func (p *prefixReader) Read(b []byte) (int, error) {
	if len(p.head) > 0 {
		n := copy(b, p.head)
		p.head = p.head[n:]
		return n, nil
	}
	return p.r.Read(b)
}

// startup runs the connection from accept until the session is
// established: SSLRequest/GSSENCRequest, StartupMessage or CancelRequest,
// the connection limit, the backend connection and the authentication
// relay. It returns (nil, nil) when the connection is done without a session
// (a cancel request, or an error already reported to the client).
func (s *Server) startup(raw net.Conn) (*session, error) {
	conn := raw
	deadline := time.Now().Add(s.cfg.StartupTimeout)
	_ = raw.SetDeadline(deadline)
	tlsDone, gssDone := false, false
	var hdr [8]byte
	for {
		// Read only the 8-byte header ourselves: nothing past an SSLRequest
		// is read before the TLS handshake, so bytes a client (or a man in
		// the middle) sends early end up in the handshake and fail it
		// (CVE-2021-23214).
		if _, err := io.ReadFull(conn, hdr[:]); err != nil {
			if s.authTimedOut(conn, err) {
				return nil, nil
			}
			return nil, fmt.Errorf("read startup packet: %w", err)
		}
		length := binary.BigEndian.Uint32(hdr[0:4])
		code := binary.BigEndian.Uint32(hdr[4:8])
		if length < 8 || length > uint32(s.cfg.MaxStartupPacketLen) {
			// Not the PostgreSQL protocol (an HTTP request, a client
			// that sent Terminate before its startup packet): closed
			// without a word, as PostgreSQL does. An error here reached
			// node-postgres after it had ended its client, and killed
			// the process.
			s.m.connsRejected.WithLabelValues("protocol").Inc()
			s.log.Debug("invalid length of startup packet", "length", length, "max", s.cfg.MaxStartupPacketLen, "remote", raw.RemoteAddr())
			return nil, nil
		}
		if length == 8 && code == sslRequestCode {
			if tlsDone {
				s.reject(conn, "protocol", fatal(codeProtocolViolation, "SSLRequest received twice"))
				return nil, nil
			}
			if s.cfg.TLSConfig == nil {
				if _, err := conn.Write([]byte{'N'}); err != nil {
					return nil, err
				}
				tlsDone = true
				continue
			}
			if _, err := conn.Write([]byte{'S'}); err != nil {
				return nil, err
			}
			tc := tls.Server(raw, s.cfg.TLSConfig)
			if err := tc.Handshake(); err != nil {
				s.m.connsRejected.WithLabelValues("tls").Inc()
				return nil, fmt.Errorf("tls handshake: %w", err)
			}
			conn = tc
			tlsDone = true
			continue
		}
		if length == 8 && code == gssEncRequestCode {
			if gssDone {
				s.reject(conn, "protocol", fatal(codeProtocolViolation, "GSSENCRequest received twice"))
				return nil, nil
			}
			// GSSAPI encryption is not supported: refuse, the client may go on.
			if _, err := conn.Write([]byte{'N'}); err != nil {
				return nil, err
			}
			gssDone = true
			continue
		}
		var minor uint32
		if code>>16 == 3 && code&0xffff != 0 {
			// Protocol 3.x, x > 0: we speak 3.0 (Ordo's cancel keys are
			// 3.0's four bytes, and PostgreSQL is asked for 3.0) and
			// answer NegotiateProtocolVersion below.
			minor = code & 0xffff
			binary.BigEndian.PutUint32(hdr[4:8], pgproto3.ProtocolVersionNumber)
		}
		cr := &clientReader{r: &prefixReader{head: hdr[:], r: conn}}
		be := pgproto3.NewBackend(cr, nil)
		if code>>16 != 3 && code != cancelRequestCode {
			s.reject(conn, "protocol", fatal(codeFeatureNotSupported, "unsupported frontend protocol %d.%d: server supports 3.0", code>>16, code&0xffff))
			return nil, nil
		}
		msg, err := be.ReceiveStartupMessage()
		if err != nil {
			if s.authTimedOut(conn, err) {
				return nil, nil
			}
			s.reject(conn, "protocol", fatal(codeProtocolViolation, "invalid startup packet: %v", err))
			return nil, nil
		}
		switch m := msg.(type) {
		case *pgproto3.CancelRequest:
			s.cancel(m.ProcessID, m.SecretKey)
			return nil, nil
		case *pgproto3.StartupMessage:
			_, isTLS := conn.(*tls.Conn)
			if !isTLS && !s.cfg.AllowPlaintext {
				s.reject(conn, "tls_required", fatal(codeInvalidAuthorization, "connection requires TLS (sslmode=require)"))
				return nil, nil
			}
			return s.establish(raw, conn, cr, be, m, minor, isTLS, deadline)
		default:
			s.reject(conn, "protocol", fatal(codeProtocolViolation, "unexpected startup packet %T", msg))
			return nil, nil
		}
	}
}

// authTimedOut reports whether err is the startup deadline passing; if so
// it tells the client, as PostgreSQL's authentication_timeout does.
func (s *Server) authTimedOut(conn net.Conn, err error) bool {
	if !isTimeout(err) {
		return false
	}
	s.reject(conn, "auth_timeout", authTimeout(s.cfg.StartupTimeout))
	return true
}

func authTimeout(d time.Duration) *pgproto3.ErrorResponse {
	return fatal(codeQueryCanceled, "canceling authentication due to timeout (ordo auth_timeout %s)", d)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// maxAuthMessageLen bounds a client message before authentication
// (password, SASL): PostgreSQL's PG_MAX_AUTH_TOKEN_LENGTH.
const maxAuthMessageLen = 65535

// reject sends err to a client that has no session and counts it.
func (s *Server) reject(conn net.Conn, reason string, e *pgproto3.ErrorResponse) {
	s.m.connsRejected.WithLabelValues(reason).Inc()
	buf, _ := e.Encode(nil)
	_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = conn.Write(buf)
}

// establish checks the limit, connects to PostgreSQL and relays
// authentication. On success the session is registered and its first
// ReadyForQuery is pending in ss.startupRFQ.
func (s *Server) establish(raw, conn net.Conn, cr *clientReader, be *pgproto3.Backend, sm *pgproto3.StartupMessage, minor uint32, isTLS bool, deadline time.Time) (*session, error) {
	ss := newSession(s, raw, conn, cr, be)
	// Until authenticated, a client may send only small messages.
	be.SetMaxBodyLen(min(s.cfg.MaxMessageLen, maxAuthMessageLen))
	if !s.admit(ss) {
		if s.isDraining() {
			s.reject(conn, "shutdown", fatal(codeCannotConnectNow, "the ordo proxy is shutting down"))
		} else {
			s.reject(conn, "max_conns", fatal(codeTooManyConnections, "sorry, too many clients already (ordo max connections %d)", s.cfg.MaxConns))
		}
		return nil, nil
	}
	ok := false
	defer func() {
		if !ok {
			s.release(ss)
			if ss.server != nil {
				ss.server.Close()
			}
		}
	}()

	params := make(map[string]string, len(sm.Parameters))
	var unknown []string
	for k, v := range sm.Parameters {
		if strings.HasPrefix(k, "_pq_.") {
			unknown = append(unknown, k)
			continue
		}
		params[k] = v
	}
	if minor != 0 || len(unknown) > 0 {
		ss.sendClient(&negotiateProtocolVersion{newest: pgproto3.ProtocolVersionNumber, unknown: unknown}) // 3.0
	}
	if params["user"] == "" {
		ss.sendClient(fatal(codeInvalidAuthorization, "no PostgreSQL user name specified in startup packet"))
		_ = ss.flushClient()
		return nil, nil
	}

	d := net.Dialer{Timeout: s.cfg.DialTimeout}
	sc, err := d.Dial(s.cfg.BackendNetwork, s.cfg.BackendAddr)
	if err != nil {
		s.m.errors.WithLabelValues("backend").Inc()
		ss.sendClient(fatal(codeCannotConnectNow, "ordo: the local PostgreSQL server is not available: %v", err))
		_ = ss.flushClient()
		return nil, nil
	}
	if tc, ok := sc.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
	_ = sc.SetDeadline(deadline)
	ss.attachServer(sc)
	ss.sendServer(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber, Parameters: params})
	if err := ss.flushServer(); err != nil {
		return nil, ss.backendLost(err)
	}
	ss.info = SessionInfo{RemoteAddr: raw.RemoteAddr().String(), User: params["user"], Database: params["database"], Parameters: params, TLS: isTLS}
	if ss.info.Database == "" {
		ss.info.Database = ss.info.User
	}

	// Relay authentication. Only authentication messages pass in either
	// direction until AuthenticationOk.
	asked := false // PostgreSQL asked the client for a credential
	for authed := false; !authed; {
		msg, err := ss.fe.Receive()
		if err != nil {
			return nil, ss.startupFailed(err, true)
		}
		var expect uint32 // the client response we wait for, if any
		switch m := msg.(type) {
		case *pgproto3.AuthenticationOk:
			authed = true
		case *pgproto3.AuthenticationCleartextPassword:
			expect = pgproto3.AuthTypeCleartextPassword
		case *pgproto3.AuthenticationMD5Password:
			expect = pgproto3.AuthTypeMD5Password
		case *pgproto3.AuthenticationSASL:
			// The backend connection is plaintext: channel binding cannot
			// pass through a proxy that terminates TLS. Offer only the
			// mechanisms without it.
			mechs := m.AuthMechanisms[:0]
			for _, mech := range m.AuthMechanisms {
				if !strings.HasSuffix(mech, "-PLUS") {
					mechs = append(mechs, mech)
				}
			}
			m.AuthMechanisms = mechs
			expect = pgproto3.AuthTypeSASL
		case *pgproto3.AuthenticationSASLContinue:
			expect = pgproto3.AuthTypeSASLContinue
		case *pgproto3.AuthenticationSASLFinal:
			// No client response follows; AuthenticationOk comes next.
		case *pgproto3.ErrorResponse:
			s.m.errors.WithLabelValues("auth").Inc()
			ss.sendClient(m)
			_ = ss.flushClient()
			return nil, nil
		case *pgproto3.NoticeResponse:
		case *pgproto3.AuthenticationGSS:
			ss.sendClient(fatal(codeFeatureNotSupported, "ordo: GSSAPI authentication is not supported through the proxy"))
			_ = ss.flushClient()
			return nil, nil
		default:
			ss.sendClient(fatal(codeProtocolViolation, "ordo: unexpected message %T from PostgreSQL during authentication", msg))
			_ = ss.flushClient()
			return nil, nil
		}
		ss.sendClient(msg)
		if err := ss.flushClient(); err != nil {
			return nil, err
		}
		if expect == 0 {
			continue
		}
		asked = true
		if err := be.SetAuthType(expect); err != nil {
			return nil, err
		}
		cm, err := receive(be)
		if err != nil {
			return nil, ss.startupFailed(err, false)
		}
		switch cm.(type) {
		case *pgproto3.PasswordMessage, *pgproto3.SASLInitialResponse, *pgproto3.SASLResponse:
		default:
			ss.sendClient(fatal(codeProtocolViolation, "expected password response, got message type %T", cm))
			_ = ss.flushClient()
			return nil, nil
		}
		ss.sendServer(cm)
		if err := ss.flushServer(); err != nil {
			return nil, ss.backendLost(err)
		}
	}
	_ = be.SetAuthType(pgproto3.AuthTypeOk)
	be.SetMaxBodyLen(s.cfg.MaxMessageLen)
	if !asked && s.warnedTrust.CompareAndSwap(false, true) {
		// Every client of this node reaches PostgreSQL from the same
		// address (or its socket): a trust or peer line matching it lets
		// anyone who can reach the node in.
		s.log.Warn("PostgreSQL let a client in without asking for a password (a trust or peer line of pg_hba.conf matches Ordo's connections): every client that reaches this node gets in the same way; make the line that matches Ordo's connections ask for a password (scram-sha-256) unless that is intended (logged once)",
			"user", params["user"], "database", params["database"], "backend", s.cfg.BackendNetwork+":"+s.cfg.BackendAddr)
	}

	// After AuthenticationOk: ParameterStatus, BackendKeyData, notices, then
	// ReadyForQuery (or a FATAL such as "database does not exist").
	for {
		msg, err := ss.fe.Receive()
		if err != nil {
			return nil, ss.startupFailed(err, true)
		}
		switch m := msg.(type) {
		case *pgproto3.BackendKeyData:
			ss.backendPID, ss.backendSecret = m.ProcessID, m.SecretKey
			s.registerKey(ss, m.ProcessID)
			ss.sendClient(&pgproto3.BackendKeyData{ProcessID: uint32(ss.key >> 32), SecretKey: binary.BigEndian.AppendUint32(nil, uint32(ss.key))})
			continue
		case *pgproto3.ErrorResponse:
			ss.sendClient(m)
			_ = ss.flushClient()
			return nil, nil
		case *pgproto3.ReadyForQuery:
			if ss.key == 0 {
				s.registerKey(ss, 0)
			}
			ss.txStatus.Store(uint32(m.TxStatus))
			if err := ss.flushClient(); err != nil {
				return nil, err
			}
			_ = raw.SetDeadline(time.Time{})
			_ = sc.SetDeadline(time.Time{})
			ok = true
			ss.established = true
			return ss, nil
		case *pgproto3.ParameterStatus:
			ss.noteParameter(m)
		case *pgproto3.NoticeResponse:
		default:
			ss.sendClient(fatal(codeProtocolViolation, "ordo: unexpected message %T from PostgreSQL during startup", msg))
			_ = ss.flushClient()
			return nil, nil
		}
		ss.sendClient(msg)
	}
}

// startupFailed reports a read error before the session is established:
// the startup deadline passing (StartupTimeout), else a failure of
// PostgreSQL's connection (backend) or the client's.
func (ss *session) startupFailed(err error, backend bool) error {
	if isTimeout(err) {
		ss.srv.m.connsRejected.WithLabelValues("auth_timeout").Inc()
		ss.sendClient(authTimeout(ss.srv.cfg.StartupTimeout))
		_ = ss.rawClient.SetWriteDeadline(time.Now().Add(time.Second))
		_ = ss.flushClient()
		return fmt.Errorf("authentication: %w", err)
	}
	if backend {
		return ss.backendLost(err)
	}
	return ss.clientFailed(err)
}

// errBackendLost wraps failures of the PostgreSQL connection.
var errBackendLost = errors.New("wire: PostgreSQL connection lost")
