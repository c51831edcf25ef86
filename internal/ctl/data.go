package ctl

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/ordo-db/ordo/internal/admin"
)

// dataCheckOutput is what `ordoctl data-check -o json|yaml` prints.
type dataCheckOutput struct {
	Endpoint   string           `json:"endpoint"`
	AtSeqno    uint64           `json:"at_seqno"`
	Complete   bool             `json:"complete"`
	Consistent bool             `json:"consistent"`
	Missing    []uint64         `json:"missing,omitempty"`
	Data       admin.DataStatus `json:"data"`
}

func dataCheckCmd(g *globals) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "data-check",
		Short: "Compare the data of every node at one position of the total order",
		Long: `data-check asks a node (the first of --endpoints that answers) to start a
data check: every node checksums its replicated tables in a snapshot taken
at the same position of the total order, and each compares the others'
checksums with its own. It prints the comparison seen by that node, naming
the tables and key buckets that differ, and exits 1 if any node's data
differs or a member's checksums did not arrive within --timeout.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cs, err := g.clients()
			if err != nil {
				return err
			}
			defer closeAll(cs)
			ctx := cmd.Context()
			c, at, err := startOnFirst(cs, func(c *admin.Client) (uint64, error) { return c.StartDataCheck(ctx) })
			if err != nil {
				return err
			}
			st, err := c.Status(ctx)
			if err != nil {
				return err
			}
			out := dataCheckOutput{Endpoint: c.Endpoint(), AtSeqno: at}
			for deadline := time.Now().Add(timeout); ; {
				d, err := c.Data(ctx)
				if err != nil {
					return err
				}
				out.Data, out.Missing, out.Consistent = d, nil, d.Error == ""
				for _, m := range st.Members {
					if p, ok := d.Peers[uint32(m.ID)]; m.ID != uint64(st.NodeID) && (!ok || p.AtSeqno < at) {
						out.Missing = append(out.Missing, m.ID)
					}
				}
				for _, p := range d.Peers {
					if p.AtSeqno >= at && !p.Consistent {
						out.Consistent = false
					}
				}
				out.Complete = d.AtSeqno >= at && len(out.Missing) == 0
				if out.Complete || time.Now().After(deadline) {
					break
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(schemaPoll):
				}
			}
			if err := g.render(cmd.OutOrStdout(), out, func(w io.Writer) { dataReport(w, out) }); err != nil {
				return err
			}
			switch {
			case !out.Consistent:
				return fmt.Errorf("%w: data differs", errCheckFailed)
			case !out.Complete:
				return fmt.Errorf("%w: not every node's checksums arrived within %v (nodes %v)", errCheckFailed, timeout, out.Missing)
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "how long to wait for every node's checksums")
	return cmd
}

func dataReport(w io.Writer, out dataCheckOutput) {
	d := out.Data
	fmt.Fprintf(w, "data check at seqno %d (asked %s): %d tables\n", out.AtSeqno, out.Endpoint, d.Tables)
	if d.Error != "" {
		fmt.Fprintf(w, "this node could not checksum its data: %s\n", d.Error)
	}
	ids := make([]uint32, 0, len(d.Peers))
	for id := range d.Peers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		p := d.Peers[id]
		switch {
		case p.AtSeqno < out.AtSeqno:
			fmt.Fprintf(w, "node %d: no checksums at seqno %d yet\n", id, out.AtSeqno)
		case p.Consistent:
			fmt.Fprintf(w, "node %d: same data\n", id)
		default:
			fmt.Fprintf(w, "node %d: DIFFERENT data:\n", id)
			for _, diff := range p.Differences {
				fmt.Fprintf(w, "  %s\n", diff)
			}
		}
	}
	for _, id := range out.Missing {
		if _, ok := d.Peers[uint32(id)]; !ok {
			fmt.Fprintf(w, "node %d: no checksums yet\n", id)
		}
	}
}

func txnStatusCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "txn-status LABEL",
		Short: "Say whether the transaction labelled LABEL committed",
		Long: `txn-status asks a node (the first of --endpoints that answers), once it has
caught up with the cluster, what became of the transaction labelled LABEL
with SET ordo.txn_label: committed, aborted, or unknown (not in the total
order, or older than the retention; docs/outcomes.md). It exits 0 for
committed, 1 for aborted or unknown.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cs, err := g.clients()
			if err != nil {
				return err
			}
			defer closeAll(cs)
			var unreachable []error
			for _, c := range cs {
				t, err := c.TxnStatus(cmd.Context(), args[0])
				if errors.Is(err, admin.ErrUnreachable) {
					unreachable = append(unreachable, err)
					continue
				}
				if err != nil {
					return err
				}
				if err := g.render(cmd.OutOrStdout(), t, func(w io.Writer) { fmt.Fprintf(w, "%s: %s\n", t.Label, t.Status) }); err != nil {
					return err
				}
				if t.Status != "committed" {
					return fmt.Errorf("%w: %s", errCheckFailed, t.Status)
				}
				return nil
			}
			return errors.Join(unreachable...)
		},
	}
}
