// Command ordo is an Ordo node: a PostgreSQL wire-protocol endpoint in front
// of one PostgreSQL server, replicating its update transactions with the
// other nodes. main only wires: it parses flags, builds components and runs
// them until interrupted.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/ordo-db/ordo/internal/admin"
	"github.com/ordo-db/ordo/internal/certs"
	"github.com/ordo-db/ordo/internal/demo"
	"github.com/ordo-db/ordo/internal/node"
	"github.com/ordo-db/ordo/internal/replica"
	"github.com/ordo-db/ordo/internal/totalorder/storage"
	"github.com/ordo-db/ordo/internal/version"
	"github.com/ordo-db/ordo/pkg/config"
)

func main() {
	root := &cobra.Command{
		Use:           "ordo",
		Short:         "Multi-master replication for PostgreSQL",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(versionCmd(), demoCmd(), startCmd(), joinCmd(), witnessCmd(), certCmd())
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "ordo:", err)
		os.Exit(1)
	}
}

func versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of ordo",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), "ordo", version.String())
		},
	}
}

func demoCmd() *cobra.Command {
	var o demo.Options
	var verbose bool
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a local cluster: PostgreSQL servers with an Ordo node in front of each",
		Long: `Starts local PostgreSQL servers (found on this machine; run as an unprivileged
user when ordo runs as root) and one Ordo node in front of each, prints one
line per node with its Ordo connection string and its PostgreSQL server's,
and the ordoctl command that shows the cluster's status, and runs until
interrupted (Ctrl-C), then stops everything.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			level := slog.LevelWarn
			if verbose {
				level = slog.LevelInfo
			}
			o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
			o.Out = cmd.OutOrStdout()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return demo.Run(ctx, o)
		},
	}
	cmd.Flags().IntVarP(&o.Nodes, "nodes", "n", 3, "number of nodes")
	cmd.Flags().IntVar(&o.BasePort, "base-port", 15432, "Ordo port of node 1 (node i: base+i-1; its PostgreSQL: base+100+i-1, Raft +200, metrics +300, admin API +400); 0 picks free ports")
	cmd.Flags().StringVar(&o.Dir, "dir", "", "keep the cluster's data in this directory between runs (default: a temporary directory, removed on exit)")
	cmd.Flags().StringVar(&o.Protocol, "protocol", "dbsm", "termination protocol: dbsm, dbsm-si, dbsm-rc, pgr or cons (docs/protocols.md)")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "log progress")
	cmd.SetContext(context.Background())
	return cmd
}

func startCmd() *cobra.Command {
	var path, logLevel string
	cmd := &cobra.Command{
		Use:   "start --config node.yaml",
		Short: "Run one Ordo node in front of its PostgreSQL server",
		Long: `Runs one node of an Ordo cluster as configured in a YAML file (see
docs/configuration.md): it bootstraps the local PostgreSQL on first start
(the _ordo schema, a publication and a logical replication slot), joins the
Raft group of its peers, and serves PostgreSQL clients until interrupted.
On SIGHUP it reads its peer TLS files and its client certificate (tls:)
again (it also notices changes by itself within seconds); new connections
use them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if path == "" {
				return fmt.Errorf("--config is required")
			}
			log, cfg, err := loadNode(path, logLevel)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			injectFaults(ctx, log)
			n, err := node.Start(ctx, cfg, log)
			if err != nil {
				return err
			}
			return serve(ctx, cmd, cfg, log, n, hup)
		},
	}
	cmd.Flags().StringVarP(&path, "config", "c", "", "node configuration file (YAML)")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	cmd.SetContext(context.Background())
	return cmd
}

// injectFaults starts the fault injections the safety suite asks for
// through the environment (never set in a deployment): slow fsyncs of the
// Raft log (storage.FaultSyncDelayEnv), and the delivery loop stopped
// between telling a commit and its COMMIT PREPARED
// (replica.FaultTellStallEnv, read by the replica itself).
func injectFaults(ctx context.Context, log *slog.Logger) {
	if path := os.Getenv(storage.FaultSyncDelayEnv); path != "" {
		log.Warn("fault injection: Raft log fsyncs are delayed by the duration in a file (a test setting)", "env", storage.FaultSyncDelayEnv, "file", path)
		go storage.WatchSyncDelayFile(ctx, path)
	}
	if path := os.Getenv(replica.FaultTellStallEnv); path != "" {
		log.Warn("fault injection: the delivery loop stops after telling a commit, before its COMMIT PREPARED, while a file exists (a test setting)", "env", replica.FaultTellStallEnv, "file", path)
	}
}

// serve runs a started node until ctx ends or the node fails, reloading
// its TLS files on SIGHUP (hup: registered before the node started).
func serve(ctx context.Context, cmd *cobra.Command, cfg *config.Node, log *slog.Logger, n *node.Node, hup <-chan os.Signal) error {
	defer n.Stop()
	fmt.Fprintf(cmd.OutOrStdout(), "ordo node %d serving PostgreSQL clients on %s\n", cfg.ID, n.ClientAddr())
	done := make(chan error, 1)
	go func() { done <- n.Wait(ctx) }() // returns once ctx ends or the node fails
	for {
		select {
		case err := <-done:
			return err
		case <-hup:
			if err := n.ReloadPeerTLS(); err != nil {
				log.Error("SIGHUP: peer TLS files not reloaded; keeping the previous certificates", "err", err)
			}
			if err := n.ReloadClientTLS(); err != nil {
				log.Error("SIGHUP: client TLS files not reloaded; keeping the previous certificate", "err", err)
			}
		}
	}
}

func joinCmd() *cobra.Command {
	var path, logLevel, from, tokenFile, donorPostgres, pgBin string
	var rejoin bool
	cmd := &cobra.Command{
		Use:   "join --config node.yaml --from ADMIN_ADDRESS",
		Short: "Add a node with an empty PostgreSQL database to a running cluster, then run it",
		Long: `Joins a running cluster (docs/membership.md): asks the member whose admin API
is at --from to add this node as a Raft learner, copies that member's
replicated database at an applied prefix S into this node's empty database
(roles, schema, rows, sequences; progress on stdout and in the ordo_join_*
metrics) while the cluster keeps serving, then runs the node as 'ordo start'
does: it replays the order after S and makes itself a voter once caught up.
Run it again after a failure: an unfinished copy is started over; once the
copy is done it only starts the node. node.yaml's peers: may name only the
bootstrap members; the donor tells the joiner the others.

With --rejoin a node that is a member already comes back under its own id:
one down for longer than the others' logs keep (log_retention_entries), one
the cluster voted out, or one whose data differs from the others'. Its
database is dropped and replaced by the donor's copy (whatever it holds:
stop the node first), its Raft state and id are kept.

The donor's admin API is called with the node's peer certificate when
peer_tls is set (the admin API accepts certificates of the peer CA), else
with --token-file. pg_dump, pg_dumpall and pg_restore of the PostgreSQL
version of the cluster must be in --pg-bin or on PATH.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if path == "" || from == "" {
				return fmt.Errorf("--config and --from are required")
			}
			log, cfg, err := loadNode(path, logLevel)
			if err != nil {
				return err
			}
			o, err := memberClientOptions(cfg, tokenFile)
			if err != nil {
				return err
			}
			donor := admin.NewClient(from, o)
			defer donor.Close()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			injectFaults(ctx, log)
			n, err := node.StartJoin(ctx, cfg, log, node.JoinOptions{
				From: donor, DonorPostgres: donorPostgres, BinDir: pgBin, Progress: cmd.OutOrStdout(), Rejoin: rejoin,
			})
			if err != nil {
				return err
			}
			return serve(ctx, cmd, cfg, log, n, hup)
		},
	}
	cmd.Flags().StringVarP(&path, "config", "c", "", "node configuration file (YAML)")
	cmd.Flags().StringVar(&from, "from", "", "admin API address (host:port) of the member to copy from")
	cmd.Flags().StringVar(&tokenFile, "token-file", "", "file holding the donor's admin token (nodes without peer_tls)")
	cmd.Flags().StringVar(&donorPostgres, "donor-postgres", "", "connection string of the donor's database (default: the address the donor reports, with this node's password)")
	cmd.Flags().BoolVar(&rejoin, "rejoin", false, "this node is a member already: replace its database with the donor's copy and rejoin under its own id")
	cmd.Flags().StringVar(&pgBin, "pg-bin", "", "directory of pg_dump, pg_dumpall and pg_restore (default: PATH)")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	cmd.SetContext(context.Background())
	return cmd
}

func witnessCmd() *cobra.Command {
	var path, logLevel, joinFrom, tokenFile string
	cmd := &cobra.Command{
		Use:   "witness --config witness.yaml [--join ADMIN_ADDRESS]",
		Short: "Run a witness: a Raft voter without PostgreSQL",
		Long: `Runs a witness (docs/membership.md): a member that keeps the Raft log and
votes, so that two data nodes and a witness keep committing when either
data node is lost, and carries out nothing (it has no PostgreSQL and serves
no clients). Its node.yaml needs id, peer_listen, data_dir, peers and
witnesses (listing its own id; the data nodes list the bootstrap
witnesses too), and peer_tls off loopback; no postgres, no listen.

A witness in the bootstrap set starts with the others. To add one to a
running cluster, pass --join with the admin API of any member: it is added
as a learner that is a witness, its log starts at that member's last
applied entry, and it promotes itself to voter once caught up. The
member's admin API is called with the witness's peer certificate when
peer_tls is set, else with --token-file.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if path == "" {
				return fmt.Errorf("--config is required")
			}
			log, cfg, err := loadNode(path, logLevel)
			if err != nil {
				return err
			}
			var j *node.WitnessJoin
			if joinFrom != "" {
				o, err := memberClientOptions(cfg, tokenFile)
				if err != nil {
					return err
				}
				from := admin.NewClient(joinFrom, o)
				defer from.Close()
				j = &node.WitnessJoin{From: from}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			hup := make(chan os.Signal, 1)
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			injectFaults(ctx, log)
			w, err := node.StartWitness(ctx, cfg, log, j)
			if err != nil {
				return err
			}
			defer w.Stop()
			fmt.Fprintf(cmd.OutOrStdout(), "ordo witness %d voting on %s\n", cfg.ID, cfg.PeerListen)
			done := make(chan error, 1)
			go func() { done <- w.Wait(ctx) }()
			for {
				select {
				case err := <-done:
					return err
				case <-hup:
					if err := w.ReloadPeerTLS(); err != nil {
						log.Error("SIGHUP: peer TLS files not reloaded; keeping the previous certificates", "err", err)
					}
				}
			}
		},
	}
	cmd.Flags().StringVarP(&path, "config", "c", "", "witness configuration file (YAML)")
	cmd.Flags().StringVar(&joinFrom, "join", "", "admin API address (host:port) of a member: add this witness to that running cluster")
	cmd.Flags().StringVar(&tokenFile, "token-file", "", "file holding the member's admin token (without peer_tls)")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	cmd.SetContext(context.Background())
	return cmd
}

// memberClientOptions is how a node calls another member's admin API:
// with its peer certificate when peer_tls is set, else with the token in
// tokenFile.
func memberClientOptions(cfg *config.Node, tokenFile string) (admin.ClientOptions, error) {
	var o admin.ClientOptions
	if pt := cfg.PeerTLS; pt.CertFile != "" {
		var err error
		if o.TLS, err = certs.AdminClientConfig(pt.CertFile, pt.KeyFile, pt.CAFile); err != nil {
			return o, fmt.Errorf("peer_tls: %w", err)
		}
	}
	if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil {
			return o, fmt.Errorf("--token-file: %w", err)
		}
		o.Token = strings.TrimSpace(string(b))
	}
	return o, nil
}

// loadNode reads --config and builds the logger --log-level asks for.
func loadNode(path, logLevel string) (*slog.Logger, *config.Node, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(logLevel)); err != nil {
		return nil, nil, fmt.Errorf("--log-level: %w", err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		return nil, nil, err
	}
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level})), cfg, nil
}
