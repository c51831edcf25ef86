package ctl

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/ordo-db/ordo/internal/admin"
)

// drainOutput is what `ordoctl drain` prints with -o json|yaml.
type drainOutput struct {
	Endpoint string `json:"endpoint"`
	admin.Drained
}

func drainCmd(g *globals) *cobra.Command {
	var timeout time.Duration
	var undo bool
	cmd := &cobra.Command{
		Use:   "drain",
		Short: "Take a node out of service gently: no new clients, sessions ended between transactions",
		Long: `drain drains the node of the first of --endpoints that answers (give only that
node's endpoint): it refuses new clients (57P03; /readyz answers 503, so a
load balancer or a Kubernetes Service stops sending them) and ends each
client session as soon as it is between transactions (the client sees
PostgreSQL's 57P01 on its next statement and reconnects, to another node).
It waits until no session is left, or --timeout; sessions still inside a
transaction then are left to finish, and counted. Exits 0 once drained, 1 if
sessions were left. The node stays drained until 'ordoctl drain --undo'.
Drain a node before 'ordoctl member remove' or a restart for maintenance.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cs, err := g.clients()
			if err != nil {
				return err
			}
			defer closeAll(cs)
			var got admin.Drained
			c, _, err := startOnFirst(cs, func(c *admin.Client) (uint64, error) {
				var err error
				if undo {
					got, err = c.Undrain(cmd.Context())
				} else {
					got, err = c.Drain(cmd.Context(), timeout)
				}
				return 0, err
			})
			if err != nil {
				return err
			}
			out := drainOutput{Endpoint: c.Endpoint(), Drained: got}
			if err := g.render(cmd.OutOrStdout(), out, func(w io.Writer) {
				switch {
				case undo:
					fmt.Fprintf(w, "node %d takes clients again\n", got.NodeID)
				case got.Left == 0:
					fmt.Fprintf(w, "node %d drained: no client session left; it refuses new clients until ordoctl drain --undo\n", got.NodeID)
				default:
					fmt.Fprintf(w, "node %d draining: %d sessions still inside a transaction after %s were left to finish\n", got.NodeID, got.Left, timeout)
				}
			}); err != nil {
				return err
			}
			if got.Left > 0 {
				return fmt.Errorf("%w: %d sessions of node %d still inside a transaction", errCheckFailed, got.Left, got.NodeID)
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", admin.DefaultDrainTimeout, "how long to wait for sessions inside a transaction")
	cmd.Flags().BoolVar(&undo, "undo", false, "end a drain: the node takes clients again")
	return cmd
}
