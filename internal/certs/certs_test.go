package certs

import (
	"crypto/x509"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	c, err := parseCert(b)
	require.NoError(t, err)
	return c
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	st, err := os.Stat(path)
	require.NoError(t, err)
	return st.Mode().Perm()
}

// TestCreateFiles makes a CA, a node and a client certificate as `ordo
// cert` does and checks what a node relies on: the chain verifies, the node
// certificate names its id and hosts and serves both ends, the client
// certificate names no node, keys are private, lifetimes are as documented.
func TestCreateFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	o := Options{Dir: dir}
	written, err := CreateCA(o)
	require.NoError(t, err)
	require.Equal(t, []string{filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")}, written)
	require.Equal(t, os.FileMode(0o644), mode(t, filepath.Join(dir, "ca.crt")))
	require.Equal(t, os.FileMode(0o600), mode(t, filepath.Join(dir, "ca.key")))
	st, err := os.Stat(dir)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), st.Mode().Perm())

	ca := readCert(t, filepath.Join(dir, "ca.crt"))
	require.True(t, ca.IsCA)
	require.WithinDuration(t, time.Now().Add(CALifetime), ca.NotAfter, time.Minute)
	roots := x509.NewCertPool()
	roots.AddCert(ca)

	_, err = CreateNode(o, 3, []string{"10.0.0.3", "node3.example", "localhost"})
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o644), mode(t, filepath.Join(dir, "node-3.crt")))
	require.Equal(t, os.FileMode(0o600), mode(t, filepath.Join(dir, "node-3.key")))
	node := readCert(t, filepath.Join(dir, "node-3.crt"))
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		_, err := node.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}})
		require.NoError(t, err, "usage %v", usage)
	}
	require.NoError(t, node.VerifyHostname("node3.example"))
	require.NoError(t, node.VerifyHostname("10.0.0.3"))
	id, err := NodeID(node)
	require.NoError(t, err)
	require.Equal(t, uint64(3), id)
	require.Equal(t, "node-3", node.Subject.CommonName)
	require.Equal(t, "ordo://node/3", node.URIs[0].String())
	require.WithinDuration(t, time.Now().Add(NodeLifetime), node.NotAfter, time.Minute)
	require.True(t, node.NotBefore.Before(time.Now().Add(-30*time.Minute)), "backdated for clock skew")

	_, err = CreateClient(o, "alice")
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), mode(t, filepath.Join(dir, "client-alice.key")))
	client := readCert(t, filepath.Join(dir, "client-alice.crt"))
	_, err = client.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	require.NoError(t, err)
	_, err = client.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	require.Error(t, err, "a client certificate cannot serve")
	_, err = NodeID(client)
	require.ErrorIs(t, err, ErrNoNodeID)
	require.Equal(t, "alice", client.Subject.CommonName)

	_, err = CreateServer(o, "db", []string{"db.example", "10.0.0.9"})
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), mode(t, filepath.Join(dir, "server-db.key")))
	server := readCert(t, filepath.Join(dir, "server-db.crt"))
	_, err = server.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	require.NoError(t, err)
	require.NoError(t, server.VerifyHostname("db.example"))
	require.NoError(t, server.VerifyHostname("10.0.0.9"))
	_, err = server.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	require.Error(t, err, "a server certificate cannot authenticate a client")
	_, err = NodeID(server)
	require.ErrorIs(t, err, ErrNoNodeID)
	_, err = CreateServer(o, "nohost", nil)
	require.ErrorIs(t, err, ErrBadRequest)
}

// TestCreateRefusesToOverwrite: existing files are kept (all of them:
// nothing is written) unless Overwrite is set.
func TestCreateRefusesToOverwrite(t *testing.T) {
	dir := t.TempDir()
	o := Options{Dir: dir}
	_, err := CreateCA(o)
	require.NoError(t, err)
	caBefore, _ := os.ReadFile(filepath.Join(dir, "ca.crt"))
	_, err = CreateCA(o)
	require.ErrorIs(t, err, ErrExists)
	caAfter, _ := os.ReadFile(filepath.Join(dir, "ca.crt"))
	require.Equal(t, caBefore, caAfter)

	_, err = CreateNode(o, 1, []string{"127.0.0.1"})
	require.NoError(t, err)
	first := readCert(t, filepath.Join(dir, "node-1.crt"))
	// only the key is in the way: the certificate is not written either
	require.NoError(t, os.Remove(filepath.Join(dir, "node-1.crt")))
	_, err = CreateNode(o, 1, []string{"127.0.0.1"})
	require.ErrorIs(t, err, ErrExists)
	require.NoFileExists(t, filepath.Join(dir, "node-1.crt"))

	o.Overwrite = true
	_, err = CreateNode(o, 1, []string{"127.0.0.1"})
	require.NoError(t, err)
	second := readCert(t, filepath.Join(dir, "node-1.crt"))
	require.NotEqual(t, first.SerialNumber, second.SerialNumber)
	require.Equal(t, os.FileMode(0o600), mode(t, filepath.Join(dir, "node-1.key")))
	left, _ := filepath.Glob(filepath.Join(dir, ".*"))
	require.Empty(t, left, "temporary files left behind")
}

// TestCAKeyElsewhere: the CA key can live outside the certificate
// directory, and a node certificate needs it.
func TestCAKeyElsewhere(t *testing.T) {
	dir, safe := t.TempDir(), t.TempDir()
	o := Options{Dir: dir, CAKey: filepath.Join(safe, "ca.key"), Lifetime: 48 * time.Hour}
	_, err := CreateCA(o)
	require.NoError(t, err)
	require.NoFileExists(t, filepath.Join(dir, "ca.key"))
	_, err = CreateNode(Options{Dir: dir}, 2, []string{"h"})
	require.ErrorIs(t, err, os.ErrNotExist)
	_, err = CreateNode(o, 2, []string{"h"})
	require.NoError(t, err)
	// a node certificate never outlives its CA
	ca, node := readCert(t, filepath.Join(dir, "ca.crt")), readCert(t, filepath.Join(dir, "node-2.crt"))
	require.False(t, node.NotAfter.After(ca.NotAfter))
}

func TestIssueRefusesBadRequests(t *testing.T) {
	a, err := NewAuthority("test", time.Hour)
	require.NoError(t, err)
	for _, c := range []struct {
		id    uint64
		hosts []string
	}{{0, []string{"h"}}, {65, []string{"h"}}, {1, nil}, {1, []string{" "}}} {
		_, err := a.IssueNode(c.id, c.hosts, time.Hour)
		require.ErrorIs(t, err, ErrBadRequest, "%+v", c)
	}
	for _, name := range []string{"", "../x", "a b", "-x"} {
		_, err := a.IssueClient(name, time.Hour)
		require.ErrorIs(t, err, ErrBadRequest, "%q", name)
	}
	_, err = a.IssueNode(1, []string{"h"}, 0)
	require.ErrorIs(t, err, ErrBadRequest)
}

func TestNodeID(t *testing.T) {
	a, err := NewAuthority("test", time.Hour)
	require.NoError(t, err)
	p, err := a.IssueNode(7, []string{"h"}, time.Hour)
	require.NoError(t, err)
	c, err := parseCert(p.CertPEM)
	require.NoError(t, err)

	for name, mutate := range map[string]func(c *x509.Certificate){
		"no URI":       func(c *x509.Certificate) { c.URIs = nil },
		"CN disagrees": func(c *x509.Certificate) { c.Subject.CommonName = "node-8" },
		"two ids":      func(c *x509.Certificate) { c.URIs = append(c.URIs, NodeURI(8)) },
		"id 0":         func(c *x509.Certificate) { c.URIs[0] = NodeURI(0) },
		"id too large": func(c *x509.Certificate) { c.URIs[0] = NodeURI(1000) },
	} {
		cp := *c
		cp.URIs = append(cp.URIs[:0:0], c.URIs...)
		mutate(&cp)
		_, err := NodeID(&cp)
		require.ErrorIs(t, err, ErrNoNodeID, name)
	}
	// another URI beside it is fine
	cp := *c
	cp.URIs = append([]*url.URL{{Scheme: "spiffe", Host: "cluster.local", Path: "/ns/db/sa/ordo"}}, c.URIs...)
	id, err := NodeID(&cp)
	require.NoError(t, err)
	require.Equal(t, uint64(7), id)
}
