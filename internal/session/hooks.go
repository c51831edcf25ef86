package session

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ordo-db/ordo/internal/analysis"
	"github.com/ordo-db/ordo/internal/capture"
	"github.com/ordo-db/ordo/internal/catalog"
	"github.com/ordo-db/ordo/internal/classes"
	"github.com/ordo-db/ordo/internal/termination"
	"github.com/ordo-db/ordo/internal/txn"
	"github.com/ordo-db/ordo/internal/wire"
)

// WriteSets gives the decoded write set of a prepared transaction
// (*capture.Capture).
type WriteSets interface {
	Await(ctx context.Context, gid txn.GID) (*capture.WriteSet, error)
}

// Config configures Hooks.
type Config struct {
	NodeID   uint32
	Replica  termination.Protocol
	Capture  WriteSets
	Analyzer *analysis.Analyzer
	// Catalog is the node's catalog (cons derives classes from it). The
	// replication engine refreshes it after a transaction with DDL
	// commits, before the session hears the outcome.
	Catalog *catalog.Cache
	// Database is the replicated database; LocalDatabases are relayed
	// untouched; connections to any other database are refused.
	Database       string
	LocalDatabases []string
	// AfterDDL runs in a transaction with DDL before it is prepared
	// (sequence normalization).
	AfterDDL string
	// LargeObjects finds the large objects a transaction deleted
	// (largeobjects.go); nil: a transaction that changes large objects is
	// refused at its commit.
	LargeObjects LargeObjectPeer
	// MaxWriteSetBytes bounds the content of the large objects one
	// transaction changes, as capture's limit bounds its rows (0: none).
	MaxWriteSetBytes int64
	// KeyEscalationRows: more finer keys of one table than this in a
	// write set are certified as X on the table, and a read set of more
	// keys than this is certified as reads of its tables (0: never).
	KeyEscalationRows int
	// AutocommitRetries: how many times an autocommit statement that a
	// replication conflict aborted, and whose client has seen nothing of
	// it, is run again before the client gets the conflict (retry.go;
	// 0: never).
	AutocommitRetries int
	Logger            *slog.Logger
	// OnBruteForce, if set, is called once per transaction aborted by
	// Abort (for the metrics).
	OnBruteForce func()
	// Registerer receives the sessions' metrics (nil: not registered).
	Registerer prometheus.Registerer
	// Refuse, if set and it returns an error, refuses new sessions with
	// that error's text as a FATAL 57P03 (a node removed from the
	// cluster).
	Refuse func() error
	// Classes, set under cons, returns the conflict classes in force
	// (cons.go); ClassWait bounds a transaction's wait for its classes
	// (default 30s).
	Classes   func() classes.Set
	ClassWait time.Duration
	// ClassIdle bounds how long a transaction holding classes may stay
	// idle (0: no bound; see cons.go).
	ClassIdle time.Duration
}

// Hooks implements wire.Hooks for a replicating node.
type Hooks struct {
	cfg     Config
	m       *metrics
	first   uint64
	counter atomic.Uint64
	told    termination.ToldAwaiter // (nil: the engine tells no commit early)

	mu    sync.Mutex
	byPID map[uint32]*session
}

var _ wire.Hooks = (*Hooks)(nil)

// New returns the hooks of one node.
func New(cfg Config) *Hooks {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	h := &Hooks{cfg: cfg, m: newMetrics(cfg.Registerer), byPID: make(map[uint32]*session)}
	h.told, _ = cfg.Replica.(termination.ToldAwaiter)
	// GIDs must never repeat, across restarts too: start the counter at
	// the clock.
	h.first = uint64(time.Now().UnixNano())
	h.counter.Store(h.first)
	return h
}

func (h *Hooks) nextGID() txn.GID { return txn.NewGID(h.cfg.NodeID, h.counter.Add(1)) }

// FirstCounter returns a GID counter below every GID this Hooks hands out.
func (h *Hooks) FirstCounter() uint64 { return h.first }

// NewSession implements wire.Hooks.
func (h *Hooks) NewSession(ctx context.Context, info wire.SessionInfo, be wire.Backend) (wire.SessionHooks, error) {
	if h.cfg.Refuse != nil {
		if err := h.cfg.Refuse(); err != nil {
			return nil, &pgconn.PgError{Severity: "FATAL", Code: "57P03", Message: err.Error()}
		}
	}
	if replicationConnection(info.Parameters["replication"]) {
		// A replication connection (pg_recvlogical, pg_basebackup, a
		// driver's replication API) speaks the replication protocol to
		// this node's own PostgreSQL: relayed untouched. Its slots are
		// the node's own; SQL it runs is not replicated (a write is
		// counted as an unreplicated local commit).
		return nil, nil
	}
	if h.cfg.Database != "" && info.Database != h.cfg.Database {
		for _, d := range h.cfg.LocalDatabases {
			if d == info.Database {
				return passThrough{}, nil
			}
		}
		return nil, &pgconn.PgError{Severity: "FATAL", Code: "3D000", Message: fmt.Sprintf(
			"ordo: database %q is not replicated by this cluster; connect to %q (or list it in local_databases to use it unreplicated)",
			info.Database, h.cfg.Database)}
	}
	rc := h.cfg.Replica.Name() == termination.DBSMRC
	// The session's default isolation level stays the client's: Ordo
	// makes each transaction REPEATABLE READ as it begins (under dbsm-si
	// but one that asks for SERIALIZABLE; under dbsm-rc none).
	// ordo.autocommit_retries and ordo.read_consistency, where nothing set
	// them (ALTER ROLE … SET, the connection's options), are given the
	// node's count and 'local' for the session, so that SHOW answers;
	// RESET goes back to nothing, which means the same.
	res, err := be.Exec(ctx, fmt.Sprintf(`SELECT pg_backend_pid(), current_setting('search_path'), current_user, current_setting('server_version_num'), %s,
  CASE WHEN coalesce(current_setting('ordo.autocommit_retries', true), '') = '' THEN set_config('ordo.autocommit_retries', '%d', false) END,
  CASE WHEN coalesce(current_setting('ordo.read_consistency', true), '') = '' THEN set_config('ordo.read_consistency', 'local', false) END`,
		strings.TrimPrefix(readConsistencySQL, "SELECT "), h.cfg.AutocommitRetries))
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		return nil, res.Err
	}
	serialOnDemand := rc || h.cfg.Replica.Name() == termination.DBSMSI
	s := &session{h: h, info: info, rc: rc, serialOnDemand: serialOnDemand, stmts: make(map[string][]*analysis.Statement), sent: make(map[string]string), declared: make(map[string]declaredTypes)}
	s.be = aheadBackend{Backend: be, s: s}
	if len(res.Rows) == 1 && len(res.Rows[0]) == 8 {
		s.pid = parseUint32(res.Rows[0][0])
		s.searchPath = res.Rows[0][1]
		s.user = res.Rows[0][2]
		s.serverVersion = int(parseUint32(res.Rows[0][3]))
		// (ALTER ROLE … SET, a connection's options)
		s.syncRead = syncConsistency(res.Rows[0][4])
		s.defaultSerializable, s.defaultIsolation = res.Rows[0][5] == "serializable", res.Rows[0][5]
	}
	s.env = analysis.NewEnv(catalog.SearchPath(s.searchPath, s.user))
	h.mu.Lock()
	h.byPID[s.pid] = s
	h.mu.Unlock()
	return s, nil
}

func (h *Hooks) forget(s *session) {
	h.mu.Lock()
	if h.byPID[s.pid] == s {
		delete(h.byPID, s.pid)
	}
	h.mu.Unlock()
}

// replicationConnection reports whether a startup packet's replication
// parameter asks for a replication connection (physical: true, on, yes,
// 1; logical: database), as PostgreSQL parses it.
func replicationConnection(v string) bool {
	switch strings.ToLower(v) {
	case "", "false", "off", "no", "0":
		return false
	}
	return true
}

// passThrough is the session of a local (unreplicated) database: nothing
// is intercepted.
type passThrough struct{}

func (passThrough) Statement(context.Context, *wire.Statement) error { return nil }
func (passThrough) ReadyForQuery(byte)                               {}
func (passThrough) Close()                                           {}

func parseUint32(s string) uint32 {
	var n uint32
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + uint32(c-'0')
	}
	return n
}

// IdlePIDs returns the backend pids of this node's sessions that are
// between transactions, and how many others there are (inside one).
func (h *Hooks) IdlePIDs() (idle []int, busy int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for pid, s := range h.byPID {
		if s.inTxn.Load() {
			busy++
		} else {
			idle = append(idle, int(pid))
		}
	}
	return idle, busy
}

// SessionPIDs returns the PostgreSQL backend pids of this node's sessions.
func (h *Hooks) SessionPIDs() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]int, 0, len(h.byPID))
	for pid := range h.byPID {
		out = append(out, int(pid))
	}
	return out
}

var errBruteForce = pgErr(codeSerializationFailure,
	"ordo: could not serialize access: a replication conflict aborted this transaction (a transaction committed on another node needed its locks); retry the transaction")

// Abort makes the transactions of the sessions whose PostgreSQL backends
// have the given pids fail with SQLSTATE 40001 (brute-force abort: they
// block the apply of a transaction that the total order placed first). It
// returns the pids that belong to no session of this node.
//
// A session outside a transaction holds no lock a row apply needs: it was
// reported blocking by a transaction that has ended since, and is left
// alone (its next statement may be a read, and reads never abort). Only a
// blocked DDL statement (ddl) also cancels statements outside a
// transaction: readers of its tables.
func (h *Hooks) Abort(pids []int, ddl bool) (unknown []int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, pid := range pids {
		s := h.byPID[uint32(pid)]
		if s == nil {
			unknown = append(unknown, pid)
			continue
		}
		if !ddl && !s.inTxn.Load() {
			continue
		}
		// Asked again while it still blocks (an earlier cancel may have
		// missed its statement): abort again, but count it once.
		if s.aborted.CompareAndSwap(false, true) && h.cfg.OnBruteForce != nil {
			h.cfg.OnBruteForce()
		}
		s.be.Abort(errBruteForce)
		if s.inTxn.Load() {
			// A statement of it waiting for this node's told commits
			// (awaitTold) is inside its hook, where the wire layer
			// cannot roll it back: it stops waiting. (One outside a
			// transaction holds no lock: it waits on.)
			s.wakeAborted()
		}
	}
	return unknown
}
