package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestServerCert: the client port's certificate is served at every
// handshake as it is on disk: a renewed one is picked up by Reload and by
// Watch; files that do not load (a key of another certificate, a node's
// client-only certificate) are refused and the previous certificate
// stays.
func TestServerCert(t *testing.T) {
	dir := t.TempDir()
	o := Options{Dir: dir}
	_, err := CreateCA(o)
	require.NoError(t, err)
	_, err = CreateServer(o, "db", []string{"127.0.0.1"})
	require.NoError(t, err)
	certFile, keyFile := filepath.Join(dir, "server-db.crt"), filepath.Join(dir, "server-db.key")
	s, err := LoadServerCert(certFile, keyFile)
	require.NoError(t, err)

	ln, err := tls.Listen("tcp", "127.0.0.1:0", s.TLSConfig())
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	ca, err := os.ReadFile(filepath.Join(dir, CACertFile))
	require.NoError(t, err)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(ca))
	served := func() string {
		c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
		require.NoError(t, err)
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	first := served()
	require.Equal(t, s.Certificate().SerialNumber.String(), first)

	// renewed on disk: Reload
	_, err = CreateServer(Options{Dir: dir, Overwrite: true}, "db", []string{"127.0.0.1"})
	require.NoError(t, err)
	changed, err := s.Reload()
	require.NoError(t, err)
	require.True(t, changed)
	second := served()
	require.NotEqual(t, first, second)

	// a key that does not match, then a client-only certificate: refused,
	// the previous certificate stays
	key, err := os.ReadFile(keyFile)
	require.NoError(t, err)
	_, err = CreateClient(o, "alice")
	require.NoError(t, err)
	other, err := os.ReadFile(filepath.Join(dir, "client-alice.key"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(keyFile, other, 0o600))
	_, err = s.Reload()
	require.ErrorIs(t, err, ErrBadMaterial)
	_, err = LoadServerCert(filepath.Join(dir, "client-alice.crt"), filepath.Join(dir, "client-alice.key"))
	require.ErrorIs(t, err, ErrBadMaterial)
	require.Equal(t, second, served())
	require.NoError(t, os.WriteFile(keyFile, key, 0o600))

	// Watch notices a renewal by itself
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Watch(ctx, 10*time.Millisecond, slog.New(slog.NewTextHandler(&logs, nil)))
	}()
	_, err = CreateServer(Options{Dir: dir, Overwrite: true}, "db", []string{"127.0.0.1"})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return served() != second }, 5*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return bytes.Contains(logs.Bytes(), []byte("client TLS files changed: reloaded")) }, 5*time.Second, 10*time.Millisecond)
	cancel()
	<-done
}
