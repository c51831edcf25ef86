package ctl

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/ordo-db/ordo/internal/admin"
)

// nodeProtocol is one endpoint's answer to `ordoctl protocol show`.
type nodeProtocol struct {
	Endpoint string          `json:"endpoint"`
	Protocol *admin.Protocol `json:"protocol,omitempty"`
	Error    string          `json:"error,omitempty"`
}

type protocolOutput struct {
	Nodes []nodeProtocol `json:"nodes"`
}

func protocolCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "protocol",
		Short: "The termination protocol of the cluster",
		Args:  cobra.ArbitraryArgs,
		RunE:  groupRunE,
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "show",
		Short: "Show the termination protocol each node runs and what it guarantees",
		Long: `protocol show asks every node of --endpoints which termination protocol it
runs (dbsm and pgr: 1-copy serializable; dbsm-si: 1-copy snapshot
isolation), and exits 1 if they differ.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cs, err := g.clients()
			if err != nil {
				return err
			}
			defer closeAll(cs)
			ps, errs := each(cmd.Context(), cs, func(ctx context.Context, c *admin.Client) (admin.Protocol, error) {
				return c.Protocol(ctx)
			})
			out := protocolOutput{Nodes: []nodeProtocol{}}
			var problems []error
			names := map[string]bool{}
			for i, c := range cs {
				np := nodeProtocol{Endpoint: c.Endpoint()}
				if errs[i] != nil {
					np.Error = errs[i].Error()
					problems = append(problems, errs[i])
				} else {
					np.Protocol = &ps[i]
					names[ps[i].Name] = true
				}
				out.Nodes = append(out.Nodes, np)
			}
			if len(names) > 1 {
				problems = append(problems, fmt.Errorf("%w: the nodes run different protocols", errCheckFailed))
			}
			err = g.render(cmd.OutOrStdout(), out, func(w io.Writer) {
				fmt.Fprintln(w, "NODE\tENDPOINT\tPROTOCOL\tGUARANTEE\tCERTIFIES READS\tWINDOW\tSOURCE")
				for _, n := range out.Nodes {
					if p := n.Protocol; p != nil {
						fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%v\t%d\t%s\n", p.NodeID, n.Endpoint, p.Name, dash(p.Guarantee), p.CertifiesReads, p.CertificationWindow, p.Source)
					} else {
						fmt.Fprintf(w, "-\t%s\tunreachable: %s\n", n.Endpoint, n.Error)
					}
				}
			})
			if err != nil {
				return err
			}
			return errors.Join(problems...)
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:       "set NAME",
		Short:     "Switch the whole cluster to another termination protocol, online",
		ValidArgs: []string{"dbsm", "dbsm-si", "pgr", "cons"},
		Long: `protocol set switches the cluster to protocol NAME (dbsm, dbsm-si, pgr or
cons, docs/protocols.md) through the first node of --endpoints that answers:
the switch goes through the total order, so every node switches at the same
seqno, while clients keep working. Transactions the old protocol has not
decided by then abort with 40001 (retry them), as does any transaction whose
snapshot predates the switch; none is lost or applied twice. It waits until
that node switched and prints its protocol.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cs, err := g.clients()
			if err != nil {
				return err
			}
			defer closeAll(cs)
			var got admin.Protocol
			c, _, err := startOnFirst(cs, func(c *admin.Client) (uint64, error) {
				p, err := c.SwitchProtocol(cmd.Context(), args[0])
				got = p
				return p.Since, err
			})
			if err != nil {
				return err
			}
			out := protocolOutput{Nodes: []nodeProtocol{{Endpoint: c.Endpoint(), Protocol: &got}}}
			return g.render(cmd.OutOrStdout(), out, func(w io.Writer) {
				fmt.Fprintln(w, "NODE\tENDPOINT\tPROTOCOL\tGUARANTEE\tSINCE SEQNO")
				fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%d\n", got.NodeID, c.Endpoint(), got.Name, dash(got.Guarantee), got.Since)
			})
		},
	})
	return cmd
}
