package admin

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/ordo-db/ordo/internal/totalorder"
)

// ErrUnreachable is returned (wrapped) by Client's calls when the node
// cannot be reached or the connection fails, a TLS handshake included (a
// certificate the node refuses, or a node certificate ordoctl does not
// trust), or what answers is not an admin API (a metrics address, an
// HTTPS server asked in plaintext).
var ErrUnreachable = errors.New("cannot reach the admin API")

// ErrUnauthenticated is returned (wrapped) by Client's calls when the node
// refuses the request's credentials (HTTP 401 or 403).
var ErrUnauthenticated = errors.New("the admin API refused the credentials")

// APIError is an error response of the admin API other than 401 and 403:
// the node was reached and understood, but could not do what was asked.
type APIError struct {
	Endpoint string
	Code     int
	Message  string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("%s: %s: %s", e.Endpoint, http.StatusText(e.Code), e.Message)
}

// ClientOptions configures a Client.
type ClientOptions struct {
	// Token is sent as a bearer token (token-authenticated nodes).
	Token string
	// TLS is used for nodes with peer_tls (certs.AdminClientConfig); it
	// makes "host:port" endpoints https.
	TLS *tls.Config
	// Timeout bounds each request (default 10s).
	Timeout time.Duration
}

// Client calls one node's admin API.
type Client struct {
	endpoint string
	base     string
	token    string
	hc       *http.Client
}

// NewClient returns a client of the admin API at endpoint: host:port, or a
// URL with scheme http or https.
func NewClient(endpoint string, o ClientOptions) *Client {
	base := strings.TrimSuffix(endpoint, "/")
	if !strings.Contains(base, "://") {
		if o.TLS != nil {
			base = "https://" + base
		} else {
			base = "http://" + base
		}
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	tr := &http.Transport{TLSClientConfig: o.TLS, ForceAttemptHTTP2: false, Proxy: nil}
	return &Client{endpoint: endpoint, base: base, token: o.Token, hc: &http.Client{Timeout: o.Timeout, Transport: tr}}
}

// Endpoint is the endpoint the client was made for.
func (c *Client) Endpoint() string { return c.endpoint }

// Status returns the node's status.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var st Status
	return st, c.call(ctx, http.MethodGet, PathStatus, &st)
}

// Protocol returns the node's termination protocol.
func (c *Client) Protocol(ctx context.Context) (Protocol, error) {
	var p Protocol
	return p, c.call(ctx, http.MethodGet, PathProtocol, &p)
}

// Schema returns the node's latest schema comparisons.
func (c *Client) Schema(ctx context.Context) (SchemaStatus, error) {
	var s SchemaStatus
	return s, c.call(ctx, http.MethodGet, PathSchema, &s)
}

// StartSchemaCheck asks for a schema check and returns its seqno.
func (c *Client) StartSchemaCheck(ctx context.Context) (uint64, error) {
	var sc SchemaCheck
	return sc.AtSeqno, c.call(ctx, http.MethodPost, PathSchemaCheck, &sc)
}

// Data returns the node's latest data comparisons.
func (c *Client) Data(ctx context.Context) (DataStatus, error) {
	var s DataStatus
	return s, c.call(ctx, http.MethodGet, PathData, &s)
}

// StartDataCheck asks for a data check and returns its seqno.
func (c *Client) StartDataCheck(ctx context.Context) (uint64, error) {
	var sc SchemaCheck
	return sc.AtSeqno, c.call(ctx, http.MethodPost, PathDataCheck, &sc)
}

// TxnStatus asks what became of the transaction labelled label.
func (c *Client) TxnStatus(ctx context.Context, label string) (TxnStatus, error) {
	var t TxnStatus
	return t, c.call(ctx, http.MethodGet, PathTxn+"?label="+url.QueryEscape(label), &t)
}

// SwitchProtocol switches the cluster's protocol through the node and
// returns the protocol once the node switched.
func (c *Client) SwitchProtocol(ctx context.Context, name string) (Protocol, error) {
	body, err := json.Marshal(ProtocolSwitch{Name: name})
	if err != nil {
		return Protocol{}, err
	}
	var p Protocol
	return p, c.callBody(ctx, http.MethodPost, PathProtocol, body, &p)
}

// Classes returns the node's conflict-class configuration.
func (c *Client) Classes(ctx context.Context) (Classes, error) {
	var cs Classes
	return cs, c.call(ctx, http.MethodGet, PathClasses, &cs)
}

// ChangeClasses changes the cluster's conflict classes through the node
// and returns the configuration once the node applied the change.
func (c *Client) ChangeClasses(ctx context.Context, ch ClassesChange) (Classes, error) {
	body, err := json.Marshal(ch)
	if err != nil {
		return Classes{}, err
	}
	var cs Classes
	return cs, c.callBody(ctx, http.MethodPost, PathClasses, body, &cs)
}

// Close releases the client's idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

func (c *Client) call(ctx context.Context, method, path string, out any) error {
	return c.callBody(ctx, method, path, nil, out)
}

// callBody is call with a JSON request body (nil: none).
func (c *Client) callBody(ctx context.Context, method, path string, body []byte, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return fmt.Errorf("%s: %w", c.endpoint, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%w %s: %w", ErrUnreachable, c.endpoint, err)
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("%w %s: %v", ErrUnreachable, c.endpoint, err)
	}
	if resp.StatusCode/100 != 2 {
		var eb ErrorBody
		if json.Unmarshal(body, &eb) != nil || eb.Error == "" {
			// Not the admin API: a metrics address, an HTTPS server asked
			// in plaintext, another program.
			return fmt.Errorf("%w %s: not an Ordo admin API answer: %s: %.200s", ErrUnreachable, c.endpoint, resp.Status, strings.TrimSpace(string(body)))
		}
		msg := eb.Error
		if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
			return fmt.Errorf("%w (%s): %s", ErrUnauthenticated, c.endpoint, msg)
		}
		return &APIError{Endpoint: c.endpoint, Code: resp.StatusCode, Message: msg}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(out); err != nil {
		return fmt.Errorf("%s: %s %s: unexpected answer: %w", c.endpoint, method, path, err)
	}
	return nil
}

// Members returns the group's members as the node sees them.
func (c *Client) Members(ctx context.Context) (Members, error) {
	var m Members
	return m, c.call(ctx, http.MethodGet, PathMembers, &m)
}

// AddMember adds node id, whose peer_listen is addr, as a learner (done
// already: no change) and returns the members.
func (c *Client) AddMember(ctx context.Context, id uint64, addr string) (Members, error) {
	body, err := json.Marshal(MemberAdd{ID: id, Addr: addr})
	if err != nil {
		return Members{}, err
	}
	var m Members
	return m, c.callBody(ctx, http.MethodPost, PathMembers, body, &m)
}

// AddWitness adds node id, whose peer_listen is addr, as a witness
// (a learner until it promotes itself; done already: no change) and
// returns the members.
func (c *Client) AddWitness(ctx context.Context, id uint64, addr string) (Members, error) {
	body, err := json.Marshal(MemberAdd{ID: id, Addr: addr, Witness: true})
	if err != nil {
		return Members{}, err
	}
	var m Members
	return m, c.callBody(ctx, http.MethodPost, PathMembers, body, &m)
}

// LastLogPoint returns the last applied entry of the node's log.
func (c *Client) LastLogPoint(ctx context.Context) (totalorder.LogPoint, error) {
	var lp totalorder.LogPoint
	return lp, c.call(ctx, http.MethodGet, PathLogPoint, &lp)
}

// PromoteMember makes learner id a voter (a voter already: no change) and
// returns the members.
func (c *Client) PromoteMember(ctx context.Context, id uint64) (Members, error) {
	var m Members
	return m, c.call(ctx, http.MethodPost, fmt.Sprintf("%s?id=%d", PathPromote, id), &m)
}

// RemoveMember removes node id from the group and returns the members.
func (c *Client) RemoveMember(ctx context.Context, id uint64) (Members, error) {
	var m Members
	return m, c.call(ctx, http.MethodDelete, fmt.Sprintf("%s?id=%d", PathMembers, id), &m)
}

// TransferLease is a donor's snapshot, importable until Close.
type TransferLease struct {
	Transfer
	body io.Closer
	tr   *http.Transport
}

// Close releases the donor's snapshot.
func (l *TransferLease) Close() {
	l.body.Close()
	l.tr.CloseIdleConnections()
}

// StartTransfer asks the node for a snapshot to copy (POST /v1/transfer);
// the snapshot stays importable until the lease is closed or ctx ends.
func (c *Client) StartTransfer(ctx context.Context, keep uint64) (*TransferLease, error) {
	base, ok := c.hc.Transport.(*http.Transport)
	if !ok {
		return nil, fmt.Errorf("%s: transfer: unexpected HTTP transport", c.endpoint)
	}
	tr := base.Clone() // its own connection, held for the whole transfer
	hc := &http.Client{Transport: tr}
	url := c.base + PathTransfer
	if keep > 0 {
		url += "?keep=" + strconv.FormatUint(keep, 10)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.endpoint, err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrUnreachable, c.endpoint, err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		var eb ErrorBody
		if json.Unmarshal(body, &eb) != nil || eb.Error == "" {
			return nil, fmt.Errorf("%w %s: not an Ordo admin API answer: %s", ErrUnreachable, c.endpoint, resp.Status)
		}
		if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
			return nil, fmt.Errorf("%w (%s): %s", ErrUnauthenticated, c.endpoint, eb.Error)
		}
		return nil, &APIError{Endpoint: c.endpoint, Code: resp.StatusCode, Message: eb.Error}
	}
	l := &TransferLease{body: resp.Body, tr: tr}
	if err := json.NewDecoder(resp.Body).Decode(&l.Transfer); err != nil {
		l.Close()
		return nil, fmt.Errorf("%s: transfer: unexpected answer: %w", c.endpoint, err)
	}
	return l, nil
}
