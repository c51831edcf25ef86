package ctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/ordo-db/ordo/internal/admin"
)

// schemaCheckOutput is what `ordoctl schema-check -o json|yaml` prints.
type schemaCheckOutput struct {
	// Endpoint is the node that started the check and whose comparisons
	// are shown.
	Endpoint string `json:"endpoint"`
	AtSeqno  uint64 `json:"at_seqno"`
	// Complete: every other member's fingerprint at AtSeqno was compared.
	Complete bool `json:"complete"`
	// Consistent: every compared fingerprint matched.
	Consistent bool `json:"consistent"`
	// Missing are the members whose fingerprint at AtSeqno did not arrive
	// in time.
	Missing []uint64           `json:"missing,omitempty"`
	Schema  admin.SchemaStatus `json:"schema"`
}

// schemaPoll is how often schema-check asks for the comparisons.
const schemaPoll = 200 * time.Millisecond

func schemaCheckCmd(g *globals) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "schema-check",
		Short: "Compare the schema of every node at one position of the total order",
		Long: `schema-check asks a node (the first of --endpoints that answers) to start
a schema check: every node fingerprints its schema at the same position of
the total order, and each compares the others' fingerprints with its own.
It prints the comparison seen by that node, naming the objects that
differ, and exits 1 if any node's schema differs or a member's fingerprint
did not arrive within --timeout.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cs, err := g.clients()
			if err != nil {
				return err
			}
			defer closeAll(cs)
			ctx := cmd.Context()
			c, at, err := startOnFirst(cs, func(c *admin.Client) (uint64, error) { return c.StartSchemaCheck(ctx) })
			if err != nil {
				return err
			}
			st, err := c.Status(ctx)
			if err != nil {
				return err
			}
			out, err := waitSchema(ctx, c, st, at, timeout)
			if err != nil {
				return err
			}
			if err := g.render(cmd.OutOrStdout(), out, func(w io.Writer) { schemaReport(w, out) }); err != nil {
				return err
			}
			switch {
			case !out.Consistent:
				return fmt.Errorf("%w: schemas differ", errCheckFailed)
			case !out.Complete:
				return fmt.Errorf("%w: not every node's fingerprint arrived within %v (nodes %v)", errCheckFailed, timeout, out.Missing)
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "how long to wait for every node's fingerprint")
	return cmd
}

// startOnFirst starts a check on the first of cs that answers and returns
// it with the check's seqno; an error other than unreachable ends it.
func startOnFirst(cs []*admin.Client, start func(*admin.Client) (uint64, error)) (*admin.Client, uint64, error) {
	var unreachable []error
	for _, c := range cs {
		at, err := start(c)
		if err == nil {
			return c, at, nil
		}
		if !errors.Is(err, admin.ErrUnreachable) {
			return nil, 0, err
		}
		unreachable = append(unreachable, err)
	}
	return nil, 0, errors.Join(unreachable...)
}

// waitSchema polls c's comparisons until every other member's fingerprint
// at seqno at is compared, or timeout.
func waitSchema(ctx context.Context, c *admin.Client, st admin.Status, at uint64, timeout time.Duration) (schemaCheckOutput, error) {
	out := schemaCheckOutput{Endpoint: c.Endpoint(), AtSeqno: at}
	deadline := time.Now().Add(timeout)
	for {
		s, err := c.Schema(ctx)
		if err != nil {
			return out, err
		}
		out.Schema, out.Missing, out.Consistent = s, nil, true
		for _, m := range st.Members {
			if m.ID == uint64(st.NodeID) {
				continue
			}
			p, ok := s.Peers[uint32(m.ID)]
			if !ok || p.AtSeqno < at {
				out.Missing = append(out.Missing, m.ID)
			}
		}
		for _, p := range s.Peers {
			if p.AtSeqno >= at && !p.Consistent {
				out.Consistent = false
			}
		}
		out.Complete = s.AtSeqno >= at && len(out.Missing) == 0
		if out.Complete || time.Now().After(deadline) {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return out, ctx.Err()
		case <-time.After(schemaPoll):
		}
	}
}

func schemaReport(w io.Writer, out schemaCheckOutput) {
	st := out.Schema
	fmt.Fprintf(w, "schema check at seqno %d (asked %s)\n", out.AtSeqno, out.Endpoint)
	fmt.Fprintf(w, "this node: schema %s at seqno %d\n", dash(st.Hash), st.AtSeqno)
	ids := make([]uint32, 0, len(st.Peers))
	for id := range st.Peers {
		ids = append(ids, id)
	}
	missing := map[uint32]bool{}
	for _, id := range out.Missing {
		missing[uint32(id)] = true
		if _, ok := st.Peers[uint32(id)]; !ok {
			ids = append(ids, uint32(id))
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		p := st.Peers[id]
		switch {
		case missing[id]:
			fmt.Fprintf(w, "node %d: no fingerprint at seqno %d yet (latest compared: %d)\n", id, out.AtSeqno, p.AtSeqno)
		case p.Consistent:
			fmt.Fprintf(w, "node %d: same schema\n", id)
		default:
			fmt.Fprintf(w, "node %d: DIFFERENT schema:\n", id)
			for _, d := range p.Differences {
				fmt.Fprintf(w, "  %s\n", d)
			}
		}
	}
}
