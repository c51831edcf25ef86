package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/ordo-db/ordo/pkg/config"
)

// Default lifetimes: a CA outlives many node certificates; node and client
// certificates are rotated yearly (a node reloads them without a restart).
const (
	CALifetime     = 10 * 365 * 24 * time.Hour
	NodeLifetime   = 366 * 24 * time.Hour
	ClientLifetime = 366 * 24 * time.Hour
	ServerLifetime = 366 * 24 * time.Hour
)

// backdate starts every certificate's validity a little in the past, so a
// peer whose clock is slightly behind accepts a certificate made just now.
const backdate = time.Hour

// ErrBadRequest is returned by NewAuthority, IssueNode, IssueClient, IssueServer and the
// Create functions for a request they cannot honour: a node id out of
// range, no host, a client name that is not a plain name, a lifetime that
// is not positive.
var ErrBadRequest = errors.New("certs: bad request")

// Authority is a certificate authority: the certificate that peers trust
// and the key that signs node and client certificates.
type Authority struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// NewAuthority makes a self-signed CA named name, valid for lifetime.
func NewAuthority(name string, lifetime time.Duration) (*Authority, error) {
	if lifetime <= 0 {
		return nil, fmt.Errorf("%w: lifetime %v", ErrBadRequest, lifetime)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	tmpl, err := template(pkix.Name{CommonName: name, Organization: []string{"Ordo"}}, lifetime)
	if err != nil {
		return nil, err
	}
	tmpl.IsCA = true
	tmpl.BasicConstraintsValid = true
	tmpl.MaxPathLenZero = true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("certs: create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	return &Authority{Cert: cert, Key: key}, nil
}

// ParseAuthority reads a CA from its PEM certificate and key.
func ParseAuthority(certPEM, keyPEM []byte) (*Authority, error) {
	cert, err := parseCert(certPEM)
	if err != nil {
		return nil, err
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("certs: %q is not a CA certificate", cert.Subject.CommonName)
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return nil, err
	}
	if !publicKeysEqual(cert.PublicKey, key.Public()) {
		return nil, errors.New("certs: the CA key does not match the CA certificate")
	}
	return &Authority{Cert: cert, Key: key}, nil
}

// CertPEM is the CA certificate, PEM-encoded.
func (a *Authority) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.Cert.Raw})
}

// KeyPEM is the CA key, PEM-encoded (PKCS #8).
func (a *Authority) KeyPEM() ([]byte, error) { return keyPEM(a.Key) }

// Pair is a certificate and its private key, PEM-encoded.
type Pair struct {
	CertPEM []byte
	KeyPEM  []byte
}

// IssueNode makes the certificate of node id: it names the id (NodeURI and
// CN node-<id>), the hosts and IP addresses peers and clients reach it by,
// and serves both ends of a TLS connection (server and client auth), as a
// node both accepts and dials peer connections.
func (a *Authority) IssueNode(id uint64, hosts []string, lifetime time.Duration) (*Pair, error) {
	if id == 0 || id > config.MaxNodes {
		return nil, fmt.Errorf("%w: node id %d is not between 1 and %d", ErrBadRequest, id, config.MaxNodes)
	}
	if len(hosts) == 0 {
		return nil, fmt.Errorf("%w: a node certificate needs at least one host name or IP address", ErrBadRequest)
	}
	tmpl, err := template(pkix.Name{CommonName: nodeCN(id), Organization: []string{"Ordo"}}, lifetime)
	if err != nil {
		return nil, err
	}
	tmpl.URIs = []*url.URL{NodeURI(id)}
	if err := addHosts(tmpl, hosts); err != nil {
		return nil, err
	}
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	return a.issue(tmpl)
}

var clientName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$`)

// IssueClient makes a client certificate whose CN is name (a user or a
// program; PostgreSQL's cert authentication maps the CN to a role). It
// names no node id, so a peer port refuses it.
func (a *Authority) IssueClient(name string, lifetime time.Duration) (*Pair, error) {
	if !clientName.MatchString(name) {
		return nil, fmt.Errorf("%w: client name %q: use letters, digits and . _ @ - (at most 64)", ErrBadRequest, name)
	}
	tmpl, err := template(pkix.Name{CommonName: name, Organization: []string{"Ordo"}}, lifetime)
	if err != nil {
		return nil, err
	}
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	return a.issue(tmpl)
}

// IssueServer makes the certificate a node presents to PostgreSQL clients
// on its client port (tls: in its configuration): CN name, the hosts and
// IP addresses clients reach it by, server auth only. It names no node id
// and cannot authenticate a client, so neither a peer port nor the admin
// API accepts it.
func (a *Authority) IssueServer(name string, hosts []string, lifetime time.Duration) (*Pair, error) {
	if !clientName.MatchString(name) {
		return nil, fmt.Errorf("%w: server name %q: use letters, digits and . _ @ - (at most 64)", ErrBadRequest, name)
	}
	if len(hosts) == 0 {
		return nil, fmt.Errorf("%w: a server certificate needs at least one host name or IP address", ErrBadRequest)
	}
	tmpl, err := template(pkix.Name{CommonName: name, Organization: []string{"Ordo"}}, lifetime)
	if err != nil {
		return nil, err
	}
	if err := addHosts(tmpl, hosts); err != nil {
		return nil, err
	}
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	return a.issue(tmpl)
}

// addHosts names hosts in tmpl's DNS and IP SANs.
func addHosts(tmpl *x509.Certificate, hosts []string) error {
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		if h == "" {
			return fmt.Errorf("%w: empty host", ErrBadRequest)
		}
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return nil
}

func (a *Authority) issue(tmpl *x509.Certificate) (*Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	if tmpl.NotAfter.After(a.Cert.NotAfter) {
		tmpl.NotAfter = a.Cert.NotAfter // a certificate cannot outlive its CA
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.Cert, &key.PublicKey, a.Key)
	if err != nil {
		return nil, fmt.Errorf("certs: sign %q: %w", tmpl.Subject.CommonName, err)
	}
	kp, err := keyPEM(key)
	if err != nil {
		return nil, err
	}
	return &Pair{CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), KeyPEM: kp}, nil
}

func template(subject pkix.Name, lifetime time.Duration) (*x509.Certificate, error) {
	if lifetime <= 0 {
		return nil, fmt.Errorf("%w: lifetime %v", ErrBadRequest, lifetime)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      subject,
		NotBefore:    now.Add(-backdate),
		NotAfter:     now.Add(lifetime),
	}, nil
}

func keyPEM(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func parseCert(b []byte) (*x509.Certificate, error) {
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return nil, errors.New("certs: no PEM certificate found")
		}
		if blk.Type == "CERTIFICATE" {
			c, err := x509.ParseCertificate(blk.Bytes)
			if err != nil {
				return nil, fmt.Errorf("certs: %w", err)
			}
			return c, nil
		}
	}
}

func parseKey(b []byte) (crypto.Signer, error) {
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return nil, errors.New("certs: no PEM private key found")
		}
		var (
			k   any
			err error
		)
		switch blk.Type {
		case "PRIVATE KEY":
			k, err = x509.ParsePKCS8PrivateKey(blk.Bytes)
		case "EC PRIVATE KEY":
			k, err = x509.ParseECPrivateKey(blk.Bytes)
		case "RSA PRIVATE KEY":
			k, err = x509.ParsePKCS1PrivateKey(blk.Bytes)
		default:
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("certs: %w", err)
		}
		s, ok := k.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("certs: unsupported key type %T", k)
		}
		return s, nil
	}
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	ea, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && ea.Equal(b)
}
