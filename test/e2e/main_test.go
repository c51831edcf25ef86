package e2e

import (
	"flag"
	"os"
	"strconv"
	"testing"
)

// clustersAtOnce is how many of the package's tests run at once when go
// test is not given -parallel: every test calls t.Parallel(), and each
// runs its own cluster (three PostgreSQL servers, three nodes), so this
// is how many clusters share the machine. On CI's 2 cores two at a time
// took the package from 649 s to 445 s (most of a test is waiting for
// timeouts, fsyncs and restarts); more at once is untried. `go test
// -parallel N` chooses another number.
const clustersAtOnce = 2

func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		_ = flag.Set("test.parallel", strconv.Itoa(clustersAtOnce))
	}
	os.Exit(m.Run())
}
