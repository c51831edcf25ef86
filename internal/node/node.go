// Package node builds and runs one Ordo node from its configuration: the
// wire proxy with the session hooks in front, the capture, the applier, the
// total order and the replication engine behind. It only wires components
// together; each component owns its logic.
//
// Start order (each step needs the previous ones): the metrics address
// (/readyz says 503 until the node can commit); for a joining node (StartJoin), the
// state transfer into its empty database (internal/join); bootstrap the local
// PostgreSQL (ordo schema, publication, slot), catalog and analyzer,
// capture, applier, total order (started after the applied prefix the
// database proves), replication engine, the client listener, so no client
// is served before the node can replicate, then what operators use: the
// admin API (internal/admin, authenticated as admin.NodeAuth says), and
// the goroutine with which a learner promotes itself once caught up
// (members.go). Stop runs it backwards.
//
// Never: serve clients while the replication engine is not running; hide a
// component's failure (it ends Run with the error).
package node

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ordo-db/ordo/internal/admin"
	"github.com/ordo-db/ordo/internal/analysis"
	"github.com/ordo-db/ordo/internal/apply"
	"github.com/ordo-db/ordo/internal/capture"
	"github.com/ordo-db/ordo/internal/catalog"
	"github.com/ordo-db/ordo/internal/certs"
	"github.com/ordo-db/ordo/internal/join"
	"github.com/ordo-db/ordo/internal/ownconn"
	"github.com/ordo-db/ordo/internal/replica"
	"github.com/ordo-db/ordo/internal/sequences"
	"github.com/ordo-db/ordo/internal/session"
	"github.com/ordo-db/ordo/internal/totalorder"
	"github.com/ordo-db/ordo/internal/totalorder/transport"
	"github.com/ordo-db/ordo/internal/wire"
	"github.com/ordo-db/ordo/pkg/config"
)

// Node is one running Ordo node.
type Node struct {
	cfg *config.Node
	log *slog.Logger
	reg *prometheus.Registry

	capture *capture.Capture
	applier *apply.Applier
	order   *totalorder.Node
	replica *replica.Replica
	catalog *catalog.Loader
	hooks   *session.Hooks
	wire    *wire.Server
	ln      net.Listener
	metrics *http.Server
	admin   *admin.Server
	adminLn net.Listener
	peerTLS *certs.Peer // nil without peer_tls
	// ready is /readyz's check once the node can run it.
	ready atomic.Pointer[admin.Readiness]
	// clientTLS is the client port's certificate (nil without tls).
	clientTLS *certs.ServerCert
	// draining: the node refuses new clients and ends idle sessions
	// (drain.go).
	draining atomic.Bool

	cancel context.CancelFunc
	wg     sync.WaitGroup
	errc   chan error
	once   sync.Once
}

// JoinOptions make StartJoin copy a running member's database into the
// node's empty one before it starts (internal/join, docs/membership.md).
type JoinOptions struct {
	// From is the admin API of the member to copy from (the donor).
	From *admin.Client
	// DonorPostgres, if set, is how to connect to the donor's database
	// (default: the address the donor reports, with this node's
	// PostgreSQL password).
	DonorPostgres string
	// BinDir holds pg_dump, pg_dumpall and pg_restore ("": from PATH).
	BinDir string
	// Progress receives the transfer's progress lines (nil: none).
	Progress io.Writer
	// Rejoin: the node is a member already and its database is replaced
	// by the donor's copy, whatever it holds (a node down for longer
	// than the log keeps, voted out, or whose data differs).
	Rejoin bool
}

// Start builds and starts a node. Stop it with Stop.
func Start(ctx context.Context, cfg *config.Node, log *slog.Logger) (*Node, error) {
	return start(ctx, cfg, log, nil)
}

// StartJoin starts a node that joins a running cluster: it copies a
// member's database (state transfer) unless an earlier run did, then
// starts as Start does, as a Raft learner that makes itself a voter once
// it has caught up.
func StartJoin(ctx context.Context, cfg *config.Node, log *slog.Logger, j JoinOptions) (*Node, error) {
	if j.From == nil {
		return nil, errors.New("node: join: no member to copy from")
	}
	return start(ctx, cfg, log, &j)
}

func start(ctx context.Context, cfg *config.Node, log *slog.Logger, j *JoinOptions) (_ *Node, err error) {
	if log == nil {
		log = slog.Default()
	}
	if cfg.IsWitness() {
		return nil, fmt.Errorf("node: node %d is a witness (its id is in witnesses): run it with ordo witness", cfg.ID)
	}
	log = log.With("node", cfg.ID)
	// Every connection of the node's own runs without the timeouts set
	// for sessions (ownconn.Settings); clients' sessions keep theirs.
	userDSN := cfg.Postgres
	own, err := ownconn.DSN(userDSN, 0)
	if err != nil {
		return nil, err
	}
	ownCfg := *cfg
	ownCfg.Postgres = own
	cfg = &ownCfg
	n := &Node{cfg: cfg, log: log, reg: prometheus.NewRegistry(), errc: make(chan error, 8)}
	n.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	defer func() {
		if err != nil {
			n.Stop()
		}
	}()
	runCtx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	insecure := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "ordo_insecure",
		Help: "1 when the node runs with insecure: true (peers are not authenticated: anyone who can reach peer_listen can have statements run on every node), else 0.",
	})
	n.reg.MustRegister(insecure)
	if cfg.Insecure {
		insecure.Set(1)
		log.Warn("insecure: true: peers are not authenticated; anyone who can reach peer_listen can have statements run as superuser on every node (set peer_tls, see docs/security.md)",
			"peer_listen", cfg.PeerListen)
	}

	// Metrics are served from the start (a join's progress is in them);
	// /readyz says 503 until the node can commit.
	if cfg.MetricsListen != "" {
		mln, err := net.Listen("tcp", cfg.MetricsListen)
		if err != nil {
			return nil, fmt.Errorf("node: listen for metrics on %s: %w", cfg.MetricsListen, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(n.reg, promhttp.HandlerOpts{}))
		mux.Handle(admin.PathReady, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if rd := n.ready.Load(); rd != nil {
				rd.ServeHTTP(w, r)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"ready":false,"reason":"starting"}`+"\n")
		}))
		n.metrics = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			if err := n.metrics.Serve(mln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				n.errc <- fmt.Errorf("metrics: %w", err)
			}
		}()
	}

	// 0. Joining: copy a member's database first.
	var joined *join.Result
	if j == nil && join.Unfinished(cfg.DataDir) {
		return nil, fmt.Errorf("node: the database holds an unfinished copy (an ordo join was interrupted; %s): run the same ordo join again",
			filepath.Join(cfg.DataDir, "join-in-progress"))
	}
	if j != nil {
		pa, err := advertised(cfg.PeerListen)
		if err != nil {
			return nil, err
		}
		res, err := join.Run(ctx, join.Config{
			NodeID: cfg.ID, PeerAddr: pa, Postgres: cfg.Postgres, DataDir: cfg.DataDir,
			Donor: j.From, DonorPostgres: j.DonorPostgres, BinDir: j.BinDir, Rejoin: j.Rejoin, Window: cfg.CertificationWindow,
			Progress: j.Progress, Logger: log, Registerer: n.reg,
		})
		if err != nil {
			return nil, fmt.Errorf("node: %w", err)
		}
		joined = &res
	}

	// 1. The local PostgreSQL: ordo schema, publication, slot.
	conn, err := pgx.Connect(ctx, cfg.Postgres)
	if err != nil {
		return nil, fmt.Errorf("node: connect to PostgreSQL (%s): %w", redact(cfg.Postgres), err)
	}
	defer conn.Close(context.Background())
	pgVersion := conn.PgConn().ParameterStatus("server_version")
	var versionNum int
	if err := conn.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&versionNum); err != nil {
		return nil, fmt.Errorf("node: read PostgreSQL's version: %w", err)
	}
	if cfg.Postgres, err = ownconn.DSN(userDSN, versionNum); err != nil { // (and transaction_timeout from 17 on)
		return nil, err
	}
	maxConns, err := checkPostgres(ctx, conn, cfg, log)
	if err != nil {
		return nil, err
	}
	if err := apply.Bootstrap(ctx, conn); err != nil {
		return nil, fmt.Errorf("node: bootstrap: %w", err)
	}
	// After DDL, local or applied, in its transaction: sequences into the
	// node's residue class. At start, for what existed before, that and
	// tables without a primary key made REPLICA IDENTITY FULL (after DDL
	// the event trigger and the applier do it: capture.ReplicaIdentitySQL).
	// After DDL or setval, only the sequences the transaction touched: a
	// table's lock taken to read its largest id would otherwise make
	// unrelated transactions deadlock (sequences.NormalizeTouchedSQL).
	normalize := sequences.NormalizeTouchedSQL(cfg.SequenceStride, int(cfg.ID))
	if _, err := conn.Exec(ctx, sequences.NormalizeSQL(cfg.SequenceStride, int(cfg.ID))+";\n"+capture.ReplicaIdentitySQL, pgx.QueryExecModeSimpleProtocol); err != nil {
		return nil, fmt.Errorf("node: normalize sequences and replica identities: %w", err)
	}
	capCfg := capture.Config{DSN: cfg.Postgres, Logger: log, Registerer: n.reg,
		Limits: capture.Limits{MaxRows: cfg.MaxWriteSetRows, MaxBytes: cfg.MaxWriteSetBytes}}
	// A transaction's rows travel in entries of about MaxEntryBytes; its
	// last entry also holds its keys and DDL, and a single row may be as
	// large as the whole write set allows: an entry may be the larger of
	// twice MaxEntryBytes and MaxWriteSetBytes, plus 64 MiB. The transport
	// carries one such entry per message (batches of smaller ones stay
	// under half of it).
	maxProposal := int(max(2*cfg.MaxEntryBytes, cfg.MaxWriteSetBytes)) + 64<<20
	if err := capture.Setup(ctx, capCfg); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}

	// 2. Catalog and analyzer.
	n.catalog = catalog.NewLoader(func(ctx context.Context) (*pgx.Conn, error) {
		return pgx.Connect(ctx, cfg.Postgres)
	}, nil)
	cat := catalog.NewCache(n.catalog.Load)
	if _, err := cat.Refresh(ctx); err != nil {
		return nil, fmt.Errorf("node: load catalog: %w", err)
	}
	an := analysis.New(cat, analysis.Options{})
	for how, count := range map[string]func(analysis.Stats) uint64{
		"parsed":   func(s analysis.Stats) uint64 { return s.Parses },
		"cached":   func(s analysis.Stats) uint64 { return s.ExactHits },
		"template": func(s analysis.Stats) uint64 { return s.TemplateHits },
	} {
		n.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "ordo_analysis_statements_total",
			Help:        "Texts analyzed, by how: parsed (pg_query), cached (the same text before), template (the same text but for its literals before).",
			ConstLabels: prometheus.Labels{"how": how},
		}, func() float64 { return float64(count(an.Stats())) }))
	}

	// 3. Capture and applier.
	if n.capture, err = capture.Start(ctx, capCfg); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	var rep *replica.Replica
	var hooks *session.Hooks
	n.applier, err = apply.Open(ctx, apply.Config{
		DSN: cfg.Postgres, Logger: log, Registerer: n.reg, AfterDDL: normalize, Workers: cfg.ApplyWorkers,
		OnBlocked: func(pids []int, ddl bool) { n.bruteForce(rep, hooks, pids, ddl) },
	})
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	proven, err := n.applier.AppliedPrefix(ctx)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	history, err := replica.LoadProtocolHistory(ctx, conn)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	// Replay a whole certification window before the proven prefix, so
	// the certifier is rebuilt exactly as every other node has it; replay
	// is idempotent (proof rows, prepared transactions already finished).
	startAfter := uint64(0)
	if proven > cfg.CertificationWindow {
		startAfter = proven - cfg.CertificationWindow
	}

	// 4. Total order.
	tr, peerTLS, err := peerTransport(runCtx, cfg, log, maxProposal+16<<20, &n.wg)
	if err != nil {
		return nil, err
	}
	n.peerTLS = peerTLS
	peers := make(map[uint64]string, len(cfg.Peers))
	for id, addr := range cfg.Peers {
		peers[uint64(id)] = addr
	}
	if joined != nil {
		for _, m := range joined.Members {
			if m.Addr != "" && m.ID != uint64(cfg.ID) {
				peers[m.ID] = m.Addr
			}
		}
	}
	// A joiner's empty log starts a certification window before its
	// copy, which it replays (an earlier run's log, if any, is kept); it
	// learns the witnesses from the donor, as the entries that added them
	// may lie before its log.
	var seed *totalorder.LogPoint
	witnesses := cfg.WitnessSet()
	if joined != nil {
		seed = joined.LogPoint
		addWitnesses(witnesses, joined.Members)
	}
	if err := os.MkdirAll(filepath.Join(cfg.DataDir, "raft"), 0o700); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	n.order, err = totalorder.Start(totalorder.Config{
		ID: uint64(cfg.ID), Dir: filepath.Join(cfg.DataDir, "raft"), Peers: peers, Transport: tr, Join: j != nil, Seed: seed,
		StartAfter: startAfter, ProposeTimeout: cfg.ProposeTimeout, Registerer: n.reg, MaxProposalBytes: maxProposal,
		// Compactions keep a certification window behind what every
		// member applied, so a node that restarts, or rejoins by state
		// transfer at a member's applied prefix, replays the window before
		// its start from the log.
		SnapshotEntries: compactionInterval(cfg),
		KeepEntries:     cfg.CertificationWindow,
		// Votes on poison entries count the voters the log says
		// (docs/membership.md), not node.yaml's bootstrap peers.
		DeliverMembership: true,
		Witnesses:         witnesses,
		SeededJoins:       true,
		RetainEntries:     cfg.LogRetentionEntries,
		RetainBytes:       cfg.LogRetentionBytes,
		TickInterval:      50 * time.Millisecond, ElectionTicks: 10, HeartbeatTicks: 1,
		FollowWrites: followWrites(cfg),
	})
	if err != nil {
		return nil, fmt.Errorf("node: total order: %w", err)
	}

	// 5. Replication engine. The catalog is refreshed after DDL beside
	// the delivery loop, which only invalidates it (OnDDL): a refresh
	// reads the whole user schema, and every commit of the node used to
	// wait for it.
	refreshCatalog := make(chan struct{}, 1)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		for {
			select {
			case <-runCtx.Done():
				return
			case <-refreshCatalog:
			}
			if _, err := cat.Refresh(runCtx); err != nil && runCtx.Err() == nil {
				log.Warn("catalog refresh after DDL", "err", err)
			}
		}
	}()
	rep, err = replica.New(replica.Config{
		NodeID: cfg.ID, Protocol: cfg.Protocol, Window: cfg.CertificationWindow, DSN: cfg.Postgres, MaxEntryBytes: int(cfg.MaxEntryBytes), CommitTimeout: cfg.CommitTimeout, VoteTimeout: cfg.VoteTimeout,
		Order: n.order, Applier: n.applier, StartAfter: startAfter, Proven: proven, Logger: log, Registerer: n.reg,
		Members: len(cfg.Peers) - len(cfg.Witnesses), Suspects: n.suspects(cfg), History: history,
		OnDDL: func(context.Context) {
			// Every statement analyzed from here on waits for the refresh
			// (catalog.Cache.Current); the loop goes on with the entries
			// after this one meanwhile.
			cat.Invalidate()
			select {
			case refreshCatalog <- struct{}{}:
			default: // one is pending: it starts after this Invalidate
			}
		},
		OnGranules: func(ctx context.Context, granules map[string]string, seqno uint64) {
			n.catalog.SetGranules(granules, seqno)
			cat.Invalidate()
			if _, err := cat.Refresh(ctx); err != nil {
				// Until it is refreshed, this node's keys are of the old
				// epoch and its update transactions abort: keep trying.
				log.Warn("catalog refresh after a change of the granule columns failed; retrying", "err", err)
				n.wg.Add(1)
				go func() {
					defer n.wg.Done()
					for ctx.Err() == nil {
						select {
						case <-ctx.Done():
							return
						case <-time.After(time.Second):
						}
						if c := cat.Current(); c != nil && c.GranuleSeqno() == seqno {
							return // refreshed since (a later DDL)
						}
						if _, err := cat.Refresh(ctx); err == nil {
							log.Info("catalog refreshed with the new granule columns")
							return
						}
					}
				}()
			}
		},
	})
	if err != nil {
		return nil, err
	}
	n.replica = rep
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		if err := rep.Run(runCtx); err != nil {
			n.errc <- fmt.Errorf("replication: %w", err)
		}
	}()

	// 6. Clients.
	los := capture.NewLargeObjectPeer(cfg.Postgres)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		<-runCtx.Done()
		los.Close()
	}()
	hooks = session.New(session.Config{
		Registerer: n.reg, OnBruteForce: rep.CountBruteForce,
		NodeID: cfg.ID, Replica: rep, Capture: n.capture, Analyzer: an, Catalog: cat,
		Logger: log, AfterDDL: normalize, KeyEscalationRows: cfg.KeyEscalationRows,
		Database: conn.Config().Database, LocalDatabases: cfg.LocalDatabases,
		Classes: consClasses(cfg, rep), ClassIdle: cfg.ClassIdleTimeout,
		Refuse: n.refuse, LargeObjects: los, MaxWriteSetBytes: cfg.MaxWriteSetBytes,
		AutocommitRetries: autocommitRetries(cfg),
	})
	n.hooks = hooks
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		for began := time.Now(); runCtx.Err() == nil; {
			err := rep.ResolveLeftovers(runCtx, hooks.FirstCounter())
			if err == nil {
				return
			}
			// A node with nothing left over only waits for the
			// others to start, as every node of a cluster started one
			// at a time does: not a warning, until it lasts.
			var wait *replica.LeftoversWait
			switch {
			case errors.As(err, &wait) && wait.Leftovers > 0:
				log.Warn("prepared transactions left over from before a restart stay unresolved until the cluster is reachable; retrying", "leftovers", wait.Leftovers, "err", wait.Err)
			case wait != nil && time.Since(began) < quorumPatience:
				log.Info("waiting for a quorum of the cluster to finish starting up; retrying", "err", wait.Err)
			case wait != nil:
				log.Warn("no quorum of the cluster reached since this node started: it serves no commit until one is; retrying", "for", time.Since(began).Round(time.Second), "err", wait.Err)
			default:
				log.Warn("could not look for prepared transactions left over from before a restart; retrying", "err", err)
			}
			select {
			case <-runCtx.Done():
			case <-time.After(5 * time.Second):
			}
		}
	}()
	if cfg.DataCheckInterval > 0 {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			scheduleDataChecks(runCtx, n.order, rep, cfg.DataCheckInterval, log)
		}()
	}
	network, backend, err := backendAddr(cfg.Postgres)
	if err != nil {
		return nil, err
	}
	var clientTLS *tls.Config
	if cfg.TLS.CertFile != "" {
		// Reloaded when the files change, like the peer certificates.
		if n.clientTLS, err = certs.LoadServerCert(cfg.TLS.CertFile, cfg.TLS.KeyFile); err != nil {
			return nil, fmt.Errorf("node: tls: %w", err)
		}
		clientTLS = n.clientTLS.TLSConfig()
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			n.clientTLS.Watch(runCtx, tlsWatch, log)
		}()
	}
	n.wire, err = wire.NewServer(wire.Config{
		ListenAddr: cfg.Listen, BackendAddr: backend, BackendNetwork: network,
		TLSConfig: clientTLS, AllowPlaintext: *cfg.TLS.AllowPlaintext,
		MaxConns: maxConns, Logger: log, Registerer: n.reg,
		StartupTimeout: cfg.AuthTimeout, MaxStartupConns: cfg.MaxUnauthenticated,
		MaxStartupConnsPerSource: cfg.MaxUnauthenticatedPerSource, MaxStartupPacketLen: cfg.MaxStartupPacketBytes,
	}, hooks)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	if n.ln, err = net.Listen("tcp", cfg.Listen); err != nil {
		return nil, fmt.Errorf("node: listen for clients on %s: %w", cfg.Listen, err)
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		if err := n.wire.Serve(n.ln); err != nil && !errors.Is(err, wire.ErrServerClosed) {
			n.errc <- fmt.Errorf("clients: %w", err)
		}
	}()
	// 7. Operators: readiness and metrics, the admin API.
	ready := admin.NewReadiness(n.order, rep)
	ready.WhenDraining(n.Draining)
	n.ready.Store(ready)
	auth, tokenFile, err := admin.NodeAuth(cfg, n.peerTLS, log)
	if err != nil {
		return nil, fmt.Errorf("node: admin API: %w", err)
	}
	n.admin, err = admin.New(admin.Config{
		NodeID: cfg.ID, Order: n.order, Replica: rep, Ready: ready, Metrics: n.reg, PostgresVersion: pgVersion,
		CertificationWindow: cfg.CertificationWindow, Auth: auth, Logger: log,
		Membership: n.order, Donor: rep, Postgres: cfg.Postgres, Drainer: n,
	})
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	adminAddr := cfg.AdminListen
	if adminAddr == "" {
		adminAddr = config.DefaultAdminListen
	}
	if n.adminLn, err = net.Listen("tcp", adminAddr); err != nil {
		return nil, fmt.Errorf("node: listen for the admin API on %s (admin_listen): %w", adminAddr, err)
	}
	if err := admin.WriteAddrFile(cfg.DataDir, n.adminLn.Addr().String()); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		if err := n.admin.Serve(n.adminLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.errc <- fmt.Errorf("admin API: %w", err)
		}
	}()
	if auth.TLS != nil {
		log.Info("admin API serving", "admin_listen", n.adminLn.Addr().String(), "auth", "client certificates of the peer CA")
	} else {
		log.Info("admin API serving", "admin_listen", n.adminLn.Addr().String(), "auth", "bearer token", "token_file", tokenFile)
	}
	// A learner (a joining node) makes itself a voter once caught up; a
	// removed node ends its sessions.
	n.wg.Add(2)
	go func() {
		defer n.wg.Done()
		n.promoteWhenCaughtUp(runCtx)
	}()
	go func() {
		defer n.wg.Done()
		n.endSessionsWhenRemoved(runCtx)
	}()
	log.Info("node started", "listen", n.ln.Addr().String(), "peer_listen", cfg.PeerListen, "protocol", rep.Name(), "replay_from", startAfter)
	return n, nil
}

// tlsWatch is how often a node looks for new peer and client TLS files.
const tlsWatch = 5 * time.Second

// quorumPatience is how long after its start a node that left nothing
// behind waits for a quorum before it says so as a warning: the other
// nodes of a cluster started one at a time are starting meanwhile.
const quorumPatience = time.Minute

// ReloadPeerTLS reads the peer TLS files again now (ordo start does on
// SIGHUP); new peer connections use them. On an error the previous
// certificates stay in use. Without peer_tls it does nothing.
func (n *Node) ReloadPeerTLS() error {
	if n.peerTLS == nil {
		return nil
	}
	changed, err := n.peerTLS.Reload()
	if err != nil {
		return fmt.Errorf("node: peer_tls: %w", err)
	}
	if changed {
		c := n.peerTLS.Certificate()
		n.log.Info("peer TLS files reloaded", "serial", c.SerialNumber.Text(16), "not_after", c.NotAfter)
	}
	return nil
}

// ReloadClientTLS reads the client port's certificate and key again now
// (ordo start does on SIGHUP); new client connections use them. On an
// error the previous certificate stays in use. Without tls it does
// nothing.
func (n *Node) ReloadClientTLS() error {
	if n.clientTLS == nil {
		return nil
	}
	changed, err := n.clientTLS.Reload()
	if err != nil {
		return fmt.Errorf("node: tls: %w", err)
	}
	if changed {
		c := n.clientTLS.Certificate()
		n.log.Info("client TLS files reloaded", "serial", c.SerialNumber.Text(16), "not_after", c.NotAfter)
	}
	return nil
}

// ClientAddr returns the address clients connect to.
func (n *Node) ClientAddr() string { return n.ln.Addr().String() }

// AdminAddr returns the address of the node's admin API.
func (n *Node) AdminAddr() string { return n.adminLn.Addr().String() }

// Replica returns the node's replication engine.
func (n *Node) Replica() *replica.Replica { return n.replica }

// Order returns the node's total order (tests and tools).
func (n *Node) Order() *totalorder.Node { return n.order }

// Registry returns the node's metrics registry.
func (n *Node) Registry() *prometheus.Registry { return n.reg }

// Wait returns when a component fails (its error) or ctx ends (nil).
func (n *Node) Wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case err := <-n.errc:
		return err
	}
}

// Stop stops the node: clients first, the replication engine last.
func (n *Node) Stop() {
	n.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if n.wire != nil {
			_ = n.wire.Shutdown(ctx)
		}
		if n.metrics != nil {
			_ = n.metrics.Shutdown(ctx)
		}
		if n.admin != nil {
			_ = n.admin.Shutdown(ctx)
		}
		if n.adminLn != nil {
			n.adminLn.Close() // if Start failed before serving it
			admin.RemoveAddrFile(n.cfg.DataDir, n.adminLn.Addr().String())
		}
		if n.cancel != nil {
			n.cancel()
		}
		if n.order != nil {
			n.order.Stop()
		}
		n.wg.Wait()
		if n.applier != nil {
			n.applier.Close()
		}
		if n.capture != nil {
			n.capture.Stop()
		}
		if n.catalog != nil {
			n.catalog.Close()
		}
	})
}

// bruteForce ends local transactions that block an apply: this node's
// undecided prepared transactions (pid 0 in pg_blocking_pids) are rolled
// back by the replica; the transactions of Ordo's sessions fail with 40001
// (session.Hooks.Abort); other local backends (connected to PostgreSQL
// directly) are cancelled, or terminated when idle in a transaction.
func (n *Node) bruteForce(rep *replica.Replica, hooks *session.Hooks, pids []int, ddl bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var others []int
	for _, p := range pids {
		if p == 0 {
			if rep != nil {
				rep.RollbackUndecided(ctx)
			}
		} else {
			others = append(others, p)
		}
	}
	if hooks != nil {
		others = hooks.Abort(others, ddl)
	}
	if len(others) == 0 {
		return
	}
	n.log.Info("brute-force abort of backends outside Ordo's sessions", "pids", others)
	conn, err := pgx.Connect(ctx, n.cfg.Postgres)
	if err != nil {
		n.log.Warn("brute-force abort: connect", "err", err)
		return
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, `SELECT CASE WHEN state = 'active' THEN pg_cancel_backend(pid) ELSE pg_terminate_backend(pid) END
		FROM pg_stat_activity WHERE pid = ANY($1) AND backend_type = 'client backend'`, others)
	if err != nil {
		n.log.Warn("brute-force abort", "pids", others, "err", err)
	}
}

// backendAddr is where the wire server connects clients' sessions: the
// host and port of the postgres connection string, or, when its host is
// a directory (host=/var/run/postgresql), the Unix-domain socket there,
// as libpq would connect.
func backendAddr(dsn string) (network, addr string, err error) {
	pc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return "", "", fmt.Errorf("node: postgres: %w", err)
	}
	if strings.HasPrefix(pc.Host, "/") {
		return "unix", filepath.Join(pc.Host, ".s.PGSQL."+strconv.Itoa(int(pc.Port))), nil
	}
	return "tcp", net.JoinHostPort(pc.Host, strconv.Itoa(int(pc.Port))), nil
}

func redact(dsn string) string {
	pc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return "(unparsable connection string)"
	}
	return fmt.Sprintf("%s@%s:%d/%s", pc.User, pc.Host, pc.Port, pc.Database)
}

// scheduleDataChecks requests a data check (replica.RequestDataCheck)
// whenever this node leads the Raft group and `every` has passed since the
// last check any node requested (or since this node started). Only the
// leader asks, so a cluster runs one check per interval, not one per
// node; a new leader counts from the last check it was delivered.
func scheduleDataChecks(ctx context.Context, order *totalorder.Node, rep *replica.Replica, every time.Duration, log *slog.Logger) {
	tick := time.NewTicker(min(max(every/10, 100*time.Millisecond), time.Minute))
	defer tick.Stop()
	var requested time.Time // by this node (its loop may not have stepped it yet)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if order.Leader() != order.ID() || time.Since(rep.LastDataCheck()) < every || time.Since(requested) < every {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		seqno, err := rep.RequestDataCheck(pctx)
		cancel()
		if err != nil {
			log.Warn("scheduled data check: could not request it; trying again", "err", err)
			continue
		}
		requested = time.Now()
		log.Info("scheduled data check requested", "seqno", seqno, "data_check_interval", every)
	}
}

// compactionInterval is how many entries the log grows past its last
// compaction before the next: rarely (2^20 entries, or four certification
// windows) unless a retention limit asks for the log to be bounded.
func compactionInterval(cfg *config.Node) uint64 {
	if r := cfg.LogRetentionEntries; r > 0 {
		return min(1<<20, max(r/2, 256))
	}
	return max(1<<20, 4*cfg.CertificationWindow)
}

// peerTransport listens on peer_listen and returns the Raft transport,
// with mutual TLS bound to node ids when peer_tls is set (its files are
// watched, on wg, until ctx ends; nil without peer_tls).
func peerTransport(ctx context.Context, cfg *config.Node, log *slog.Logger, maxMsg int, wg *sync.WaitGroup) (*transport.GRPC, *certs.Peer, error) {
	peerLn, err := net.Listen("tcp", cfg.PeerListen)
	if err != nil {
		return nil, nil, fmt.Errorf("node: listen for peers on %s: %w", cfg.PeerListen, err)
	}
	gcfg := transport.GRPCConfig{ID: uint64(cfg.ID), Listener: peerLn, MaxMsgBytes: maxMsg, Logger: log}
	var peerTLS *certs.Peer
	if pt := cfg.PeerTLS; pt.CertFile != "" {
		// Every connection is bound to the node id its certificate
		// proves; the files are reloaded when they change.
		if peerTLS, err = certs.LoadPeer(certs.Files{Cert: pt.CertFile, Key: pt.KeyFile, CA: pt.CAFile}, uint64(cfg.ID)); err != nil {
			peerLn.Close()
			return nil, nil, fmt.Errorf("node: peer_tls: %w", err)
		}
		gcfg.ServerTLS, gcfg.ClientTLS, gcfg.PeerID = peerTLS.ServerConfig(), peerTLS.ClientConfig(), certs.NodeID
		wg.Add(1)
		go func() {
			defer wg.Done()
			peerTLS.Watch(ctx, tlsWatch, log)
		}()
	}
	tr, err := transport.NewGRPC(gcfg)
	if err != nil {
		peerLn.Close()
		return nil, nil, fmt.Errorf("node: %w", err)
	}
	return tr, peerTLS, nil
}

// addWitnesses adds the witnesses among a member list (a donor's) to set.
func addWitnesses(set map[uint64]bool, ms []admin.MemberRow) {
	for _, m := range ms {
		if strings.Contains(m.Role, "witness") {
			set[m.ID] = true
		}
	}
}

// followWrites is the total order's FollowWrites window: the leader moves
// to the node that proposed most of the last 2 s of entries
// (leader_follows_writes).
func followWrites(cfg *config.Node) time.Duration {
	if cfg.LeaderFollowsWrites != nil && !*cfg.LeaderFollowsWrites {
		return 0
	}
	return 2 * time.Second
}

// autocommitRetries is cfg's autocommit_retries (Defaults sets it).
func autocommitRetries(cfg *config.Node) int {
	if cfg.AutocommitRetries == nil {
		return 0
	}
	return *cfg.AutocommitRetries
}

// ownConnections is how many connections to PostgreSQL a node may need
// for itself beside its apply workers: the delivery loop, the capture's,
// the applier's monitor, the catalog, brute-force rollbacks, and the ones
// opened for a while (sweeps, outcome and data checks, leftovers, joins,
// administration), with room to spare.
const ownConnections = 16

// OwnConnections is how many connections to PostgreSQL a node with
// applyWorkers apply workers keeps for itself (what it does not admit
// clients to).
func OwnConnections(applyWorkers int) int { return ownConnections + applyWorkers }

// checkPostgres refuses a PostgreSQL without prepared transactions (every
// update commit would fail) and returns how many client sessions the node
// admits: max_connections, but no more than PostgreSQL's max_connections leaves
// once the node's own connections are counted. Each session is one
// PostgreSQL backend; with the default of 1000 against PostgreSQL's 100,
// clients could take every slot, and the node could then open none of
// the connections it needs to roll back a prepared transaction that
// blocks an apply, sweep up orphans or answer an outcome check. A client
// beyond the limit gets the node's own 53300.
func checkPostgres(ctx context.Context, conn *pgx.Conn, cfg *config.Node, log *slog.Logger) (int, error) {
	var pgMax, prepared int
	if err := conn.QueryRow(ctx, "SELECT current_setting('max_connections')::int, current_setting('max_prepared_transactions')::int").Scan(&pgMax, &prepared); err != nil {
		return 0, fmt.Errorf("node: read PostgreSQL's max_connections: %w", err)
	}
	if prepared == 0 {
		// Every update commit would fail, each with PostgreSQL's 55000.
		return 0, errors.New("node: PostgreSQL's max_prepared_transactions is 0, and Ordo prepares every update transaction before it commits: set it in postgresql.conf to at least the number of client sessions that commit at once (max_connections is safe) and restart PostgreSQL")
	}
	room := pgMax - ownConnections - cfg.ApplyWorkers
	if room < 1 {
		return 0, fmt.Errorf("node: PostgreSQL's max_connections (%d) leaves no connection for clients: the node needs about %d of its own (apply_workers %d included); raise max_connections in postgresql.conf", pgMax, ownConnections+cfg.ApplyWorkers, cfg.ApplyWorkers)
	}
	clients := cfg.MaxConnections
	if clients > room {
		log.Info("client sessions limited by PostgreSQL's max_connections", "max_connections", room,
			"configured", cfg.MaxConnections, "postgres_max_connections", pgMax, "own", ownConnections+cfg.ApplyWorkers)
		clients = room
	}
	if prepared < clients {
		log.Warn("PostgreSQL's max_prepared_transactions is below the client sessions this node admits: commits beyond it at once fail with 53400; raise it to max_connections", "max_prepared_transactions", prepared, "client_sessions", clients)
	}
	var encoding string
	if err := conn.QueryRow(ctx, "SELECT current_setting('server_encoding')").Scan(&encoding); err == nil && encoding == "SQL_ASCII" {
		log.Warn("the replicated database's encoding is SQL_ASCII, which stores any bytes: Ordo replicates text as UTF-8, and refuses a transaction holding text that is not (22021)", "database", conn.Config().Database)
	}
	return clients, nil
}
