package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"slices"
	"time"
)

// ServerCert is the certificate a node presents to PostgreSQL clients on
// its client port (config.TLS), read from its certificate and key files and
// kept current like Peer's: reloaded when the files change (Watch) or when
// asked (Reload, on SIGHUP). The tls.Config it returns reads the current
// certificate at every handshake.
type ServerCert struct {
	certFile, keyFile string
	w                 watched[*tls.Certificate]
}

// LoadServerCert reads a server certificate and its key and checks that
// they make a usable whole (see ErrBadMaterial).
func LoadServerCert(certFile, keyFile string) (*ServerCert, error) {
	s := &ServerCert{certFile: certFile, keyFile: keyFile}
	s.w = watched[*tls.Certificate]{what: "client TLS", paths: []string{certFile, keyFile}, load: s.load}
	if err := s.w.init(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *ServerCert) load(raw [][]byte) (*tls.Certificate, error) {
	cert, err := tls.X509KeyPair(raw[0], raw[1])
	if err != nil {
		return nil, fmt.Errorf("%w: %s and %s: %v", ErrBadMaterial, s.certFile, s.keyFile, err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadMaterial, s.certFile, err)
	}
	cert.Leaf = leaf
	if now := time.Now(); now.After(leaf.NotAfter) || now.Before(leaf.NotBefore) {
		return nil, fmt.Errorf("%w: %s is valid from %s to %s, not now", ErrBadMaterial, s.certFile, leaf.NotBefore, leaf.NotAfter)
	}
	if len(leaf.ExtKeyUsage) > 0 && !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageServerAuth) && !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageAny) {
		return nil, fmt.Errorf("%w: %s cannot serve TLS (no server auth key usage)", ErrBadMaterial, s.certFile)
	}
	return &cert, nil
}

// Reload reads the files again and, if they changed and load whole, makes
// them current: changed reports whether they did. On an error the previous
// certificate stays in use.
func (s *ServerCert) Reload() (changed bool, err error) {
	changed, _, err = s.w.reload()
	return changed, err
}

// Certificate is the current certificate.
func (s *ServerCert) Certificate() *x509.Certificate { return s.w.get().Leaf }

// TLSConfig is the TLS configuration of the client port: TLS 1.2 or newer,
// the current certificate.
func (s *ServerCert) TLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return s.w.get(), nil
		},
	}
}

// Watch reloads the files every interval until ctx ends, and logs each
// change and each new failure (the previous certificate stays in use until
// the files load whole).
func (s *ServerCert) Watch(ctx context.Context, every time.Duration, log *slog.Logger) {
	s.w.watch(ctx, every, func() {
		c := s.Certificate()
		log.Info("client TLS files changed: reloaded", "cert", s.certFile, "serial", c.SerialNumber.Text(16), "not_after", c.NotAfter)
	}, func(err error) {
		log.Error("client TLS files changed but do not load; keeping the previous certificate", "err", err)
	})
}
