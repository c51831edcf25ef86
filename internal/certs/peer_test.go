package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// cluster is a certificate directory with a CA and node certificates.
type cluster struct {
	t   *testing.T
	dir string
}

func newCluster(t *testing.T, ids ...uint64) *cluster {
	c := &cluster{t: t, dir: t.TempDir()}
	_, err := CreateCA(Options{Dir: c.dir})
	require.NoError(t, err)
	for _, id := range ids {
		c.node(id)
	}
	return c
}

// node (re)issues node id's certificate.
func (c *cluster) node(id uint64) {
	_, err := CreateNode(Options{Dir: c.dir, Overwrite: true}, id, []string{"127.0.0.1"})
	require.NoError(c.t, err)
}

func (c *cluster) files(id uint64) Files {
	cert, key := NodeFiles(id)
	return Files{Cert: filepath.Join(c.dir, cert), Key: filepath.Join(c.dir, key), CA: filepath.Join(c.dir, CACertFile)}
}

func (c *cluster) peer(id uint64) *Peer {
	p, err := LoadPeer(c.files(id), id)
	require.NoError(c.t, err)
	return p
}

// server accepts TLS connections with cfg and reports, for each, the
// serial of the certificate the client presented (or the handshake error).
type server struct {
	ln  net.Listener
	wg  sync.WaitGroup
	got chan error
}

func serve(t *testing.T, cfg *tls.Config) *server {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &server{ln: ln, got: make(chan error, 16)}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tc := tls.Server(c, cfg)
			_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
			err = tc.Handshake()
			if err == nil {
				_, err = tc.Write([]byte{1}) // the client reads it: the server accepted it
			}
			s.got <- err
			tc.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); s.wg.Wait() })
	return s
}

// dial connects with cfg and returns the serial of the server's certificate
// (both ends must accept the other: with TLS 1.3 the server's verdict on
// the client certificate arrives after the client's handshake).
func (s *server) dial(cfg *tls.Config) (*big.Int, error, error) {
	c, err := tls.Dial("tcp", s.ln.Addr().String(), cfg)
	var serial *big.Int
	if err == nil {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		serial = c.ConnectionState().PeerCertificates[0].SerialNumber
		_, err = c.Read(make([]byte, 1))
		c.Close()
	}
	return serial, err, <-s.got
}

func TestPeerHandshakes(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the servers' cleanups
	c := newCluster(t, 1, 2)
	p1, p2 := c.peer(1), c.peer(2)
	s := serve(t, p1.ServerConfig())
	serial, cerr, serr := s.dial(p2.ClientConfig())
	require.NoError(t, cerr)
	require.NoError(t, serr)
	require.Equal(t, p1.Certificate().SerialNumber, serial)

	// a node certificate of another CA is refused by either end
	other := newCluster(t, 2)
	_, cerr, serr = s.dial(other.peer(2).ClientConfig())
	require.Error(t, cerr)
	require.Error(t, serr)
	// each end refuses it by itself: a client that trusts anything is
	// refused by the server's own check
	_, cerr, serr = s.dial(lax(other.peer(2)))
	require.Error(t, cerr)
	require.ErrorIs(t, serr, ErrUntrusted)
	// (this server asks for no client certificate: the client's own check
	// is what refuses)
	laxSrv := other.peer(2).ServerConfig()
	laxSrv.ClientAuth, laxSrv.VerifyConnection = tls.NoClientCert, nil
	so := serve(t, laxSrv)
	_, cerr, _ = so.dial(p1.ClientConfig())
	require.ErrorIs(t, cerr, ErrUntrusted)

	// a client certificate of the right CA names no node: refused
	_, err := CreateClient(Options{Dir: c.dir}, "alice")
	require.NoError(t, err)
	alice, err := tls.LoadX509KeyPair(filepath.Join(c.dir, "client-alice.crt"), filepath.Join(c.dir, "client-alice.key"))
	require.NoError(t, err)
	cfg := lax(p2)
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &alice, nil }
	_, cerr, serr = s.dial(cfg)
	require.Error(t, cerr)
	require.ErrorIs(t, serr, ErrUntrusted)
	require.ErrorContains(t, serr, "names no Ordo node id")
}

// TestLoadPeerRefusesUnusableFiles: a node does not start with a
// certificate of another node, one that does not match its key, or a CA
// that did not sign it.
func TestLoadPeerRefusesUnusableFiles(t *testing.T) {
	c := newCluster(t, 1, 2)
	_, err := LoadPeer(c.files(2), 1)
	require.ErrorIs(t, err, ErrBadMaterial)
	require.ErrorContains(t, err, "certificate of node 2, this is node 1")

	f := c.files(1)
	f.Key = c.files(2).Key
	_, err = LoadPeer(f, 1)
	require.ErrorIs(t, err, ErrBadMaterial)

	other := newCluster(t)
	f = c.files(1)
	f.CA = filepath.Join(other.dir, CACertFile)
	_, err = LoadPeer(f, 1)
	require.ErrorIs(t, err, ErrBadMaterial)

	f = c.files(1)
	f.CA = filepath.Join(c.dir, "missing.crt")
	_, err = LoadPeer(f, 1)
	require.ErrorIs(t, err, os.ErrNotExist)
}

// TestReload rotates a node's certificate, then the cluster's CA, on disk
// while a server keeps its tls.Config: new connections use the new files,
// after Reload (SIGHUP) or by Watch; files that do not load whole leave
// the previous certificate in use.
func TestReload(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) }) // after the servers' cleanups
	c := newCluster(t, 1, 2)
	p1, p2 := c.peer(1), c.peer(2)
	s := serve(t, p1.ServerConfig())
	old := p1.Certificate().SerialNumber

	// 1. A new certificate for node 1, picked up by Reload.
	c.node(1)
	changed, err := p1.Reload()
	require.NoError(t, err)
	require.True(t, changed)
	serial, cerr, serr := s.dial(p2.ClientConfig())
	require.NoError(t, cerr)
	require.NoError(t, serr)
	require.NotEqual(t, old, serial)
	require.Equal(t, p1.Certificate().SerialNumber, serial)
	changed, err = p1.Reload()
	require.NoError(t, err)
	require.False(t, changed, "nothing changed on disk")

	// 2. A half-written rotation (a key that does not match) is refused;
	// the previous certificate stays in use.
	current := p1.Certificate().SerialNumber
	k2, err := os.ReadFile(c.files(2).Key)
	require.NoError(t, err)
	k1, err := os.ReadFile(c.files(1).Key)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(c.files(1).Key, k2, 0o600))
	_, err = p1.Reload()
	require.ErrorIs(t, err, ErrBadMaterial)
	serial, cerr, serr = s.dial(p2.ClientConfig())
	require.NoError(t, cerr)
	require.NoError(t, serr)
	require.Equal(t, current, serial)
	require.NoError(t, os.WriteFile(c.files(1).Key, k1, 0o600))

	// 3. Watch notices a change on disk by itself.
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); p1.Watch(ctx, 10*time.Millisecond, log) }()
	c.node(1)
	require.Eventually(t, func() bool { return p1.Certificate().SerialNumber.Cmp(current) != 0 }, 5*time.Second, 5*time.Millisecond)
	serial, cerr, serr = s.dial(p2.ClientConfig())
	require.NoError(t, cerr)
	require.NoError(t, serr)
	require.Equal(t, p1.Certificate().SerialNumber, serial)
	require.Eventually(t, func() bool { return bytes.Contains(logs.Bytes(), []byte("reloaded")) }, 5*time.Second, 5*time.Millisecond)

	// 4. CA rotation: node 2 gets a certificate of a new CA. Node 1 refuses
	// it until its CA file holds both CAs, and accepts it from then on.
	next := newCluster(t, 2)
	p2next := next.peer(2)
	_, cerr, serr = s.dial(lax(p2next))
	require.Error(t, cerr)
	require.ErrorIs(t, serr, ErrUntrusted)
	oldCA, err := os.ReadFile(c.files(1).CA)
	require.NoError(t, err)
	newCA, err := os.ReadFile(next.files(2).CA)
	require.NoError(t, err)
	// node 2 trusts both too, so it accepts node 1's old-CA certificate
	bundle := append(append([]byte{}, oldCA...), newCA...)
	require.NoError(t, os.WriteFile(next.files(2).CA, bundle, 0o644))
	_, err = p2next.Reload()
	require.NoError(t, err)
	// Replaced whole (write, then rename), as an operator's tooling does:
	// the watcher must not catch a half-written file, which step 5 counts.
	tmp := filepath.Join(c.dir, "bundle")
	require.NoError(t, os.WriteFile(tmp, bundle, 0o644))
	require.NoError(t, os.Rename(tmp, c.files(1).CA))
	require.Eventually(t, func() bool {
		_, cerr, serr := s.dial(p2next.ClientConfig())
		return cerr == nil && serr == nil
	}, 5*time.Second, 10*time.Millisecond, "the new CA is trusted once the CA file holds it")
	// the old CA still works until it is dropped from the file
	_, cerr, serr = s.dial(p2.ClientConfig())
	require.NoError(t, cerr)
	require.NoError(t, serr)

	// 5. A broken file is logged once, not at every tick.
	broken := filepath.Join(c.dir, "broken")
	require.NoError(t, os.WriteFile(broken, []byte("not a certificate"), 0o644))
	require.NoError(t, os.Rename(broken, c.files(1).CA))
	require.Eventually(t, func() bool { return bytes.Contains(logs.Bytes(), []byte("no certificate in")) }, 5*time.Second, 5*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	require.Equal(t, 1, bytes.Count(logs.Bytes(), []byte("no certificate in")), "%s", logs.Bytes())
	cancel()
	<-done
}

// lax is p's client configuration without its check of the server.
func lax(p *Peer) *tls.Config {
	cfg := p.ClientConfig()
	cfg.VerifyConnection = nil
	return cfg
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte(nil), s.b.Bytes()...)
}
