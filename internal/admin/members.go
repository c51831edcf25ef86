package admin

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ordo-db/ordo/internal/replica"
	"github.com/ordo-db/ordo/internal/totalorder"
)

// Membership is what the member endpoints change and read of the total
// order (*totalorder.Node); optional: without it they answer 501.
type Membership interface {
	MemberInfos() []totalorder.MemberInfo
	// AddLearner adds a node as a learner (it receives the log and does
	// not vote); the node promotes itself once caught up.
	AddLearner(ctx context.Context, id uint64, addr string) error
	Promote(ctx context.Context, id uint64) error
	RemoveNode(ctx context.Context, id uint64) error
	IsRemoved(id uint64) bool
	// LogPointAt names entry index of the log (a joiner's log starts
	// there: totalorder.Config.Seed); LastLogPoint the last applied one.
	LogPointAt(index uint64) (totalorder.LogPoint, error)
	LastLogPoint() (totalorder.LogPoint, error)
	// AddWitness adds a learner that is a witness.
	AddWitness(ctx context.Context, id uint64, addr string) error
}

// Donor exports a snapshot of the node's database at an applied prefix
// for a joining node (*replica.Replica); optional: without it the
// transfer endpoint answers 501.
type Donor interface {
	ExportSnapshot(ctx context.Context) (*replica.Export, error)
}

var (
	_ Membership = (*totalorder.Node)(nil)
	_ Donor      = (*replica.Replica)(nil)
)

// Paths of the membership endpoints.
const (
	// PathMembers: GET: Members; POST MemberAdd: Members once the node
	// is a learner; DELETE ?id=N: Members once it is removed.
	PathMembers = "/v1/members"
	// PathPromote: POST ?id=N: makes learner N a voter; Members once it
	// is one.
	PathPromote = "/v1/members/promote"
	// PathTransfer: POST: a state transfer's snapshot. The answer is one
	// line of JSON (Transfer), after which the response stays open: the
	// snapshot can be imported until the joiner closes the connection (or
	// TransferMaxHold passes).
	PathTransfer = "/v1/transfer"
	// PathLogPoint: GET: the last applied entry of the answering node's
	// log (totalorder.LogPoint), where a witness's log starts.
	PathLogPoint = "/v1/logpoint"
)

// TransferMaxHold bounds how long a donor keeps a snapshot importable.
const TransferMaxHold = 6 * time.Hour

// MemberRow is one member of the group as the answering node sees it.
type MemberRow struct {
	ID uint64 `json:"id"`
	// Role: voter, witness (a voter without PostgreSQL), learner (a
	// joining node, until it is caught up), or "learner (witness)".
	Role string `json:"role"`
	// Addr is the member's peer address ("" if not known here).
	Addr   string `json:"addr"`
	Leader bool   `json:"leader"`
	// State: live (heard from), behind (more than 1000 seqnos behind the
	// answering node), unreachable (never heard from, or the leader's
	// failure detection says so), joining (a learner that is not live
	// yet: copying its database, then replaying, Behind saying how far
	// it is once it reports).
	State string `json:"state"`
	// Applied is the member's applied prefix as last reported.
	Applied *uint64 `json:"applied,omitempty"`
	// Behind is how many seqnos the member trails the answering node.
	Behind *uint64 `json:"behind,omitempty"`
}

// Members is the answer of the member endpoints.
type Members struct {
	NodeID  uint32      `json:"node_id"`
	Members []MemberRow `json:"members"`
}

// MemberAdd asks for a new member (POST /v1/members).
type MemberAdd struct {
	ID   uint64 `json:"id"`
	Addr string `json:"addr"`
	// Witness: the node is a witness (a voter without PostgreSQL).
	Witness bool `json:"witness,omitempty"`
}

// Transfer is the donor's first answer to POST /v1/transfer.
type Transfer struct {
	// Donor is the answering node's id; Seqno the applied prefix the
	// snapshot holds: the joiner replays the order after it.
	Donor uint32 `json:"donor"`
	Seqno uint64 `json:"seqno"`
	// Snapshot is the exported snapshot (SET TRANSACTION SNAPSHOT).
	Snapshot string `json:"snapshot"`
	// Postgres is where the donor's PostgreSQL is, as the donor connects
	// to it (host, port, database, user; never a password).
	Postgres PostgresAddr `json:"postgres"`
	// Members are the group's members with their peer addresses.
	Members []MemberRow `json:"members"`
	// LogPoint, when the request asked for ?keep=W and Seqno > W, names
	// entry Seqno-W of the donor's log: the joiner's log starts there, so
	// it replays the W entries before Seqno (the certification window)
	// even where the group's log is compacted.
	LogPoint *totalorder.LogPoint `json:"log_point,omitempty"`
}

// PostgresAddr locates a PostgreSQL database.
type PostgresAddr struct {
	Host     string `json:"host"`
	Port     uint16 `json:"port"`
	Database string `json:"database"`
	User     string `json:"user"`
}

const behindThreshold = 1000

func (s *Server) members(w http.ResponseWriter, r *http.Request) {
	m := s.cfg.Membership
	if m == nil {
		writeJSON(w, http.StatusNotImplemented, ErrorBody{Error: "members: this node does not manage membership"})
		return
	}
	switch r.Method {
	case http.MethodGet:
		writeJSON(w, http.StatusOK, s.memberList())
	case http.MethodPost:
		var req MemberAdd
		dec := json.NewDecoder(io.LimitReader(r.Body, 1<<16))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeJSON(w, http.StatusBadRequest, ErrorBody{Error: "members: " + err.Error()})
			return
		}
		if req.ID == 0 || req.ID > 1<<32-1 {
			writeJSON(w, http.StatusBadRequest, ErrorBody{Error: "members: id must be between 1 and 4294967295"})
			return
		}
		if _, _, err := net.SplitHostPort(req.Addr); err != nil {
			writeJSON(w, http.StatusBadRequest, ErrorBody{Error: "members: addr must be the new node's peer_listen address host:port: " + err.Error()})
			return
		}
		for _, mi := range m.MemberInfos() {
			if mi.ID == req.ID {
				if mi.Addr != req.Addr {
					writeJSON(w, http.StatusConflict, ErrorBody{Error: fmt.Sprintf("members: node %d is already a member at %s", req.ID, mi.Addr)})
					return
				}
				writeJSON(w, http.StatusOK, s.memberList()) // already added: a restarted join
				return
			}
		}
		ctx, cancel := context.WithTimeout(r.Context(), schemaCheckTimeout)
		defer cancel()
		add, what := m.AddLearner, "a learner"
		if req.Witness {
			add, what = m.AddWitness, "a witness (learner until it promotes itself)"
		}
		if err := add(ctx, req.ID, req.Addr); err != nil {
			code := http.StatusServiceUnavailable
			if errors.Is(err, totalorder.ErrRemovedID) {
				code = http.StatusConflict
			}
			s.log.Warn("admin: member not added", "by", caller(r), "id", req.ID, "err", err)
			writeJSON(w, code, ErrorBody{Error: "members: " + err.Error()})
			return
		}
		s.log.Info("admin: member added as "+what, "by", caller(r), "id", req.ID, "addr", req.Addr)
		writeJSON(w, http.StatusOK, s.memberList())
	case http.MethodDelete:
		id, err := strconv.ParseUint(r.URL.Query().Get("id"), 10, 32)
		if err != nil || id == 0 {
			writeJSON(w, http.StatusBadRequest, ErrorBody{Error: "members: give the member's id: ?id=N"})
			return
		}
		found := false
		for _, mi := range m.MemberInfos() {
			found = found || mi.ID == id
		}
		if !found {
			writeJSON(w, http.StatusNotFound, ErrorBody{Error: fmt.Sprintf("members: node %d is not a member", id)})
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), schemaCheckTimeout)
		defer cancel()
		if err := m.RemoveNode(ctx, id); err != nil {
			s.log.Warn("admin: member not removed", "by", caller(r), "id", id, "err", err)
			writeJSON(w, http.StatusServiceUnavailable, ErrorBody{Error: "members: " + err.Error()})
			return
		}
		s.log.Info("admin: member removed", "by", caller(r), "id", id)
		writeJSON(w, http.StatusOK, s.memberList())
	default:
		w.Header().Set("Allow", "GET, POST, DELETE")
		writeJSON(w, http.StatusMethodNotAllowed, ErrorBody{Error: r.URL.Path + " takes GET, POST or DELETE"})
	}
}

// promote makes a learner a voter (a joining node does it itself once it
// has caught up; this is for the operator who will not wait, or a learner
// added ahead of time).
func (s *Server) promote(w http.ResponseWriter, r *http.Request) {
	m := s.cfg.Membership
	if m == nil {
		writeJSON(w, http.StatusNotImplemented, ErrorBody{Error: "members: this node does not manage membership"})
		return
	}
	id, err := strconv.ParseUint(r.URL.Query().Get("id"), 10, 32)
	if err != nil || id == 0 {
		writeJSON(w, http.StatusBadRequest, ErrorBody{Error: "members: give the learner's id: ?id=N"})
		return
	}
	var info *totalorder.MemberInfo
	for _, mi := range m.MemberInfos() {
		if mi.ID == id {
			info = &mi
		}
	}
	switch {
	case info == nil:
		writeJSON(w, http.StatusNotFound, ErrorBody{Error: fmt.Sprintf("members: node %d is not a member", id)})
		return
	case !info.Learner:
		writeJSON(w, http.StatusOK, s.memberList()) // a voter already: nothing to do
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), schemaCheckTimeout)
	defer cancel()
	if err := m.Promote(ctx, id); err != nil {
		s.log.Warn("admin: learner not promoted", "by", caller(r), "id", id, "err", err)
		writeJSON(w, http.StatusServiceUnavailable, ErrorBody{Error: "members: " + err.Error()})
		return
	}
	s.log.Info("admin: learner promoted to voter", "by", caller(r), "id", id)
	writeJSON(w, http.StatusOK, s.memberList())
}

func (s *Server) memberList() Members {
	o := s.cfg.Order
	rs := o.Status()
	lead := o.Leader()
	delivered := o.Delivered()
	reported := o.PeersApplied()
	out := Members{NodeID: s.cfg.NodeID, Members: []MemberRow{}}
	for _, mi := range s.cfg.Membership.MemberInfos() {
		row := MemberRow{ID: mi.ID, Role: roleOf(mi), Addr: mi.Addr, Leader: mi.ID == lead, State: "unreachable"}
		var applied uint64
		known := false
		if mi.ID == uint64(s.cfg.NodeID) {
			applied, known = s.cfg.Replica.AppliedPrefix(), true
		} else if a, ok := reported[mi.ID]; ok {
			applied, known = a, true
		}
		if known {
			behind := sub(delivered, applied)
			row.Applied, row.Behind = &applied, &behind
			row.State = "live"
			if behind > behindThreshold {
				row.State = "behind"
			}
		}
		if pr, ok := rs.Progress[mi.ID]; ok && mi.ID != uint64(s.cfg.NodeID) && !pr.RecentActive {
			row.State = "unreachable"
		}
		if mi.Learner && row.State != "live" {
			// Copying (not running yet), then replaying: Behind says
			// how far it still is once it reports.
			row.State = "joining"
		}
		out.Members = append(out.Members, row)
	}
	return out
}

// transfer exports a snapshot and holds it until the joiner hangs up.
func (s *Server) transfer(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Donor == nil || s.cfg.Membership == nil {
		writeJSON(w, http.StatusNotImplemented, ErrorBody{Error: "transfer: this node cannot donate"})
		return
	}
	pc, err := pgx.ParseConfig(s.cfg.Postgres)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, ErrorBody{Error: "transfer: the node's postgres setting: " + err.Error()})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), schemaCheckTimeout)
	exp, err := s.cfg.Donor.ExportSnapshot(ctx)
	cancel()
	if err != nil {
		s.log.Warn("admin: no snapshot exported for a state transfer", "by", caller(r), "err", err)
		writeJSON(w, http.StatusServiceUnavailable, ErrorBody{Error: "transfer: " + err.Error()})
		return
	}
	defer exp.Close()
	t := Transfer{
		Donor: s.cfg.NodeID, Seqno: exp.Seqno, Snapshot: exp.Snapshot,
		Postgres: PostgresAddr{Host: pc.Host, Port: pc.Port, Database: pc.Database, User: pc.User},
		Members:  s.memberList().Members,
	}
	if k := r.URL.Query().Get("keep"); k != "" {
		keep, err := strconv.ParseUint(k, 10, 64)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, ErrorBody{Error: "transfer: keep: " + err.Error()})
			return
		}
		if exp.Seqno > keep {
			lp, err := s.cfg.Membership.LogPointAt(exp.Seqno - keep)
			if err != nil {
				writeJSON(w, http.StatusServiceUnavailable, ErrorBody{Error: fmt.Sprintf(
					"transfer: this node's log no longer holds the %d entries before its applied prefix %d (%v): copy from a member that is not behind", keep, exp.Seqno, err)})
				return
			}
			t.LogPoint = &lp
		}
	}
	s.log.Info("admin: state transfer: snapshot exported", "by", caller(r), "seqno", exp.Seqno, "snapshot", exp.Snapshot)
	began := time.Now()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriter(w)
	if err := json.NewEncoder(bw).Encode(t); err != nil {
		return
	}
	_ = bw.Flush()
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	// Held until the joiner closes the connection, the server shuts
	// down, or TransferMaxHold.
	hold := time.NewTimer(TransferMaxHold)
	defer hold.Stop()
	select {
	case <-r.Context().Done():
	case <-s.closing:
	case <-hold.C:
	}
	s.log.Info("admin: state transfer: snapshot released", "seqno", exp.Seqno, "held", time.Since(began).Round(time.Millisecond))
}

func (s *Server) logPoint(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Membership == nil {
		writeJSON(w, http.StatusNotImplemented, ErrorBody{Error: "logpoint: this node does not manage membership"})
		return
	}
	lp, err := s.cfg.Membership.LastLogPoint()
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, ErrorBody{Error: "logpoint: " + err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, lp)
}

// roleOf names a member's role: voter, witness, learner or
// "learner (witness)".
func roleOf(mi totalorder.MemberInfo) string {
	switch {
	case mi.Learner && mi.Witness:
		return "learner (witness)"
	case mi.Learner:
		return "learner"
	case mi.Witness:
		return "witness"
	}
	return "voter"
}
