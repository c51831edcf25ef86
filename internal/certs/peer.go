package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Files are the three files of a node's peer TLS (config.PeerTLS).
type Files struct {
	Cert, Key, CA string
}

// ErrUntrusted is returned (wrapped) by the handshake checks of Peer's
// ServerConfig and ClientConfig when the other end's certificate does not
// chain to the current CA pool, is not valid for its side of the
// connection (expired, wrong key usage), or names no node id.
var ErrUntrusted = errors.New("certs: peer certificate not trusted")

// ErrBadMaterial is returned (wrapped) by LoadPeer, LoadServerCert and
// their Reload when the files do not make a usable whole: a certificate
// that does not match its key, has expired, cannot serve its side of a
// connection, or (peer TLS) is not signed by a CA of the CA file or names
// another node than this one.
var ErrBadMaterial = errors.New("certs: unusable TLS files")

// Peer is a node's peer TLS material, kept current: its own certificate and
// key, and the pool of CAs peers' certificates must chain to. The tls.Configs
// it returns read the current material at every handshake, so a reload
// applies to new connections at once (established ones keep theirs).
type Peer struct {
	id    uint64
	files Files
	w     watched[*material]
}

type material struct {
	cert  *tls.Certificate
	leaf  *x509.Certificate
	inter *x509.CertPool // intermediates sent with our certificate
	pool  *x509.CertPool
}

// LoadPeer reads node id's peer TLS files and checks that they make a
// usable whole (see ErrBadMaterial).
func LoadPeer(f Files, id uint64) (*Peer, error) {
	p := &Peer{id: id, files: f}
	p.w = watched[*material]{what: "peer TLS", paths: []string{f.Cert, f.Key, f.CA}, load: p.load}
	if err := p.w.init(); err != nil {
		return nil, err
	}
	return p, nil
}

// Reload reads the files again and, if they changed and load whole, makes
// them current: changed reports whether they did. On an error the previous
// material stays in use.
func (p *Peer) Reload() (changed bool, err error) {
	changed, _, err = p.w.reload()
	return changed, err
}

func (p *Peer) load(raw [][]byte) (*material, error) {
	cert, err := tls.X509KeyPair(raw[0], raw[1])
	if err != nil {
		return nil, fmt.Errorf("%w: %s and %s: %v", ErrBadMaterial, p.files.Cert, p.files.Key, err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadMaterial, p.files.Cert, err)
	}
	cert.Leaf = leaf
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(raw[2]) {
		return nil, fmt.Errorf("%w: no certificate in %s", ErrBadMaterial, p.files.CA)
	}
	inter := x509.NewCertPool()
	for _, der := range cert.Certificate[1:] {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrBadMaterial, p.files.Cert, err)
		}
		inter.AddCert(c)
	}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			return nil, fmt.Errorf("%w: %s against %s: %v", ErrBadMaterial, p.files.Cert, p.files.CA, err)
		}
	}
	id, err := NodeID(leaf)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadMaterial, p.files.Cert, err)
	}
	if id != p.id {
		return nil, fmt.Errorf("%w: %s is the certificate of node %d, this is node %d", ErrBadMaterial, p.files.Cert, id, p.id)
	}
	return &material{cert: &cert, leaf: leaf, inter: inter, pool: pool}, nil
}

// Certificate is the node's current certificate.
func (p *Peer) Certificate() *x509.Certificate { return p.w.get().leaf }

// ServerConfig is the TLS configuration for accepting peer connections:
// TLS 1.3, the current certificate, and a client certificate required and
// verified against the current CA pool, for client auth, naming a node id.
func (p *Peer) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return p.w.get().cert, nil
		},
		// Verified in VerifyConnection against the pool current at the
		// handshake, not a pool fixed in this Config.
		ClientAuth: tls.RequireAnyClientCert,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return p.verify(cs.PeerCertificates, x509.ExtKeyUsageClientAuth)
		},
	}
}

// ClientConfig is the TLS configuration for dialing peers: TLS 1.3, the
// current certificate, and the server's certificate verified against the
// current CA pool, for server auth, naming a node id. Which node id it
// must name is the dialer's check (the transport knows whom it dialed);
// host names are not checked: a peer is identified by its node id.
func (p *Peer) ClientConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return p.w.get().cert, nil
		},
		// The standard verification is replaced, not skipped:
		// VerifyConnection verifies the chain against the current pool.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return p.verify(cs.PeerCertificates, x509.ExtKeyUsageServerAuth)
		},
	}
}

func (p *Peer) verify(chain []*x509.Certificate, usage x509.ExtKeyUsage) error {
	leaf, err := verifyChain(p.w.get().pool, chain, usage)
	if err != nil {
		return err
	}
	if _, err := NodeID(leaf); err != nil {
		return fmt.Errorf("%w: %v", ErrUntrusted, err)
	}
	return nil
}

// verifyChain verifies chain (leaf first, as presented) against pool for
// usage and returns the leaf.
func verifyChain(pool *x509.CertPool, chain []*x509.Certificate, usage x509.ExtKeyUsage) (*x509.Certificate, error) {
	if len(chain) == 0 {
		return nil, fmt.Errorf("%w: no certificate presented", ErrUntrusted)
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	leaf := chain[0]
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return nil, fmt.Errorf("%w: %q (issuer %q): %v", ErrUntrusted, leaf.Subject.CommonName, leaf.Issuer.CommonName, err)
	}
	return leaf, nil
}

// Watch reloads the files every interval until ctx ends, and logs each
// change and each new failure (the previous material stays in use until
// the files load whole).
func (p *Peer) Watch(ctx context.Context, every time.Duration, log *slog.Logger) {
	p.w.watch(ctx, every, func() {
		c := p.Certificate()
		log.Info("peer TLS files changed: reloaded", "cert", p.files.Cert, "serial", c.SerialNumber.Text(16), "not_after", c.NotAfter)
	}, func(err error) {
		log.Error("peer TLS files changed but do not load; keeping the previous certificates", "err", err)
	})
}
