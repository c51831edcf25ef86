// Command ordoctl is Ordo's admin CLI: it speaks to the admin API of the
// nodes (status, protocol, schema checks; docs/admin.md). main only calls
// internal/ctl, which holds the commands.
package main

import (
	"os"

	"github.com/ordo-db/ordo/internal/ctl"
)

func main() {
	os.Exit(ctl.Main(os.Args[1:], os.Stdout, os.Stderr))
}
