package certs

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// AdminServerConfig is the TLS configuration of the node's admin API:
// TLS 1.3, the node's current certificate, and a client certificate
// required and verified against the current CA pool for client auth.
// Unlike ServerConfig it does not ask the client's certificate to name a
// node id: client certificates (IssueClient, `ordo cert create-client`)
// are what operators and ordoctl present; node certificates, which carry
// client auth too, are accepted as well (their holder can already speak
// Raft as that node).
func (p *Peer) AdminServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return p.w.get().cert, nil
		},
		ClientAuth: tls.RequireAnyClientCert,
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, err := verifyChain(p.w.get().pool, cs.PeerCertificates, x509.ExtKeyUsageClientAuth)
			return err
		},
	}
}

// AdminClientConfig is the TLS configuration ordoctl dials a node's admin
// API with: the CA file's certificates as roots, the server's certificate
// verified against them for server auth and required to name a node id
// (host names are not checked: a node is identified by its node id, as
// between peers), and, when certFile is set, the client certificate
// presented.
func AdminClientConfig(certFile, keyFile, caFile string) (*tls.Config, error) {
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%w: no certificate in %s", ErrBadMaterial, caFile)
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS13,
		// The standard verification is replaced, not skipped:
		// VerifyConnection verifies the chain and the node id.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			leaf, err := verifyChain(pool, cs.PeerCertificates, x509.ExtKeyUsageServerAuth)
			if err != nil {
				return err
			}
			if _, err := NodeID(leaf); err != nil {
				return fmt.Errorf("%w: %v", ErrUntrusted, err)
			}
			return nil
		},
	}
	if certFile != "" || keyFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: %s and %s: %v", ErrBadMaterial, certFile, keyFile, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
