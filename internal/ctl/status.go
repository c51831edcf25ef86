package ctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ordo-db/ordo/internal/admin"
)

// nodeStatus is one endpoint's answer to `ordoctl status`.
type nodeStatus struct {
	Endpoint string        `json:"endpoint"`
	Status   *admin.Status `json:"status,omitempty"`
	Error    string        `json:"error,omitempty"`
}

// statusOutput is what `ordoctl status -o json|yaml` prints.
type statusOutput struct {
	Nodes []nodeStatus `json:"nodes"`
}

func statusCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show each node: Raft state, leader, applied prefix and lag, readiness, transaction counts",
		Long: `status asks every node of --endpoints for its status and prints one line
per node: its Raft state, the leader it knows, term, commit index, applied
prefix and lag, whether it is ready (can commit now) and accepts updates,
its protocol and PostgreSQL version; then its transaction counts. Members
no endpoint covers are shown as the first node that answered sees them
(the applied prefix they last reported to it), so one endpoint is enough
for an overview.

Exits 1 if a node is not ready or refuses updates, 3 if a node could not
be reached or refused the credentials.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cs, err := g.clients()
			if err != nil {
				return err
			}
			defer closeAll(cs)
			sts, errs := each(cmd.Context(), cs, func(ctx context.Context, c *admin.Client) (admin.Status, error) {
				return c.Status(ctx)
			})
			out := statusOutput{Nodes: []nodeStatus{}}
			var problems []error
			for i, c := range cs {
				ns := nodeStatus{Endpoint: c.Endpoint()}
				if errs[i] != nil {
					ns.Error = errs[i].Error()
					problems = append(problems, errs[i])
				} else {
					ns.Status = &sts[i]
					problems = append(problems, checkStatus(&sts[i])...)
				}
				out.Nodes = append(out.Nodes, ns)
			}
			if err := g.render(cmd.OutOrStdout(), out, func(w io.Writer) { statusTable(w, out) }); err != nil {
				return err
			}
			return errors.Join(problems...)
		},
	}
}

// checkStatus returns what is wrong with a node that answered.
func checkStatus(st *admin.Status) []error {
	var errs []error
	if st.RefusesUpdates {
		errs = append(errs, fmt.Errorf("%w: node %d refuses updates: %s", errCheckFailed, st.NodeID, st.Refusal))
	}
	if !st.Ready.Ready {
		errs = append(errs, fmt.Errorf("%w: node %d is not ready: %s", errCheckFailed, st.NodeID, st.Ready.Reason))
	}
	return errs
}

func statusTable(w io.Writer, out statusOutput) {
	fmt.Fprintln(w, "NODE\tENDPOINT\tSTATE\tLEADER\tTERM\tCOMMIT\tAPPLIED\tLAG\tREADY\tUPDATES\tPROTOCOL\tPOSTGRES")
	seen := map[uint64]bool{}
	var first *admin.Status
	for _, n := range out.Nodes {
		st := n.Status
		if st == nil {
			fmt.Fprintf(w, "-\t%s\tunreachable\t-\t-\t-\t-\t-\t-\t-\t-\t-\n", n.Endpoint)
			continue
		}
		if first == nil {
			first = st
		}
		seen[uint64(st.NodeID)] = true
		ready, updates := "yes", "accepted"
		if !st.Ready.Ready {
			ready = "no"
		}
		if st.RefusesUpdates {
			updates = "REFUSED"
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", st.NodeID, n.Endpoint, st.Raft.State, dash(st.Leader),
			st.Raft.Term, st.Raft.Commit, st.AppliedPrefix, st.Lag, ready, updates, st.Protocol, dash(st.PostgresVersion))
	}
	// The other members, as the first node that answered sees them.
	if first != nil {
		for _, m := range first.Members {
			if seen[m.ID] {
				continue
			}
			state, applied, lag := "member", "-", "-"
			if m.Leader {
				state = "leader"
			}
			if m.Applied != nil {
				applied = fmt.Sprint(*m.Applied)
			}
			if m.Lag != nil {
				lag = fmt.Sprint(*m.Lag)
			}
			fmt.Fprintf(w, "%d\t(seen by node %d)\t%s\t-\t-\t-\t%s\t%s\t-\t-\t-\t-\n", m.ID, first.NodeID, state, applied, lag)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "NODE\tCOMMITS\tLOCAL\tREMOTE\tABORTS\tBY REASON")
	for _, n := range out.Nodes {
		if st := n.Status; st != nil {
			t := summarize(st.Transactions)
			fmt.Fprintf(w, "%d\t%d\t%d\t%d\t%d\t%s\n", st.NodeID, t.commits, t.local, t.remote, t.aborts, dash(t.reasons))
		}
	}
	if first != nil {
		hotTable(w, first)
	}
}

// hotTable prints the hottest conflicting tables and keys, as the first
// node that answered counted them (every node decides alike).
func hotTable(w io.Writer, st *admin.Status) {
	h := st.Hot
	fmt.Fprintln(w)
	if h.Conflicts == 0 {
		fmt.Fprintf(w, "HOTTEST CONFLICTS (last %d min, node %d): none\n", h.Minutes, st.NodeID)
		return
	}
	fmt.Fprintf(w, "HOTTEST CONFLICTS (last %d min, node %d: %d certification aborts)\tABORTS\tSHARE\n", h.Minutes, st.NodeID, h.Conflicts)
	for _, t := range h.Tables {
		fmt.Fprintf(w, "table %s\t%d\t%d%%\n", t.Name, t.Aborts, t.Percent)
	}
	for _, k := range h.Keys {
		fmt.Fprintf(w, "key %s\t%d\t%d%%\n", k.Name, k.Aborts, k.Percent)
	}
}

type txnTotals struct {
	commits, local, remote, aborts uint64
	reasons                        string // "certification 2, too_old 1"
}

func summarize(counts []admin.TxnCount) txnTotals {
	var t txnTotals
	byReason := map[string]uint64{}
	var reasons []string
	for _, c := range counts {
		switch c.Outcome {
		case "commit":
			t.commits += c.Count
			switch c.Origin {
			case "local":
				t.local += c.Count
			case "remote":
				t.remote += c.Count
			}
		case "abort":
			t.aborts += c.Count
			if _, ok := byReason[c.Reason]; !ok {
				reasons = append(reasons, c.Reason)
			}
			byReason[c.Reason] += c.Count
		}
	}
	var parts []string
	for _, r := range reasons {
		if byReason[r] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", r, byReason[r]))
		}
	}
	t.reasons = strings.Join(parts, ", ")
	return t
}
