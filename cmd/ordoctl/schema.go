package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ordo-db/ordo/internal/replica"
)

// errInconsistent makes ordoctl exit with status 1 after printing.
var errInconsistent = errors.New("schemas differ")

func schemaCheckCmd() *cobra.Command {
	var node string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "schema-check",
		Short: "Compare the schema of every node at one position of the total order",
		Long: `schema-check asks a node (by its metrics address) to start a schema
check: every node fingerprints its schema at the same position of the total
order, and each compares the others' fingerprints with its own. It prints
the comparison seen by that node, naming the objects that differ, and exits
with status 1 if any node's schema differs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			base := node
			if !strings.Contains(base, "://") {
				base = "http://" + base
			}
			client := &http.Client{Timeout: 10 * time.Second}
			resp, err := client.Post(base+"/schema/check", "application/json", nil)
			if err != nil {
				return fmt.Errorf("start the check on %s: %w", node, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("start the check on %s: %s: %s", node, resp.Status, strings.TrimSpace(string(body)))
			}
			var started struct {
				AtSeqno uint64 `json:"at_seqno"`
			}
			if err := json.Unmarshal(body, &started); err != nil {
				return fmt.Errorf("start the check: %w", err)
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "schema check at seqno %d\n", started.AtSeqno)
			deadline := time.Now().Add(timeout)
			for {
				st, err := fetchSchema(client, base)
				if err != nil {
					return err
				}
				done := st.AtSeqno >= started.AtSeqno && len(st.Peers) > 0
				for _, p := range st.Peers {
					if p.AtSeqno < started.AtSeqno {
						done = false
					}
				}
				if done || time.Now().After(deadline) {
					return report(out, st, started.AtSeqno, done)
				}
				time.Sleep(200 * time.Millisecond)
			}
		},
	}
	cmd.Flags().StringVar(&node, "node", "127.0.0.1:15732", "metrics address (host:port) of any node")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "how long to wait for every node's fingerprint")
	return cmd
}

func fetchSchema(client *http.Client, base string) (replica.SchemaStatus, error) {
	var st replica.SchemaStatus
	resp, err := client.Get(base + "/schema")
	if err != nil {
		return st, fmt.Errorf("read the outcome: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("read the outcome: %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return st, fmt.Errorf("read the outcome: %w", err)
	}
	return st, nil
}

func report(out io.Writer, st replica.SchemaStatus, at uint64, complete bool) error {
	fmt.Fprintf(out, "this node: schema %s at seqno %d\n", st.Hash, st.AtSeqno)
	ids := make([]int, 0, len(st.Peers))
	for id := range st.Peers {
		ids = append(ids, int(id))
	}
	sort.Ints(ids)
	bad := false
	for _, id := range ids {
		p := st.Peers[uint32(id)]
		switch {
		case p.AtSeqno < at:
			fmt.Fprintf(out, "node %d: no fingerprint at seqno %d yet (latest compared: %d)\n", id, at, p.AtSeqno)
		case p.Consistent:
			fmt.Fprintf(out, "node %d: same schema\n", id)
		default:
			bad = true
			fmt.Fprintf(out, "node %d: DIFFERENT schema:\n", id)
			for _, d := range p.Differences {
				fmt.Fprintf(out, "  %s\n", d)
			}
		}
	}
	if bad {
		return errInconsistent
	}
	if !complete {
		return errors.New("not every node answered in time")
	}
	return nil
}
