package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/ordo-db/ordo/internal/certs"
)

// certCmd is `ordo cert`: the certificates of a cluster (internal/certs).
func certCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cert",
		Short: "Create the certificates of a cluster: a CA, node, client and server certificates",
		Long: `Creates the certificates nodes authenticate each other with (peer_tls in a
node's configuration; see docs/security.md). Keys are ECDSA P-256, written
with mode 0600; existing files are never replaced without --overwrite.

  ordo cert create-ca --dir certs
  ordo cert create-node --dir certs --id 1 --host 10.0.0.1 --host node1.example
  ordo cert create-client --dir certs --name alice
  ordo cert create-server --dir certs --name db --host db.example`,
	}
	cmd.AddCommand(createCACmd(), createNodeCmd(), createClientCmd(), createServerCmd())
	return cmd
}

// certFlags are the flags every create command takes.
func certFlags(cmd *cobra.Command, o *certs.Options, def time.Duration) {
	cmd.Flags().StringVar(&o.Dir, "dir", "certs", "certificate directory: ca.crt is read from it, new files are written into it")
	cmd.Flags().StringVar(&o.CAKey, "ca-key", "", "the CA's key file (default DIR/ca.key); keep it off the nodes")
	cmd.Flags().DurationVar(&o.Lifetime, "lifetime", def, "how long the certificate is valid")
	cmd.Flags().BoolVar(&o.Overwrite, "overwrite", false, "replace existing files")
}

func printWritten(w io.Writer, paths []string) {
	for _, p := range paths {
		fmt.Fprintln(w, "wrote", p)
	}
}

func createCACmd() *cobra.Command {
	var o certs.Options
	cmd := &cobra.Command{
		Use:   "create-ca",
		Short: "Create the cluster's certificate authority (ca.crt, ca.key)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			written, err := certs.CreateCA(o)
			printWritten(cmd.OutOrStdout(), written)
			return err
		},
	}
	certFlags(cmd, &o, certs.CALifetime)
	return cmd
}

func createNodeCmd() *cobra.Command {
	var (
		o     certs.Options
		id    uint64
		hosts []string
	)
	cmd := &cobra.Command{
		Use:   "create-node --id N --host HOST [--host HOST…]",
		Short: "Create node N's certificate (node-N.crt, node-N.key), signed by the CA",
		Long: `Creates the certificate of node N: it names the node id (URI
ordo://node/N, CN node-N), which peers check on every connection, and every
host name or IP address given with --host (the names peers and clients
reach the node by).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			written, err := certs.CreateNode(o, id, hosts)
			printWritten(cmd.OutOrStdout(), written)
			return err
		},
	}
	certFlags(cmd, &o, certs.NodeLifetime)
	cmd.Flags().Uint64Var(&id, "id", 0, "the node's id (its id: in the configuration)")
	cmd.Flags().StringArrayVar(&hosts, "host", nil, "a host name or IP address of the node (repeat for each)")
	_ = cmd.MarkFlagRequired("id")
	_ = cmd.MarkFlagRequired("host")
	return cmd
}

func createClientCmd() *cobra.Command {
	var (
		o    certs.Options
		name string
	)
	cmd := &cobra.Command{
		Use:   "create-client --name NAME",
		Short: "Create a client certificate (client-NAME.crt, client-NAME.key), signed by the CA",
		Long: `Creates a client certificate whose CN is NAME (a user or a program). It
names no node id, so peer ports refuse it; the admin API of a node with peer
TLS accepts it (ordoctl --cert, --key and --cacert; docs/admin.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			written, err := certs.CreateClient(o, name)
			printWritten(cmd.OutOrStdout(), written)
			return err
		},
	}
	certFlags(cmd, &o, certs.ClientLifetime)
	cmd.Flags().StringVar(&name, "name", "", "the client's name (the certificate's CN)")
	_ = cmd.MarkFlagRequired("name")
	return cmd
}

func createServerCmd() *cobra.Command {
	var (
		o     certs.Options
		name  string
		hosts []string
	)
	cmd := &cobra.Command{
		Use:   "create-server --name NAME --host HOST [--host HOST…]",
		Short: "Create a certificate for the client port (server-NAME.crt, server-NAME.key), signed by the CA",
		Long: `Creates the certificate nodes present to PostgreSQL clients (tls: in a
node's configuration): CN NAME, every host name or IP address clients reach
the nodes by (--host; one certificate may serve several nodes, or a load
balancer's name), server authentication only. Clients verify it with the
CA's certificate (sslrootcert=ca.crt sslmode=verify-full). It names no node
id: peer ports and the admin API refuse it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			written, err := certs.CreateServer(o, name, hosts)
			printWritten(cmd.OutOrStdout(), written)
			return err
		},
	}
	certFlags(cmd, &o, certs.ServerLifetime)
	cmd.Flags().StringVar(&name, "name", "", "the certificate's name (its CN and file names)")
	cmd.Flags().StringArrayVar(&hosts, "host", nil, "a host name or IP address clients connect to (repeat for each)")
	_ = cmd.MarkFlagRequired("name")
	_ = cmd.MarkFlagRequired("host")
	return cmd
}
