package certs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// File names in a certificate directory.
const (
	CACertFile = "ca.crt"
	CAKeyFile  = "ca.key"
)

// NodeFiles are the names of node id's certificate and key files.
func NodeFiles(id uint64) (cert, key string) {
	n := "node-" + strconv.FormatUint(id, 10)
	return n + ".crt", n + ".key"
}

// ClientFiles are the names of client name's certificate and key files.
func ClientFiles(name string) (cert, key string) {
	return "client-" + name + ".crt", "client-" + name + ".key"
}

// ServerFiles are the names of the files of server certificate name.
func ServerFiles(name string) (cert, key string) {
	return "server-" + name + ".crt", "server-" + name + ".key"
}

// ErrExists is returned (wrapped, with the file's name) by CreateCA,
// CreateNode, CreateClient and CreateServer when a file they would write exists and
// Options.Overwrite is not set. Nothing is written then.
var ErrExists = errors.New("certs: file exists (pass --overwrite to replace it)")

// Options says where the Create functions read the CA and write files.
type Options struct {
	// Dir holds the certificates: ca.crt is read from it (CreateCA writes
	// it there) and new certificates and keys are written into it. It is
	// created, mode 0700, if missing.
	Dir string
	// CAKey is the CA's key file (default Dir/ca.key). It signs every
	// certificate of the cluster: keep it off the nodes.
	CAKey string
	// Lifetime of the new certificate (default CALifetime, NodeLifetime or
	// ClientLifetime).
	Lifetime time.Duration
	// Overwrite replaces existing files instead of refusing with ErrExists.
	Overwrite bool
}

func (o Options) caKey() string {
	if o.CAKey != "" {
		return o.CAKey
	}
	return filepath.Join(o.Dir, CAKeyFile)
}

func (o Options) lifetime(def time.Duration) time.Duration {
	if o.Lifetime != 0 {
		return o.Lifetime
	}
	return def
}

// CreateCA makes a new CA and writes Dir/ca.crt and its key (Options.CAKey)
// and returns the paths written.
func CreateCA(o Options) ([]string, error) {
	a, err := NewAuthority("Ordo CA", o.lifetime(CALifetime))
	if err != nil {
		return nil, err
	}
	key, err := a.KeyPEM()
	if err != nil {
		return nil, err
	}
	return writeFiles(o.Overwrite,
		file{filepath.Join(o.Dir, CACertFile), a.CertPEM(), 0o644},
		file{o.caKey(), key, 0o600})
}

// CreateNode signs a certificate for node id, reachable at hosts, with the
// CA of Options, and writes Dir/node-<id>.crt and .key.
func CreateNode(o Options, id uint64, hosts []string) ([]string, error) {
	a, err := loadAuthority(o)
	if err != nil {
		return nil, err
	}
	p, err := a.IssueNode(id, hosts, o.lifetime(NodeLifetime))
	if err != nil {
		return nil, err
	}
	cert, key := NodeFiles(id)
	return writePair(o, p, cert, key)
}

// CreateClient signs a client certificate for name with the CA of Options
// and writes Dir/client-<name>.crt and .key.
func CreateClient(o Options, name string) ([]string, error) {
	a, err := loadAuthority(o)
	if err != nil {
		return nil, err
	}
	p, err := a.IssueClient(name, o.lifetime(ClientLifetime))
	if err != nil {
		return nil, err
	}
	cert, key := ClientFiles(name)
	return writePair(o, p, cert, key)
}

func loadAuthority(o Options) (*Authority, error) {
	certPEM, err := os.ReadFile(filepath.Join(o.Dir, CACertFile))
	if err != nil {
		return nil, fmt.Errorf("certs: the CA certificate: %w (create it with `ordo cert create-ca`)", err)
	}
	keyPEM, err := os.ReadFile(o.caKey())
	if err != nil {
		return nil, fmt.Errorf("certs: the CA key: %w", err)
	}
	return ParseAuthority(certPEM, keyPEM)
}

func writePair(o Options, p *Pair, cert, key string) ([]string, error) {
	return writeFiles(o.Overwrite,
		file{filepath.Join(o.Dir, cert), p.CertPEM, 0o644},
		file{filepath.Join(o.Dir, key), p.KeyPEM, 0o600})
}

type file struct {
	path string
	data []byte
	mode fs.FileMode
}

// writeFiles writes every file or none: it first checks that none exists
// (unless overwrite). Each file is written whole under a temporary name
// with its final mode, then renamed, so a node watching it never reads
// half a file.
func writeFiles(overwrite bool, files ...file) ([]string, error) {
	if !overwrite {
		for _, f := range files {
			if _, err := os.Lstat(f.path); err == nil {
				return nil, fmt.Errorf("%w: %s", ErrExists, f.path)
			} else if !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("certs: %w", err)
			}
		}
	}
	var written []string
	for _, f := range files {
		if err := writeFile(f); err != nil {
			return written, err
		}
		written = append(written, f.path)
	}
	return written, nil
}

func writeFile(f file) error {
	dir := filepath.Dir(f.path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(f.path)+".*")
	if err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename: no such file
	err = tmp.Chmod(f.mode)
	if err == nil {
		_, err = tmp.Write(f.data)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), f.path)
	}
	if err != nil {
		return fmt.Errorf("certs: write %s: %w", f.path, err)
	}
	return nil
}

// CreateServer signs a server certificate for the client port, CN name,
// reachable at hosts, with the CA of Options, and writes
// Dir/server-<name>.crt and .key.
func CreateServer(o Options, name string, hosts []string) ([]string, error) {
	a, err := loadAuthority(o)
	if err != nil {
		return nil, err
	}
	p, err := a.IssueServer(name, hosts, o.lifetime(ServerLifetime))
	if err != nil {
		return nil, err
	}
	cert, key := ServerFiles(name)
	return writePair(o, p, cert, key)
}
