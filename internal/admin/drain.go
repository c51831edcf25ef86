package admin

import (
	"context"
	"net/http"
	"time"
)

// PathDrain: POST ?timeout=D: the node drains its client sessions and
// answers Drained; DELETE: it takes clients again.
const PathDrain = "/v1/drain"

// DefaultDrainTimeout bounds a drain when the request gives no timeout.
const DefaultDrainTimeout = 30 * time.Second

// Drainer drains a node's client sessions (*node.Node).
type Drainer interface {
	// Drain refuses new clients and ends each session once it is between
	// transactions, for at most timeout; it returns how many sessions
	// were still inside a transaction at the end (they are left alone).
	Drain(ctx context.Context, timeout time.Duration) (left int, err error)
	// Undrain takes new clients again.
	Undrain()
	// Draining reports whether the node is draining or drained.
	Draining() bool
}

// Drained is the answer of the drain endpoint.
type Drained struct {
	NodeID uint32 `json:"node_id"`
	// Draining: the node refuses new clients (until DELETE /v1/drain).
	Draining bool `json:"draining"`
	// Left is how many sessions were still inside a transaction when the
	// drain's timeout passed (0: every session ended).
	Left int `json:"left"`
}

func (s *Server) drain(w http.ResponseWriter, r *http.Request) {
	d := s.cfg.Drainer
	if d == nil {
		writeJSON(w, http.StatusNotImplemented, ErrorBody{Error: "drain: this node cannot drain"})
		return
	}
	switch r.Method {
	case http.MethodPost:
		timeout := DefaultDrainTimeout
		if v := r.URL.Query().Get("timeout"); v != "" {
			t, err := time.ParseDuration(v)
			if err != nil || t < 0 || t > time.Hour {
				writeJSON(w, http.StatusBadRequest, ErrorBody{Error: "drain: timeout must be a duration up to 1h, e.g. 30s"})
				return
			}
			timeout = t
		}
		left, err := d.Drain(r.Context(), timeout)
		if err != nil {
			writeJSON(w, http.StatusServiceUnavailable, ErrorBody{Error: "drain: " + err.Error()})
			return
		}
		s.log.Info("admin: node drained", "by", caller(r), "left_in_transaction", left)
		writeJSON(w, http.StatusOK, Drained{NodeID: s.cfg.NodeID, Draining: true, Left: left})
	case http.MethodDelete:
		d.Undrain()
		s.log.Info("admin: node takes clients again", "by", caller(r))
		writeJSON(w, http.StatusOK, Drained{NodeID: s.cfg.NodeID, Draining: false})
	default:
		w.Header().Set("Allow", "POST, DELETE")
		writeJSON(w, http.StatusMethodNotAllowed, ErrorBody{Error: r.URL.Path + " takes POST or DELETE"})
	}
}

// Drain asks the node to drain its sessions (POST /v1/drain), waiting
// up to timeout (plus the request's own margin).
func (c *Client) Drain(ctx context.Context, timeout time.Duration) (Drained, error) {
	var d Drained
	long := *c
	hc := *c.hc
	hc.Timeout = max(hc.Timeout, timeout+hc.Timeout) // the drain itself, then the answer
	long.hc = &hc
	return d, long.call(ctx, http.MethodPost, PathDrain+"?timeout="+timeout.String(), &d)
}

// Undrain makes a drained node take clients again (DELETE /v1/drain).
func (c *Client) Undrain(ctx context.Context) (Drained, error) {
	var d Drained
	return d, c.call(ctx, http.MethodDelete, PathDrain, &d)
}
