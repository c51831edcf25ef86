package admin

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ordo-db/ordo/internal/certs"
	"github.com/ordo-db/ordo/pkg/config"
)

// TokenFileName is the file, in the node's data directory, that holds the
// token a node generates for an admin API on loopback without a
// configured token.
const TokenFileName = "admin.token"

// minToken is the shortest token accepted (config.AdminTokenMinLength).
const minToken = 16

// ErrNoToken is returned (wrapped) by a TokenSource that has no usable
// token: its file is missing, unreadable or holds fewer than 16
// characters. The API then refuses every token request.
var ErrNoToken = errors.New("admin: no usable admin token")

// TokenSource supplies the bearer token requests must carry. Token is
// called for every request and must be safe for concurrent use.
type TokenSource interface {
	Token() ([]byte, error)
}

// StaticToken is a token given in the configuration (admin_token).
type StaticToken string

// Token implements TokenSource.
func (s StaticToken) Token() ([]byte, error) {
	t := strings.TrimSpace(string(s))
	if len(t) < minToken {
		return nil, fmt.Errorf("%w: shorter than %d characters", ErrNoToken, minToken)
	}
	return []byte(t), nil
}

// TokenFile is a token read from a file (admin_token_file, or the
// generated DataDir/admin.token), read again whenever the file's size or
// modification time changes, so it can be rotated without a restart.
// While a changed file does not hold a usable token, the previous token
// stays in force (as peer certificates do).
type TokenFile struct {
	path string
	log  *slog.Logger

	mu    sync.Mutex
	stamp fileStamp
	token []byte
	err   error
}

type fileStamp struct {
	size int64
	mod  time.Time
}

// NewTokenFile reads path and returns its TokenSource; it fails if the
// file holds no usable token now.
func NewTokenFile(path string, log *slog.Logger) (*TokenFile, error) {
	if log == nil {
		log = slog.Default()
	}
	f := &TokenFile{path: path, log: log}
	if _, err := f.Token(); err != nil {
		return nil, err
	}
	return f, nil
}

// Token implements TokenSource.
func (f *TokenFile) Token() ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fi, err := os.Stat(f.path)
	if err != nil {
		return f.keep(fmt.Errorf("%w: %v", ErrNoToken, err))
	}
	stamp := fileStamp{fi.Size(), fi.ModTime()}
	if f.token != nil && stamp == f.stamp {
		return f.token, nil
	}
	b, err := os.ReadFile(f.path)
	if err != nil {
		return f.keep(fmt.Errorf("%w: %v", ErrNoToken, err))
	}
	t := bytes.TrimSpace(b)
	if len(t) < minToken {
		return f.keep(fmt.Errorf("%w: %s holds fewer than %d characters", ErrNoToken, f.path, minToken))
	}
	if f.token != nil && !bytes.Equal(t, f.token) {
		f.log.Info("admin token file changed: reloaded", "file", f.path)
	}
	f.stamp, f.token, f.err = stamp, t, nil
	return f.token, nil
}

// keep returns the previous token, if any, after a failed read; each new
// failure is logged once.
func (f *TokenFile) keep(err error) ([]byte, error) {
	if f.err == nil || f.err.Error() != err.Error() {
		if f.token != nil {
			f.log.Error("admin token file unusable; keeping the previous token", "err", err)
		}
	}
	f.err = err
	if f.token != nil {
		return f.token, nil
	}
	return nil, err
}

// LoadOrCreateToken makes sure path holds a token: it keeps an existing
// file and otherwise writes 32 random bytes, hex-encoded, with mode 0600
// (created reports that it did). It is how a node on loopback without a
// configured token gets one: whoever can read the node's data directory
// can administer it, nobody else.
func LoadOrCreateToken(path string) (created bool, err error) {
	if _, err := os.Stat(path); err == nil {
		return false, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("admin: %w", err)
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return false, fmt.Errorf("admin: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return false, fmt.Errorf("admin: %w", err)
	}
	if err := writeNew(path, []byte(hex.EncodeToString(raw[:])+"\n")); err != nil {
		return false, fmt.Errorf("admin: write %s: %w", path, err)
	}
	return true, nil
}

// writeNew writes data to path, mode 0600, whole or not at all, and never
// replaces an existing file: it is written under a temporary name, synced,
// then hard-linked to path (which fails if path exists).
func writeNew(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".admin-token-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	err = tmp.Chmod(0o600)
	if err == nil {
		_, err = tmp.Write(data)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Link(tmp.Name(), path)
}

// Auth says how requests authenticate: with TLS set, by a client
// certificate verified at the handshake (TLS must require one); otherwise
// by "Authorization: Bearer <token>" matching Token. One of the two must
// be set.
type Auth struct {
	TLS   *tls.Config
	Token TokenSource
}

func (a Auth) validate() error {
	if (a.TLS == nil) == (a.Token == nil) {
		return errors.New("admin: exactly one of Auth.TLS and Auth.Token must be set")
	}
	if a.TLS != nil && a.TLS.ClientAuth != tls.RequireAnyClientCert && a.TLS.ClientAuth != tls.RequireAndVerifyClientCert {
		return errors.New("admin: Auth.TLS must require client certificates")
	}
	return nil
}

// errUnauthenticated is why a request was refused.
var errUnauthenticated = errors.New("unauthenticated")

// identify returns who sent r (for the log), or errUnauthenticated.
func (a Auth) identify(r *http.Request) (string, error) {
	if a.TLS != nil {
		// The handshake verified the chain (Auth.TLS requires a
		// certificate); a request on a plaintext connection has none.
		if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
			return "", fmt.Errorf("%w: a client certificate of the cluster's CA is required", errUnauthenticated)
		}
		return "certificate " + r.TLS.PeerCertificates[0].Subject.CommonName, nil
	}
	want, err := a.Token.Token()
	if err != nil {
		return "", fmt.Errorf("%w: %v", errUnauthenticated, err)
	}
	scheme, got, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", fmt.Errorf("%w: no bearer token (Authorization: Bearer <token>)", errUnauthenticated)
	}
	// Compare digests: equal lengths, and no timing leak of the length.
	g, w := sha256.Sum256([]byte(strings.TrimSpace(got))), sha256.Sum256(want)
	if subtle.ConstantTimeCompare(g[:], w[:]) != 1 {
		return "", fmt.Errorf("%w: wrong token", errUnauthenticated)
	}
	return "token", nil
}

// every lets an action happen at most once per interval (for logging
// refusals anyone can provoke).
type every struct {
	interval time.Duration
	last     atomic.Int64
}

func (e *every) allow() bool {
	now := time.Now().UnixNano()
	last := e.last.Load()
	return now-last >= int64(e.interval) && e.last.CompareAndSwap(last, now)
}

// NodeAuth is how a node's admin API authenticates, from its
// configuration: with peer TLS (peer non-nil), client certificates of the
// peer CA; otherwise admin_token, or admin_token_file, or on loopback the
// token in DataDir/admin.token, generated on first start. tokenFile is the
// file that holds the token ("" with TLS or admin_token), for the node to
// say where it is. The configuration must have been validated
// (config.ErrAnonymousAdmin); an empty AdminListen is the default, on
// loopback.
func NodeAuth(cfg *config.Node, peer *certs.Peer, log *slog.Logger) (a Auth, tokenFile string, err error) {
	if log == nil {
		log = slog.Default()
	}
	switch {
	case peer != nil:
		return Auth{TLS: peer.AdminServerConfig()}, "", nil
	case cfg.AdminToken != "":
		if _, err := StaticToken(cfg.AdminToken).Token(); err != nil {
			return Auth{}, "", fmt.Errorf("admin_token: %w", err)
		}
		return Auth{Token: StaticToken(cfg.AdminToken)}, "", nil
	case cfg.AdminTokenFile != "":
		f, err := NewTokenFile(cfg.AdminTokenFile, log)
		if err != nil {
			return Auth{}, "", fmt.Errorf("admin_token_file: %w", err)
		}
		return Auth{Token: f}, cfg.AdminTokenFile, nil
	case cfg.AdminListen != "" && !config.Loopback(cfg.AdminListen):
		return Auth{}, "", fmt.Errorf("%w (admin_listen is %s)", config.ErrAnonymousAdmin, cfg.AdminListen)
	}
	path := filepath.Join(cfg.DataDir, TokenFileName)
	created, err := LoadOrCreateToken(path)
	if err != nil {
		return Auth{}, "", err
	}
	f, err := NewTokenFile(path, log)
	if err != nil {
		return Auth{}, "", fmt.Errorf("%w (delete %s and a new token is generated at the next start)", err, path)
	}
	if created {
		log.Info("admin token generated", "file", path)
	}
	return Auth{Token: f}, path, nil
}
