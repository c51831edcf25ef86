package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ordo-db/ordo/internal/admin"
	"github.com/ordo-db/ordo/internal/certs"
	"github.com/ordo-db/ordo/internal/totalorder"
	"github.com/ordo-db/ordo/pkg/config"
)

// Witness is a Raft voter without PostgreSQL ('ordo witness',
// docs/membership.md): it keeps the log and votes, so two data nodes and a
// witness keep committing when either data node is lost, and carries out
// nothing. Every node knows it as a witness (totalorder/witness.go): votes
// on entries leave it out, and it hands leadership over when elected.
type Witness struct {
	cfg     *config.Node
	log     *slog.Logger
	reg     *prometheus.Registry
	order   *totalorder.Node
	peerTLS *certs.Peer
	metrics *http.Server
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	errc    chan error
	once    sync.Once
}

// WitnessJoin makes StartWitness add the witness to a running cluster
// through a member's admin API instead of starting from the bootstrap
// set.
type WitnessJoin struct {
	From *admin.Client
}

// StartWitness starts a witness (cfg's id must be among its witnesses).
// With j, a witness that is not a member yet is added to the running
// cluster through j.From: as a learner that is a witness, whose log
// starts at the member's last applied entry, and which promotes itself to
// voter once caught up.
func StartWitness(ctx context.Context, cfg *config.Node, log *slog.Logger, j *WitnessJoin) (_ *Witness, err error) {
	if !cfg.IsWitness() {
		return nil, fmt.Errorf("node: node %d is not a witness: list its id in witnesses (or run it with ordo start)", cfg.ID)
	}
	if log == nil {
		log = slog.Default()
	}
	log = log.With("node", cfg.ID, "witness", true)
	w := &Witness{cfg: cfg, log: log, reg: prometheus.NewRegistry(), errc: make(chan error, 4)}
	w.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	defer func() {
		if err != nil {
			w.Stop()
		}
	}()
	runCtx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	if cfg.Insecure {
		log.Warn("insecure: true: peers are not authenticated (set peer_tls, see docs/security.md)", "peer_listen", cfg.PeerListen)
	}
	dir := filepath.Join(cfg.DataDir, "raft")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	peers := make(map[uint64]string, len(cfg.Peers))
	for id, addr := range cfg.Peers {
		peers[uint64(id)] = addr
	}
	var seed *totalorder.LogPoint
	joining := false
	witnesses := cfg.WitnessSet()
	if j != nil && j.From != nil {
		// Be added (done already: no change), and start the log where
		// the member is, if it is empty (a witness replays nothing).
		pa, err := advertised(cfg.PeerListen)
		if err != nil {
			return nil, err
		}
		ms, err := j.From.AddWitness(ctx, uint64(cfg.ID), pa)
		if err != nil {
			return nil, fmt.Errorf("node: add witness %d through %s: %w", cfg.ID, j.From.Endpoint(), err)
		}
		for _, m := range ms.Members {
			if m.Addr != "" && m.ID != uint64(cfg.ID) {
				peers[m.ID] = m.Addr
			}
		}
		addWitnesses(witnesses, ms.Members)
		lp, err := j.From.LastLogPoint(ctx)
		if err != nil {
			return nil, fmt.Errorf("node: witness %d: where to start the log: %w", cfg.ID, err)
		}
		seed, joining = &lp, true
		log.Info("witness added as a learner", "from", j.From.Endpoint(), "log_starts_at", lp.Index)
	}
	tr, peerTLS, err := peerTransport(runCtx, cfg, log, 256<<20, &w.wg)
	if err != nil {
		return nil, err
	}
	w.peerTLS = peerTLS
	w.order, err = totalorder.Start(totalorder.Config{
		ID: uint64(cfg.ID), Dir: dir, Peers: peers, Transport: tr, Join: joining, Seed: seed,
		ProposeTimeout: cfg.ProposeTimeout, Registerer: w.reg, MaxProposalBytes: 256 << 20,
		SnapshotEntries: compactionInterval(cfg), KeepEntries: cfg.CertificationWindow,
		RetainEntries: cfg.LogRetentionEntries, RetainBytes: cfg.LogRetentionBytes,
		Witnesses: witnesses, Witness: true, SeededJoins: true,
		TickInterval: 50 * time.Millisecond, ElectionTicks: 10, HeartbeatTicks: 1,
	})
	if err != nil {
		return nil, fmt.Errorf("node: total order: %w", err)
	}
	// Nothing to carry out: every entry counts as applied once delivered.
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for d := range w.order.Deliveries() {
			w.order.MarkApplied(d.Seqno)
		}
	}()
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		promoteWhenCaughtUp(runCtx, w.order, uint64(cfg.ID), log, func() (uint64, bool) { return 0, true })
	}()
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		select {
		case <-runCtx.Done():
		case <-w.order.Done():
			w.errc <- fmt.Errorf("witness: the total order stopped: %w", w.order.Err())
		}
	}()
	if cfg.MetricsListen != "" {
		mln, err := net.Listen("tcp", cfg.MetricsListen)
		if err != nil {
			return nil, fmt.Errorf("node: listen for metrics on %s: %w", cfg.MetricsListen, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(w.reg, promhttp.HandlerOpts{}))
		mux.HandleFunc(admin.PathReady, w.ready)
		w.metrics = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			if err := w.metrics.Serve(mln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				w.errc <- fmt.Errorf("metrics: %w", err)
			}
		}()
	}
	log.Info("witness started", "peer_listen", cfg.PeerListen)
	return w, nil
}

// ready is /readyz: 200 once the witness knows a leader.
func (w *Witness) ready(rw http.ResponseWriter, _ *http.Request) {
	body := map[string]any{"ready": true, "witness": true}
	code := http.StatusOK
	switch {
	case w.order.Err() != nil:
		body["ready"], body["reason"], code = false, w.order.Err().Error(), http.StatusServiceUnavailable
	case w.order.Leader() == 0:
		body["ready"], body["reason"], code = false, "no leader known", http.StatusServiceUnavailable
	}
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(code)
	_ = json.NewEncoder(rw).Encode(body)
}

// Order is the witness's total order node.
func (w *Witness) Order() *totalorder.Node { return w.order }

// ReloadPeerTLS reads the peer certificate files again now (on SIGHUP).
func (w *Witness) ReloadPeerTLS() error {
	if w.peerTLS == nil {
		return nil
	}
	_, err := w.peerTLS.Reload()
	return err
}

// Wait blocks until ctx ends (nil) or the witness fails.
func (w *Witness) Wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case err := <-w.errc:
		return err
	}
}

// Stop stops the witness.
func (w *Witness) Stop() {
	w.once.Do(func() {
		if w.metrics != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = w.metrics.Shutdown(ctx)
			cancel()
		}
		if w.cancel != nil {
			w.cancel()
		}
		if w.order != nil {
			w.order.Stop()
		}
		w.wg.Wait()
	})
}
