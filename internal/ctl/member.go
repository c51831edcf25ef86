package ctl

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/ordo-db/ordo/internal/admin"
)

// memberOutput is the answer of `ordoctl member …`: the members as the
// node that answered sees them.
type memberOutput struct {
	Endpoint string `json:"endpoint"`
	admin.Members
}

func memberCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "member",
		Short: "The cluster's members: list, add, promote and remove nodes",
		Args:  cobra.ArbitraryArgs,
		RunE:  groupRunE,
	}
	render := func(cmd *cobra.Command, c *admin.Client, m admin.Members) error {
		out := memberOutput{Endpoint: c.Endpoint(), Members: m}
		return g.render(cmd.OutOrStdout(), out, func(w io.Writer) {
			fmt.Fprintln(w, "ID\tROLE\tSTATE\tLEADER\tADDRESS\tAPPLIED\tBEHIND")
			for _, r := range m.Members {
				fmt.Fprintf(w, "%d\t%s\t%s\t%v\t%s\t%s\t%s\n", r.ID, r.Role, r.State, r.Leader, dash(r.Addr), opt(r.Applied), opt(r.Behind))
			}
		})
	}
	// onFirst runs f on the first node of --endpoints that answers.
	onFirst := func(cmd *cobra.Command, f func(context.Context, *admin.Client) (admin.Members, error)) error {
		cs, err := g.clients()
		if err != nil {
			return err
		}
		defer closeAll(cs)
		var got admin.Members
		c, _, err := startOnFirst(cs, func(c *admin.Client) (uint64, error) {
			m, err := f(cmd.Context(), c)
			got = m
			return 0, err
		})
		if err != nil {
			return err
		}
		return render(cmd, c, got)
	}
	// onID runs a change of member id (the command's argument) on the
	// first node that answers.
	onID := func(cmd *cobra.Command, arg string, change func(*admin.Client, context.Context, uint64) (admin.Members, error)) error {
		id, err := strconv.ParseUint(arg, 10, 32)
		if err != nil || id == 0 {
			return usagef("ID must be a node id (1 to 4294967295): %q", arg)
		}
		return onFirst(cmd, func(ctx context.Context, c *admin.Client) (admin.Members, error) { return change(c, ctx, id) })
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "List the members: role (voter, learner), state, address, how far behind",
		Long: `member list shows the Raft group's members as the first node of --endpoints
that answers sees them: each member's role (voter; learner while it joins),
state (live, behind: more than 1000 seqnos behind that node, unreachable),
peer address and applied prefix.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return onFirst(cmd, func(ctx context.Context, c *admin.Client) (admin.Members, error) { return c.Members(ctx) })
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "add ID PEER_ADDRESS",
		Short: "Add a node as a learner (then start it with ordo join)",
		Long: `member add adds node ID, whose peer_listen is PEER_ADDRESS, to the cluster as
a Raft learner: it receives the order but does not vote. Start the node with
'ordo join --config node.yaml --from ADMIN_ADDRESS' (docs/membership.md): it
copies a member's database, replays the order from there and makes itself a
voter once caught up. 'ordo join' adds the node itself if it is not a member
yet, so this command is only needed to add it ahead of time. Ids are never
reused: a removed id is refused.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseUint(args[0], 10, 32)
			if err != nil || id == 0 {
				return usagef("ID must be a node id (1 to 4294967295): %q", args[0])
			}
			return onFirst(cmd, func(ctx context.Context, c *admin.Client) (admin.Members, error) {
				return c.AddMember(ctx, id, args[1])
			})
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "promote ID",
		Short: "Make a learner a voter now",
		Long: `member promote makes learner ID a voter. A node joining with 'ordo join'
promotes itself once it has caught up with the order, so this is for a
learner added ahead of time, or one the operator will not wait for: a voter
counts toward every quorum from then on, so promote a node that is behind
only if the others can form a quorum without it. A voter is left as it is.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return onID(cmd, args[0], (*admin.Client).PromoteMember)
		},
	})
	var drainTimeout time.Duration
	var noDrain bool
	remove := &cobra.Command{
		Use:   "remove ID",
		Short: "Remove a node from the cluster for good (draining it first)",
		Long: `member remove removes node ID from the Raft group. If node ID's own admin API
is among --endpoints and answers, it is drained first, as 'ordoctl drain'
does: it refuses new clients and ends each session between transactions,
for up to --drain-timeout, so that transactions it is committing finish
rather than end with 08007 (those still inside a transaction then are
counted and removed with the node). A node that does not answer (down) is
removed at once, with a note; --no-drain removes at once in any case.

The removed node stops taking part in the order and refuses clients with an
error that names its removal; it never starts again with its old identity
(its id and data directory): to bring the machine back, wipe it and join
it with a new id. The others keep committing (a 3-node cluster becomes a
2-node one, which needs both nodes for a quorum). The removal is asked of
another node of --endpoints when there is one.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseUint(args[0], 10, 32)
			if err != nil || id == 0 {
				return usagef("ID must be a node id (1 to 4294967295): %q", args[0])
			}
			cs, err := g.clients()
			if err != nil {
				return err
			}
			defer closeAll(cs)
			// Which endpoint is node id itself?
			var self *admin.Client
			others := make([]*admin.Client, 0, len(cs))
			for _, c := range cs {
				if st, err := c.Status(cmd.Context()); err == nil && uint64(st.NodeID) == id && self == nil {
					self = c
					continue
				}
				others = append(others, c)
			}
			switch {
			case noDrain:
			case self == nil:
				fmt.Fprintf(cmd.ErrOrStderr(), "node %d's admin API is not among --endpoints or does not answer: it is removed without a drain (transactions it is committing end with 08007)\n", id)
			default:
				fmt.Fprintf(cmd.ErrOrStderr(), "draining node %d (%s) for up to %s…\n", id, self.Endpoint(), drainTimeout)
				d, err := self.Drain(cmd.Context(), drainTimeout)
				switch {
				case err != nil:
					fmt.Fprintf(cmd.ErrOrStderr(), "node %d not drained (%v): removing it anyway\n", id, err)
				case d.Left > 0:
					fmt.Fprintf(cmd.ErrOrStderr(), "node %d drained but for %d sessions still inside a transaction (their commits end with 08007)\n", id, d.Left)
				default:
					fmt.Fprintf(cmd.ErrOrStderr(), "node %d drained: no client session left\n", id)
				}
			}
			if self != nil {
				others = append(others, self) // last resort: the node removes itself
			}
			var got admin.Members
			c, _, err := startOnFirst(others, func(c *admin.Client) (uint64, error) {
				m, err := c.RemoveMember(cmd.Context(), id)
				got = m
				return 0, err
			})
			if err != nil {
				return err
			}
			return render(cmd, c, got)
		},
	}
	remove.Flags().DurationVar(&drainTimeout, "drain-timeout", admin.DefaultDrainTimeout, "how long to wait for the node's sessions inside a transaction before removing it")
	remove.Flags().BoolVar(&noDrain, "no-drain", false, "remove the node at once, without draining it")
	cmd.AddCommand(remove)
	return cmd
}

// opt renders an optional number, "-" when absent.
func opt(v *uint64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatUint(*v, 10)
}
