// Command ordoctl is Ordo's admin CLI: its version and the cluster-wide
// schema check. Cluster administration (members, conflict classes) arrives
// with the admin API.
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/ordo-db/ordo/internal/version"
)

func main() {
	root := &cobra.Command{
		Use:           "ordoctl",
		Short:         "Administer an Ordo cluster",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print the version of ordoctl",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), "ordoctl", version.String())
		},
	})
	root.AddCommand(schemaCheckCmd())
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "ordoctl:", err)
		os.Exit(1)
	}
}
