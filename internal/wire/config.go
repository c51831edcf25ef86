package wire

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Config configures a Server. Zero durations and sizes take the defaults
// noted on each field.
type Config struct {
	// ListenAddr is informational (the caller creates the listener and
	// passes it to Serve); it is used in logs only.
	ListenAddr string
	// BackendAddr is host:port of the local PostgreSQL server, or the
	// path of its Unix-domain socket when BackendNetwork is "unix".
	// Required.
	BackendAddr string
	// BackendNetwork is "tcp" (the default) or "unix". Through a socket,
	// PostgreSQL's `local` lines of pg_hba.conf authenticate every
	// client.
	BackendNetwork string

	// TLSCertFile and TLSKeyFile, or TLSConfig, enable TLS termination:
	// clients that send SSLRequest get TLS with this certificate.
	TLSCertFile, TLSKeyFile string
	TLSConfig               *tls.Config
	// AllowPlaintext admits clients that do not use TLS. Without TLS
	// configured it must be true.
	AllowPlaintext bool

	// MaxConns limits concurrent client sessions (default 1000). Clients
	// beyond it get FATAL 53300 "too many connections".
	MaxConns int
	// IdleTimeout closes a session idle outside a transaction for this long
	// (0 = never).
	IdleTimeout time.Duration
	// IdleInTxTimeout closes a session idle inside a transaction block for
	// this long (0 = never).
	IdleInTxTimeout time.Duration
	// ShutdownTimeout is how long Shutdown lets sessions finish when its
	// context has no deadline (default 30s).
	ShutdownTimeout time.Duration
	// StartupTimeout bounds everything before a client is authenticated:
	// the startup packet, SSL negotiation and the TLS handshake, and the
	// authentication exchange (default 60s, PostgreSQL's
	// authentication_timeout). A client still unauthenticated then gets
	// FATAL 57014 "canceling authentication due to timeout" and is
	// disconnected.
	StartupTimeout time.Duration
	// MaxStartupConns limits the connections not yet authenticated, from
	// all sources together (default 256). A connection beyond it gets
	// FATAL 53300 at once and is closed.
	MaxStartupConns int
	// MaxStartupConnsPerSource limits the connections not yet
	// authenticated from one source IP address (default 64). A connection
	// beyond it gets FATAL 53300 at once and is closed.
	MaxStartupConnsPerSource int
	// MaxStartupPacketLen is the largest startup packet accepted, length
	// word included (default 10000, PostgreSQL's own limit; 1024 … 1 MiB).
	// A larger one gets FATAL 08P01.
	MaxStartupPacketLen int
	// DialTimeout bounds connecting to PostgreSQL (default 5s).
	DialTimeout time.Duration
	// MaxMessageLen is the largest client message body accepted (default
	// 1 GiB - 1, PostgreSQL's own limit, which is also the maximum).
	MaxMessageLen int

	// Logger receives structured logs (default slog.Default()).
	Logger *slog.Logger
	// Registerer receives the metrics (nil = not registered).
	Registerer prometheus.Registerer
}

func (c *Config) withDefaults() (Config, error) {
	cfg := *c
	switch cfg.BackendNetwork {
	case "":
		cfg.BackendNetwork = "tcp"
	case "tcp", "unix":
	default:
		return cfg, fmt.Errorf("wire: Config.BackendNetwork %q is neither tcp nor unix", cfg.BackendNetwork)
	}
	if cfg.BackendAddr == "" {
		return cfg, errors.New("wire: Config.BackendAddr is required")
	}
	if cfg.TLSConfig == nil && cfg.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCertFile, cfg.TLSKeyFile)
		if err != nil {
			return cfg, fmt.Errorf("wire: load TLS key pair: %w", err)
		}
		cfg.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	if cfg.TLSConfig == nil && !cfg.AllowPlaintext {
		return cfg, errors.New("wire: no TLS certificate configured and plaintext not allowed")
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 1000
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 30 * time.Second
	}
	if cfg.StartupTimeout <= 0 {
		cfg.StartupTimeout = 60 * time.Second
	}
	if cfg.MaxStartupConns <= 0 {
		cfg.MaxStartupConns = 256
	}
	if cfg.MaxStartupConnsPerSource <= 0 {
		cfg.MaxStartupConnsPerSource = 64
	}
	if cfg.MaxStartupPacketLen <= 0 {
		cfg.MaxStartupPacketLen = 10000
	}
	if cfg.MaxStartupPacketLen < 1024 || cfg.MaxStartupPacketLen > 1<<20 {
		return cfg, fmt.Errorf("wire: MaxStartupPacketLen %d is not between 1024 and 1 MiB", cfg.MaxStartupPacketLen)
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	if cfg.MaxMessageLen <= 0 {
		cfg.MaxMessageLen = 1<<30 - 1
	}
	if cfg.MaxMessageLen > 1<<30-1 {
		// Larger bodies are refused by PostgreSQL anyway, and keeping every
		// message far below 2^31 means no length can wrap on re-encoding.
		return cfg, fmt.Errorf("wire: MaxMessageLen %d exceeds PostgreSQL's limit of 1 GiB - 1", cfg.MaxMessageLen)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg, nil
}
