// Command pgversion prints the PostgreSQL server binaries the harness
// (internal/pglocal) would run with the current environment, and their
// version: "PostgreSQL 18.6 (/path/to/bin)". `make test` prints it before
// each run so the output says which server the tests ran on.
package main

import (
	"fmt"
	"os"

	"github.com/ordo-db/ordo/internal/pglocal"
)

func main() {
	bin, err := pglocal.FindBinaries()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	v, err := pglocal.BinaryVersion(bin)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("%s (%s)\n", v, bin)
}
