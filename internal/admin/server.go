package admin

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/raft/v3"

	"github.com/ordo-db/ordo/internal/replica"
	"github.com/ordo-db/ordo/internal/version"
)

// Config configures a Server.
type Config struct {
	NodeID  uint32
	Order   Order
	Replica Replica
	// Ready is the node's readiness check (also served on /readyz).
	Ready *Readiness
	// Metrics is where the transaction counts are read
	// (ordo_replica_transactions_total); nil: none are reported.
	Metrics prometheus.Gatherer
	// PostgresVersion is the node's PostgreSQL server_version.
	PostgresVersion string
	// CertificationWindow is the node's certification_window.
	CertificationWindow uint64
	// Membership and Donor serve the member and transfer endpoints
	// (members.go); nil: those answer 501. Postgres is the node's
	// PostgreSQL connection string, whose address (not its password) a
	// joining node is told.
	Membership Membership
	Donor      Donor
	// Drainer drains the node's client sessions (drain.go); nil: the
	// drain endpoint answers 501.
	Drainer  Drainer
	Postgres string
	Auth     Auth
	Logger   *slog.Logger
}

// Server is a node's admin API.
type Server struct {
	cfg     Config
	log     *slog.Logger
	http    *http.Server
	handler http.Handler
	refused every
	// closing is closed by Shutdown: held transfers end.
	closing   chan struct{}
	closeOnce sync.Once
}

// schemaCheckTimeout bounds proposing a schema check.
const schemaCheckTimeout = 10 * time.Second

// New returns the admin API of a node; Serve serves it.
func New(cfg Config) (*Server, error) {
	if err := cfg.Auth.validate(); err != nil {
		return nil, err
	}
	if cfg.Order == nil || cfg.Replica == nil || cfg.Ready == nil {
		return nil, errors.New("admin: Order, Replica and Ready are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Server{cfg: cfg, log: cfg.Logger, refused: every{interval: 10 * time.Second}, closing: make(chan struct{})}
	if t := cfg.Auth.TLS; t != nil && t.VerifyConnection != nil {
		// Log refused client certificates (rate-limited: anyone who
		// reaches the port can provoke it).
		t = t.Clone()
		verify := t.VerifyConnection
		t.VerifyConnection = func(cs tls.ConnectionState) error {
			err := verify(cs)
			if err != nil && s.refused.allow() {
				s.log.Warn("admin API refused a client certificate (logged at most every 10s)", "err", err)
			}
			return err
		}
		s.cfg.Auth.TLS = t
	}
	mux := http.NewServeMux()
	mux.Handle(PathStatus, only(http.MethodGet, s.status))
	mux.HandleFunc(PathProtocol, func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodGet:
			s.protocol(w, r)
		case http.MethodPost:
			s.switchProtocol(w, r)
		default:
			w.Header().Set("Allow", "GET, POST")
			writeJSON(w, http.StatusMethodNotAllowed, ErrorBody{Error: r.URL.Path + " takes GET or POST"})
		}
	})
	mux.Handle(PathSchema, only(http.MethodGet, s.schema))
	mux.Handle(PathSchemaCheck, only(http.MethodPost, s.schemaCheck))
	mux.Handle(PathData, only(http.MethodGet, s.data))
	mux.Handle(PathDataCheck, only(http.MethodPost, s.dataCheck))
	mux.Handle(PathTxn, only(http.MethodGet, s.txn))
	mux.HandleFunc(PathClasses, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodPost {
			w.Header().Set("Allow", "GET, POST")
			writeJSON(w, http.StatusMethodNotAllowed, ErrorBody{Error: r.URL.Path + " takes GET or POST"})
			return
		}
		s.classes(w, r)
	})
	mux.HandleFunc(PathMembers, s.members)
	mux.Handle(PathPromote, only(http.MethodPost, s.promote))
	mux.HandleFunc(PathDrain, s.drain)
	mux.Handle(PathTransfer, only(http.MethodPost, s.transfer))
	mux.Handle(PathLogPoint, only(http.MethodGet, s.logPoint))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, ErrorBody{Error: "no such admin endpoint: " + r.Method + " " + r.URL.Path})
	})
	s.handler = s.authenticate(mux)
	s.http = &http.Server{Handler: s.handler, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Minute,
		ErrorLog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelDebug)}
	return s, nil
}

// Handler is the API behind authentication (what Serve serves).
func (s *Server) Handler() http.Handler { return s.handler }

// Serve serves the API on ln (with TLS when Auth.TLS is set) until
// Shutdown; it then returns http.ErrServerClosed.
func (s *Server) Serve(ln net.Listener) error {
	if s.cfg.Auth.TLS != nil {
		ln = tls.NewListener(ln, s.cfg.Auth.TLS)
	}
	return s.http.Serve(ln)
}

// Shutdown stops Serve, waiting for requests in progress (bounded by ctx).
func (s *Server) Shutdown(ctx context.Context) error {
	s.closeOnce.Do(func() { close(s.closing) })
	return s.http.Shutdown(ctx)
}

func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		who, err := s.cfg.Auth.identify(r)
		if err != nil {
			if s.refused.allow() {
				s.log.Warn("admin API refused a request (logged at most every 10s)", "remote", r.RemoteAddr, "path", r.URL.Path, "err", err)
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="ordo"`)
			writeJSON(w, http.StatusUnauthorized, ErrorBody{Error: err.Error()})
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), callerKey{}, who))
		next.ServeHTTP(w, r)
	})
}

// only serves h for method, and answers other methods 405 in JSON.
func only(method string, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method {
			w.Header().Set("Allow", method)
			writeJSON(w, http.StatusMethodNotAllowed, ErrorBody{Error: r.URL.Path + " takes " + method})
			return
		}
		h(w, r)
	})
}

type callerKey struct{}

func caller(r *http.Request) string {
	who, _ := r.Context().Value(callerKey{}).(string)
	return who
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	o, rep := s.cfg.Order, s.cfg.Replica
	st := Status{
		NodeID: s.cfg.NodeID, Version: version.String(), Protocol: rep.Name(), Leader: o.Leader(),
		AppliedPrefix: rep.AppliedPrefix(), PostgresVersion: s.cfg.PostgresVersion,
		Transactions: s.counts(), Hot: rep.HotConflicts(),
	}
	switch oerr, rerr := o.Err(), rep.Err(); {
	case rerr != nil:
		st.RefusesUpdates, st.Refusal = true, rerr.Error()
	case oerr != nil:
		st.RefusesUpdates, st.Refusal = true, "the total order stopped: "+oerr.Error()
	}
	rs := o.Status()
	st.Raft = Raft{State: stateName(rs.RaftState), Term: rs.Term, Commit: rs.Commit, Applied: rs.Applied}
	if o.Err() != nil {
		st.Raft.State = "stopped"
	}
	st.DeliveredSeqno = o.Delivered()
	st.Lag = sub(rs.Commit, rs.Applied) + sub(st.DeliveredSeqno, st.AppliedPrefix)
	reported := o.PeersApplied()
	roles := map[uint64]string{}
	if s.cfg.Membership != nil {
		for _, mi := range s.cfg.Membership.MemberInfos() {
			roles[mi.ID] = roleOf(mi)
		}
	}
	for _, id := range o.Members() {
		m := Member{ID: id, Leader: id == st.Leader, Role: roles[id]}
		if id == uint64(s.cfg.NodeID) {
			applied, lag := st.AppliedPrefix, st.Lag
			m.Applied, m.Lag = &applied, &lag
		} else if applied, ok := reported[id]; ok {
			lag := sub(st.DeliveredSeqno, applied)
			m.Applied, m.Lag = &applied, &lag
		}
		if pr, ok := rs.Progress[id]; ok {
			match := pr.Match
			m.Match = &match
		}
		st.Members = append(st.Members, m)
	}
	st.Ready = s.cfg.Ready.Check(r.Context())
	writeJSON(w, http.StatusOK, st)
}

// sub is a-b, or 0 if b >= a.
func sub(a, b uint64) uint64 {
	if a > b {
		return a - b
	}
	return 0
}

func stateName(s raft.StateType) string {
	switch s {
	case raft.StateLeader:
		return "leader"
	case raft.StateFollower:
		return "follower"
	case raft.StateCandidate:
		return "candidate"
	case raft.StatePreCandidate:
		return "pre-candidate"
	}
	return s.String()
}

// counts reads ordo_replica_transactions_total, summed over protocols.
func (s *Server) counts() []TxnCount {
	out := []TxnCount{}
	if s.cfg.Metrics == nil {
		return out
	}
	fams, err := s.cfg.Metrics.Gather()
	if err != nil {
		s.log.Warn("admin: gather metrics", "err", err)
	}
	sums := map[TxnCount]float64{}
	for _, f := range fams {
		if f.GetName() != "ordo_replica_transactions_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			var k TxnCount
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "origin":
					k.Origin = l.GetValue()
				case "outcome":
					k.Outcome = l.GetValue()
				case "reason":
					k.Reason = l.GetValue()
				}
			}
			sums[k] += m.GetCounter().GetValue()
		}
	}
	for k, v := range sums {
		k.Count = uint64(v)
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Outcome != b.Outcome {
			return a.Outcome > b.Outcome // commit first
		}
		if a.Origin != b.Origin {
			return a.Origin < b.Origin
		}
		return a.Reason < b.Reason
	})
	return out
}

// guarantees are what each protocol promises (docs/configuration.md).
var guarantees = map[string]string{
	"dbsm":    "1-copy serializable",
	"dbsm-si": "1-copy snapshot isolation; SERIALIZABLE transactions 1-copy serializable",
	"dbsm-rc": "read committed without lost updates across nodes; SERIALIZABLE transactions 1-copy serializable",
	"pgr":     "1-copy serializable",
	"cons":    "1-copy serializable, no aborts from conflicts",
}

func (s *Server) protocol(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.protocolNow())
}

func (s *Server) protocolNow() Protocol {
	rep := s.cfg.Replica
	p := Protocol{
		NodeID: s.cfg.NodeID, Name: rep.Name(), Guarantee: guarantees[rep.Name()], CertifiesReads: rep.CertifiesReads(),
		CertificationWindow: s.cfg.CertificationWindow,
		Source:              "node configuration (protocol:); the same on every node",
		Since:               rep.ProtocolSince(),
	}
	if p.Since > 0 {
		p.Source = fmt.Sprintf("cluster state: switched at seqno %d (ordoctl protocol set)", p.Since)
	}
	return p
}

func (s *Server) switchProtocol(w http.ResponseWriter, r *http.Request) {
	var req ProtocolSwitch
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<16))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeJSON(w, http.StatusBadRequest, ErrorBody{Error: "protocol: " + err.Error()})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), schemaCheckTimeout)
	defer cancel()
	seqno, err := s.cfg.Replica.SwitchProtocol(ctx, req.Name)
	if err != nil {
		code := http.StatusServiceUnavailable
		if errors.Is(err, replica.ErrBadProtocol) {
			code = http.StatusBadRequest
		}
		s.log.Warn("admin: protocol not switched", "by", caller(r), "to", req.Name, "err", err)
		writeJSON(w, code, ErrorBody{Error: "protocol: " + err.Error()})
		return
	}
	s.log.Info("admin: protocol switched", "by", caller(r), "to", req.Name, "seqno", seqno)
	writeJSON(w, http.StatusOK, s.protocolNow())
}

func (s *Server) data(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.cfg.Replica.Data())
}

func (s *Server) dataCheck(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), schemaCheckTimeout)
	defer cancel()
	seqno, err := s.cfg.Replica.RequestDataCheck(ctx)
	if err != nil {
		s.log.Warn("admin: data check not started", "by", caller(r), "err", err)
		writeJSON(w, http.StatusServiceUnavailable, ErrorBody{Error: "data check: " + err.Error()})
		return
	}
	s.log.Info("admin: data check requested", "by", caller(r), "at_seqno", seqno)
	writeJSON(w, http.StatusOK, SchemaCheck{AtSeqno: seqno})
}

func (s *Server) txn(w http.ResponseWriter, r *http.Request) {
	label := r.URL.Query().Get("label")
	if label == "" {
		writeJSON(w, http.StatusBadRequest, ErrorBody{Error: "txn: give the transaction's label: ?label=…"})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), schemaCheckTimeout)
	defer cancel()
	st, err := s.cfg.Replica.TxnStatus(ctx, label)
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, ErrorBody{Error: "txn: " + err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, TxnStatus{Label: label, Status: st})
}

func (s *Server) schema(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.cfg.Replica.Schema())
}

func (s *Server) schemaCheck(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), schemaCheckTimeout)
	defer cancel()
	seqno, err := s.cfg.Replica.RequestSchemaCheck(ctx)
	if err != nil {
		s.log.Warn("admin: schema check not started", "by", caller(r), "err", err)
		writeJSON(w, http.StatusServiceUnavailable, ErrorBody{Error: "schema check: " + err.Error()})
		return
	}
	s.log.Info("admin: schema check requested", "by", caller(r), "at_seqno", seqno)
	writeJSON(w, http.StatusOK, SchemaCheck{AtSeqno: seqno})
}
