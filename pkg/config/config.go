// Package config holds the public configuration types of an Ordo node, as
// read from `ordo start --config node.yaml`, and their validation. It must
// never import Ordo's internal packages: other programs (deployment tools,
// operators) import it.
package config

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// MaxAutocommitRetries bounds autocommit_retries (and a session's SET
// ordo.autocommit_retries).
const MaxAutocommitRetries = 100

// Node is one node's configuration.
type Node struct {
	// ID is the node's id in the cluster, 1…MaxNodes, never reused.
	ID uint32 `yaml:"id"`
	// Listen is the address clients connect to (PostgreSQL protocol).
	Listen string `yaml:"listen"`
	// PeerListen is the address other nodes reach this one on (Raft over gRPC).
	PeerListen string `yaml:"peer_listen"`
	// MetricsListen serves /metrics and /readyz, unauthenticated (empty:
	// neither is served).
	MetricsListen string `yaml:"metrics_listen"`
	// AdminListen is the address of the node's admin API, which ordoctl
	// speaks to (docs/admin.md). Default 127.0.0.1:0: a free loopback
	// port, chosen at each start. Whatever it is, the node writes the
	// address it listens on into DataDir/admin.addr. It is always
	// authenticated: by client certificates of the peer CA when PeerTLS is
	// set, otherwise by a bearer token (AdminToken, AdminTokenFile, or on
	// a loopback address a token the node generates into
	// DataDir/admin.token).
	AdminListen string `yaml:"admin_listen"`
	// AdminToken is the bearer token of the admin API, at least 16
	// characters (without PeerTLS only). Prefer AdminTokenFile: this file
	// is then a secret.
	AdminToken string `yaml:"admin_token"`
	// AdminTokenFile holds the bearer token of the admin API (leading and
	// trailing white space ignored); the node reads it again when it
	// changes.
	AdminTokenFile string `yaml:"admin_token_file"`
	// Postgres is the connection string of the node's own PostgreSQL
	// server, for a superuser (replication slots, prepared transactions
	// and session_replication_role need one).
	Postgres string `yaml:"postgres"`
	// DataDir holds the node's Raft log and snapshots.
	DataDir string `yaml:"data_dir"`
	// Peers maps every member's id to its peer address, this node included.
	Peers map[uint32]string `yaml:"peers"`
	// Witnesses are the ids among the bootstrap peers that are witnesses:
	// Raft voters without PostgreSQL (run with 'ordo witness'), which let
	// two data nodes survive the loss of either (docs/membership.md). The
	// same list on every node. A node whose own id is listed is a witness
	// and needs no postgres or listen.
	Witnesses []uint32 `yaml:"witnesses"`
	// Protocol is the termination protocol: "dbsm" (serializable),
	// "dbsm-si" (snapshot isolation), "dbsm-rc" (read committed, no lost
	// updates across nodes), "pgr" (Postgres-R: serializable, read sets
	// certified at the origin only) or "cons" (serializable by conflict
	// classes, no certification). Every node must use the same.
	Protocol string `yaml:"protocol"`
	// TLS for clients (optional).
	TLS TLS `yaml:"tls"`
	// PeerTLS is mutual TLS for Raft traffic between nodes. Required
	// when PeerListen is not a loopback address, unless Insecure.
	PeerTLS PeerTLS `yaml:"peer_tls"`
	// Insecure runs a node reachable from other hosts without peer TLS:
	// anyone who can reach PeerListen can then have statements run as
	// superuser on every node. The node logs a warning at start and
	// exports ordo_insecure 1. Only for networks nobody else can reach.
	Insecure bool `yaml:"insecure"`
	// CommitTimeout bounds one update transaction's termination
	// (default 30s).
	CommitTimeout time.Duration `yaml:"commit_timeout"`
	// VoteTimeout bounds how long a node that could not carry out an entry
	// waits for the cluster's verdict on it while the voters needed for a
	// majority do not vote (down, cut off): then it leaves, as if the
	// verdict were against it, and is brought back with 'ordo join
	// --rejoin' (docs/architecture.md). Default 10m.
	VoteTimeout time.Duration `yaml:"vote_timeout"`
	// ClassIdleTimeout bounds, under cons, how long a client may leave a
	// transaction that holds conflict classes idle: PostgreSQL then ends
	// its session (idle_in_transaction_session_timeout) and the classes
	// are released (default 60s).
	ClassIdleTimeout time.Duration `yaml:"class_idle_timeout"`
	// ProposeTimeout: a node cut off from the majority fails proposals
	// after this long (default 5s).
	ProposeTimeout time.Duration `yaml:"propose_timeout"`
	// DataCheckInterval, if non-zero, runs a data check (ordoctl
	// data-check: every node checksums its replicated tables at one
	// position of the order and compares) this often: the Raft leader
	// requests one once this long has passed since the last check any node
	// requested. Default 0: only on demand. A check reads every table
	// in one snapshot (which holds back VACUUM while it runs); a day is a
	// sensible interval for most databases.
	DataCheckInterval time.Duration `yaml:"data_check_interval"`
	// LeaderFollowsWrites: when one node proposed three quarters of the
	// entries committed over a few seconds, the Raft leader hands
	// leadership to it, so its commits skip the trip to a leader elsewhere
	// and back (docs/architecture.md "Where the leader is"). Default true;
	// every node should say the same (a node with it off never hands its
	// leadership on).
	LeaderFollowsWrites *bool `yaml:"leader_follows_writes"`
	// CertificationWindow is how many seqnos certification remembers;
	// cluster-wide (default 100000).
	CertificationWindow uint64 `yaml:"certification_window"`
	// LogRetentionEntries, if non-zero, bounds how far a member that is
	// down holds back compaction of the Raft log: once the others are more
	// than this many entries ahead of it, they compact past it (keeping a
	// certification window more), and it comes back by state transfer
	// with 'ordo join --rejoin' (docs/membership.md). With it set, the log
	// is compacted every min(2^20, max(LogRetentionEntries/2, 256))
	// entries rather than every max(2^20, 4 × CertificationWindow).
	// Default 0: a member that is down holds compaction back until it
	// returns.
	LogRetentionEntries uint64 `yaml:"log_retention_entries"`
	// LogRetentionBytes is the same limit in bytes of log entries (their
	// payloads): a member behind more than this many bytes of entries is
	// compacted past, whichever limit is reached first; the log is also
	// compacted whenever the entries since the last compaction hold half
	// of it. Default 0: no limit in bytes.
	LogRetentionBytes uint64 `yaml:"log_retention_bytes"`
	// ApplyWorkers is the number of connections that apply other nodes'
	// transactions, in parallel where their rows do not overlap, committed
	// in order (default 1). More than one is experimental: it showed no
	// gain on 2 cores, and the bank test found lock waits between
	// parallel applies and local transactions that last until
	// lock_timeout.
	ApplyWorkers int `yaml:"apply_workers"`
	// MaxWriteSetRows and MaxWriteSetBytes bound what one update
	// transaction may write (rows; bytes of values plus 64 per row). A
	// larger transaction is rolled back with SQLSTATE 54000. Defaults:
	// 2,000,000 rows, 256 MiB (pgbench -i -s 10 fits). The write set is
	// held in memory, decoded, by its origin while it is replicated and by
	// every other node while it is applied: budget about eight times
	// max_write_set_bytes of memory per node.
	MaxWriteSetRows  int   `yaml:"max_write_set_rows"`
	MaxWriteSetBytes int64 `yaml:"max_write_set_bytes"`
	// MaxEntryBytes: a transaction whose entry in the total order would be
	// larger is replicated as fragments of about this size, followed by
	// the entry that ends it (default 8 MiB, 64 KiB … 256 MiB). Large
	// entries hold up the Raft messages queued behind them.
	MaxEntryBytes int64 `yaml:"max_entry_bytes"`
	// KeyEscalationRows: a transaction that writes more rows (or unique
	// values, or references to parent rows) of one table than this is
	// certified as writing the whole table, which keeps certification's
	// memory bounded but conflicts with every concurrent write of that
	// table; under dbsm, a transaction that reads more rows by key than
	// this is certified as reading their whole tables (default 10000).
	KeyEscalationRows int `yaml:"key_escalation_rows"`
	// AutocommitRetries: an autocommit statement (a simple query, or the
	// one Bind and Execute of an extended-protocol unit with its Sync)
	// that a replication conflict aborts, and whose client has seen
	// nothing of it (no rows returned), is run again up to this many
	// times before the client gets SQLSTATE 40001 (default 3; 0: never;
	// at most 100). See docs/outcomes.md.
	AutocommitRetries *int `yaml:"autocommit_retries"`
	// MaxConnections limits client sessions (default 1000).
	MaxConnections int `yaml:"max_connections"`
	// AuthTimeout bounds everything before a client is authenticated:
	// startup packet, TLS handshake, authentication (default 60s, as
	// PostgreSQL's authentication_timeout). A client still
	// unauthenticated then gets FATAL 57014 and is disconnected.
	AuthTimeout time.Duration `yaml:"auth_timeout"`
	// MaxUnauthenticated limits client connections not yet authenticated,
	// from all addresses (default 256); MaxUnauthenticatedPerSource, from
	// one IP address (default 64). A connection beyond either gets FATAL
	// 53300 at once.
	MaxUnauthenticated          int `yaml:"max_unauthenticated_connections"`
	MaxUnauthenticatedPerSource int `yaml:"max_unauthenticated_per_source"`
	// MaxStartupPacketBytes is the largest startup packet a client may
	// send (default 10000, PostgreSQL's limit; 1024 … 1048576).
	MaxStartupPacketBytes int `yaml:"max_startup_packet_bytes"`
	// LocalDatabases may be connected to through this node without being
	// replicated: their sessions are relayed to PostgreSQL untouched. Any
	// other database but the replicated one (the database of Postgres) is
	// refused.
	LocalDatabases []string `yaml:"local_databases"`
	// SequenceStride: every sequence on node i hands out values ≡ i modulo
	// the stride; cluster-wide, larger than MaxNodes (default 100).
	SequenceStride int `yaml:"sequence_stride"`
}

// TLS is the client-facing TLS configuration.
type TLS struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// AllowPlaintext admits clients without TLS (default true when no
	// certificate is configured).
	AllowPlaintext *bool `yaml:"allow_plaintext"`
}

// PeerTLS is mutual TLS between nodes.
type PeerTLS struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	CAFile   string `yaml:"ca_file"`
}

// MaxNodes bounds node ids (and the sequence stride must exceed it).
const MaxNodes = 64

// Protocols Ordo implements.
var Protocols = []string{"dbsm", "dbsm-si", "dbsm-rc", "pgr", "cons"}

// ErrPlaintextPeers is returned (joined with the other problems) by Load,
// Parse and Validate for a node reachable from other hosts on PeerListen
// without PeerTLS and without Insecure.
var ErrPlaintextPeers = errors.New("peer_tls: required when peer_listen is not a loopback address")

// ErrAnonymousAdmin is returned (joined with the other problems) by Load,
// Parse and Validate for an admin API reachable from other hosts on
// AdminListen with neither PeerTLS (client certificates) nor a token.
var ErrAnonymousAdmin = errors.New("admin_listen: an admin API off loopback needs peer_tls or an admin token")

// DefaultAdminListen is the admin address of a node that names none: a
// free loopback port (the node writes the one it got into
// DataDir/admin.addr).
const DefaultAdminListen = "127.0.0.1:0"

// AdminTokenMinLength is the length a configured admin token must have
// at least.
const AdminTokenMinLength = 16

// Load reads and validates a YAML file, and checks that the files it names
// (certificates, keys) exist.
func Load(path string) (*Node, error) { return load(path, true) }

// Parse reads and validates a YAML file like Load, but does not look for
// the files it names: for tools that check a configuration meant for
// another machine (a container image, a Kubernetes pod).
func Parse(path string) (*Node, error) { return load(path, false) }

func load(path string, files bool) (*Node, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var n Node
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&n); err != nil {
		return nil, fmt.Errorf("config: %s: %w", path, err)
	}
	n.Defaults()
	if err := n.validate(files); err != nil {
		return nil, fmt.Errorf("config: %s: %w", path, err)
	}
	return &n, nil
}

// Defaults fills unset optional fields.
func (n *Node) Defaults() {
	if n.Protocol == "" {
		n.Protocol = "dbsm"
	}
	if n.CommitTimeout == 0 {
		n.CommitTimeout = 30 * time.Second
	}
	if n.VoteTimeout == 0 {
		n.VoteTimeout = 10 * time.Minute
	}
	if n.ProposeTimeout == 0 {
		n.ProposeTimeout = 5 * time.Second
	}
	if n.ClassIdleTimeout == 0 {
		n.ClassIdleTimeout = time.Minute
	}
	if n.CertificationWindow == 0 {
		n.CertificationWindow = 100000
	}
	if n.MaxConnections == 0 {
		n.MaxConnections = 1000
	}
	if n.AuthTimeout == 0 {
		n.AuthTimeout = 60 * time.Second
	}
	if n.MaxUnauthenticated == 0 {
		n.MaxUnauthenticated = 256
	}
	if n.MaxUnauthenticatedPerSource == 0 {
		n.MaxUnauthenticatedPerSource = 64
	}
	if n.MaxStartupPacketBytes == 0 {
		n.MaxStartupPacketBytes = 10000
	}
	if n.ApplyWorkers == 0 {
		n.ApplyWorkers = 1
	}
	if n.LeaderFollowsWrites == nil {
		follow := true
		n.LeaderFollowsWrites = &follow
	}
	if n.MaxWriteSetRows == 0 {
		n.MaxWriteSetRows = 2_000_000
	}
	if n.MaxWriteSetBytes == 0 {
		n.MaxWriteSetBytes = 256 << 20
	}
	if n.MaxEntryBytes == 0 {
		n.MaxEntryBytes = 8 << 20
	}
	if n.KeyEscalationRows == 0 {
		n.KeyEscalationRows = 10000
	}
	if n.SequenceStride == 0 {
		n.SequenceStride = 100
	}
	if n.AutocommitRetries == nil {
		retries := 3
		n.AutocommitRetries = &retries
	}
	if n.TLS.AllowPlaintext == nil {
		plain := n.TLS.CertFile == ""
		n.TLS.AllowPlaintext = &plain
	}
	if n.AdminListen == "" {
		n.AdminListen = DefaultAdminListen
	}
}

// Validate reports every problem of the configuration at once, including
// files it names that do not exist.
func (n *Node) Validate() error { return n.validate(true) }

func (n *Node) validate(files bool) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if n.ID == 0 || n.ID > MaxNodes {
		bad("id: must be between 1 and %d, got %d", MaxNodes, n.ID)
	}
	witness := n.IsWitness()
	for name, addr := range map[string]string{"listen": n.Listen, "peer_listen": n.PeerListen} {
		if witness && name == "listen" {
			continue // no clients
		}
		if addr == "" {
			bad("%s: required (host:port)", name)
		} else if _, _, err := net.SplitHostPort(addr); err != nil {
			bad("%s: %q is not host:port: %v", name, addr, err)
		}
	}
	if n.MetricsListen != "" {
		if _, _, err := net.SplitHostPort(n.MetricsListen); err != nil {
			bad("metrics_listen: %q is not host:port: %v", n.MetricsListen, err)
		}
	}
	if _, _, err := net.SplitHostPort(n.AdminListen); n.AdminListen != "" && err != nil {
		bad("admin_listen: %q is not host:port: %v", n.AdminListen, err)
	}
	for _, id := range n.Witnesses {
		if _, ok := n.Peers[id]; !ok {
			bad("witnesses: %d is not among peers", id)
		}
	}
	if witness && n.Postgres != "" {
		bad("postgres: a witness (its id is in witnesses) has no PostgreSQL; remove postgres")
	}
	if n.Postgres == "" && !witness {
		bad("postgres: required (connection string of this node's PostgreSQL, superuser)")
	}
	if n.DataDir == "" {
		bad("data_dir: required")
	}
	if len(n.Peers) == 0 {
		bad("peers: required (id: host:port of every member, this node included)")
	} else if _, ok := n.Peers[n.ID]; !ok && n.ID != 0 {
		bad("peers: must include this node's id %d", n.ID)
	}
	for id, addr := range n.Peers {
		if id == 0 || id > MaxNodes {
			bad("peers: id %d out of range 1…%d", id, MaxNodes)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			bad("peers: %d: %q is not host:port", id, addr)
		}
	}
	if n.MaxWriteSetRows < 1 {
		bad("max_write_set_rows: must be positive, got %d", n.MaxWriteSetRows)
	}
	if n.MaxWriteSetBytes < 1<<20 || n.MaxWriteSetBytes > 16<<30 {
		bad("max_write_set_bytes: must be between 1 MiB and 16 GiB, got %d", n.MaxWriteSetBytes)
	}
	if n.MaxEntryBytes < 64<<10 || n.MaxEntryBytes > 256<<20 {
		bad("max_entry_bytes: must be between 64 KiB and 256 MiB, got %d", n.MaxEntryBytes)
	}
	if n.KeyEscalationRows < 1 {
		bad("key_escalation_rows: must be positive, got %d", n.KeyEscalationRows)
	}
	if r := n.AutocommitRetries; r != nil && (*r < 0 || *r > MaxAutocommitRetries) {
		bad("autocommit_retries: must be between 0 and %d, got %d", MaxAutocommitRetries, *r)
	}
	if n.ApplyWorkers < 1 || n.ApplyWorkers > 64 {
		bad("apply_workers: must be between 1 and 64, got %d", n.ApplyWorkers)
	}
	if n.MaxConnections < 1 {
		bad("max_connections: must be positive, got %d", n.MaxConnections)
	}
	if n.DataCheckInterval != 0 && n.DataCheckInterval < time.Second {
		bad("data_check_interval: must be 0 (off) or at least 1s, got %s", n.DataCheckInterval)
	}
	if n.VoteTimeout < time.Second {
		bad("vote_timeout: must be at least 1s, got %s", n.VoteTimeout)
	}
	if n.AuthTimeout < time.Second {
		bad("auth_timeout: must be at least 1s, got %s", n.AuthTimeout)
	}
	if n.MaxUnauthenticated < 1 {
		bad("max_unauthenticated_connections: must be positive, got %d", n.MaxUnauthenticated)
	}
	if n.MaxUnauthenticatedPerSource < 1 || n.MaxUnauthenticatedPerSource > n.MaxUnauthenticated {
		bad("max_unauthenticated_per_source: must be between 1 and max_unauthenticated_connections (%d), got %d", n.MaxUnauthenticated, n.MaxUnauthenticatedPerSource)
	}
	if n.MaxStartupPacketBytes < 1024 || n.MaxStartupPacketBytes > 1<<20 {
		bad("max_startup_packet_bytes: must be between 1024 and 1048576, got %d", n.MaxStartupPacketBytes)
	}
	if n.SequenceStride <= MaxNodes {
		bad("sequence_stride: must be larger than the largest node id %d, got %d", MaxNodes, n.SequenceStride)
	}
	ok := false
	for _, p := range Protocols {
		ok = ok || n.Protocol == p
	}
	if !ok {
		bad("protocol: %q is not one of %s", n.Protocol, strings.Join(Protocols, ", "))
	}
	if (n.TLS.CertFile == "") != (n.TLS.KeyFile == "") {
		bad("tls: cert_file and key_file go together")
	}
	if n.TLS.AllowPlaintext != nil && !*n.TLS.AllowPlaintext && n.TLS.CertFile == "" {
		bad("tls: allow_plaintext is false but no certificate is configured: no client could connect")
	}
	pt := n.PeerTLS
	if set := btoi(pt.CertFile != "") + btoi(pt.KeyFile != "") + btoi(pt.CAFile != ""); set != 0 && set != 3 {
		bad("peer_tls: cert_file, key_file and ca_file go together")
	}
	if pt.CertFile == "" && !n.Insecure && n.PeerListen != "" && !Loopback(n.PeerListen) {
		errs = append(errs, fmt.Errorf("%w (peer_listen is %s): without it, anyone who can reach that port can have "+
			"statements run as superuser on every node. Create certificates with `ordo cert create-ca` and "+
			"`ordo cert create-node` and set peer_tls (see docs/security.md), or, on a network nobody else can "+
			"reach, set `insecure: true`", ErrPlaintextPeers, n.PeerListen))
	}
	if n.Insecure && pt.CertFile != "" {
		bad("insecure: true and peer_tls both set: remove one")
	}
	errs = append(errs, n.validateAdmin()...)
	if files {
		for _, f := range []string{n.TLS.CertFile, n.TLS.KeyFile, pt.CertFile, pt.KeyFile, pt.CAFile, n.AdminTokenFile} {
			if f != "" {
				if _, err := os.Stat(f); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	return errors.Join(errs...)
}

// IsWitness reports whether this node's id is among the witnesses.
func (n *Node) IsWitness() bool {
	for _, id := range n.Witnesses {
		if id == n.ID {
			return true
		}
	}
	return false
}

// WitnessSet is Witnesses as a set of Raft ids.
func (n *Node) WitnessSet() map[uint64]bool {
	out := make(map[uint64]bool, len(n.Witnesses))
	for _, id := range n.Witnesses {
		out[uint64(id)] = true
	}
	return out
}

// validateAdmin checks how the admin API is authenticated: client
// certificates with peer_tls, a token otherwise; never anonymous off
// loopback.
func (n *Node) validateAdmin() []error {
	var errs []error
	if n.AdminToken != "" && n.AdminTokenFile != "" {
		errs = append(errs, errors.New("admin_token and admin_token_file both set: keep one"))
	}
	if n.PeerTLS.CertFile != "" && (n.AdminToken != "" || n.AdminTokenFile != "") {
		errs = append(errs, errors.New("admin_token / admin_token_file: not used with peer_tls: the admin API then "+
			"requires a client certificate of the peer CA (`ordo cert create-client`); remove the token"))
	}
	if t := n.AdminToken; t != "" && len(strings.TrimSpace(t)) < AdminTokenMinLength {
		errs = append(errs, fmt.Errorf("admin_token: at least %d characters (e.g. `openssl rand -hex 32`)", AdminTokenMinLength))
	}
	if n.AdminListen != "" && !Loopback(n.AdminListen) && n.PeerTLS.CertFile == "" && n.AdminToken == "" && n.AdminTokenFile == "" {
		errs = append(errs, fmt.Errorf("%w (admin_listen is %s): anyone who can reach that port could administer the "+
			"cluster. Set peer_tls (the admin API then requires client certificates, `ordo cert create-client`), or "+
			"admin_token_file (a file holding a token of at least %d characters), or listen on 127.0.0.1 (see docs/admin.md)",
			ErrAnonymousAdmin, n.AdminListen, AdminTokenMinLength))
	}
	return errs
}

// Loopback reports whether addr (host:port) listens on a loopback address
// only: localhost or an IP address in 127.0.0.0/8 or ::1. An empty host,
// 0.0.0.0, any other name or address is reachable from elsewhere.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
