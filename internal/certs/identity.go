package certs

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/ordo-db/ordo/pkg/config"
)

// ErrNoNodeID is returned (wrapped) by NodeID for a certificate that does
// not name exactly one node id: a client certificate, one made by another
// tool without the URI, or one whose URIs or CN disagree.
var ErrNoNodeID = errors.New("certs: the certificate names no Ordo node id")

// URI scheme and host of a node's identity: ordo://node/<id>.
const (
	uriScheme = "ordo"
	uriHost   = "node"
)

// NodeURI is the URI SAN that names node id in its certificate,
// ordo://node/<id>. Other tools (cert-manager's uris field, openssl's
// subjectAltName = URI:ordo://node/3) can put it in a certificate too.
func NodeURI(id uint64) *url.URL {
	return &url.URL{Scheme: uriScheme, Host: uriHost, Path: "/" + strconv.FormatUint(id, 10)}
}

func nodeCN(id uint64) string { return "node-" + strconv.FormatUint(id, 10) }

// NodeID returns the node id a certificate names: its one ordo://node/<id>
// URI SAN. A CN of the form node-<n> must name the same id. The caller
// must have verified the certificate's chain: NodeID only reads it.
func NodeID(c *x509.Certificate) (uint64, error) {
	var id uint64
	for _, u := range c.URIs {
		if u.Scheme != uriScheme || u.Host != uriHost {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimPrefix(u.Path, "/"), 10, 64)
		if err != nil || !strings.HasPrefix(u.Path, "/") || n == 0 || n > config.MaxNodes {
			return 0, fmt.Errorf("%w: bad node URI %q", ErrNoNodeID, u.String())
		}
		if id != 0 && id != n {
			return 0, fmt.Errorf("%w: it names nodes %d and %d", ErrNoNodeID, id, n)
		}
		id = n
	}
	if id == 0 {
		return 0, fmt.Errorf("%w: no %s://%s/<id> URI in %q", ErrNoNodeID, uriScheme, uriHost, c.Subject.CommonName)
	}
	if cn, ok := strings.CutPrefix(c.Subject.CommonName, "node-"); ok {
		if n, err := strconv.ParseUint(cn, 10, 64); err == nil && n != id {
			return 0, fmt.Errorf("%w: its URI names node %d, its CN %q", ErrNoNodeID, id, c.Subject.CommonName)
		}
	}
	return id, nil
}
