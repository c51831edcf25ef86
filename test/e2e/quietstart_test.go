package e2e

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestStaggeredStartIsQuiet: the nodes of a new cluster started one at a
// time, as an operator starts them on their machines (and `make demo`
// starts them), warn of nothing. The first node used to warn, before the
// others were up, that "prepared transactions left over from before a
// restart stay unresolved until the cluster is reachable": it had none,
// and only waited for a quorum. A warning in a new user's first minute is
// one they learn to ignore.
func TestStaggeredStartIsQuiet(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 3, "dbsm-si", nil, true)
	logs := &lockedBuffer{}
	c.logs = logs
	c.startNode(0)
	// Longer than a proposal waits for a quorum: node 1's first look
	// for leftovers gives up meanwhile.
	time.Sleep(c.cfgs[0].ProposeTimeout + 2*time.Second)
	c.startNode(1)
	c.startNode(2)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn := c.connect(0)
	_, err := conn.Exec(ctx, "CREATE TABLE quiet (k int PRIMARY KEY)")
	require.NoError(t, err)
	c.waitConverged()
	for i := range 3 {
		_, err := c.connect(i).Exec(ctx, "INSERT INTO quiet VALUES ($1)", i)
		require.NoError(t, err)
	}
	c.requireConverged("quiet")

	out := logs.String()
	var loud []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
			loud = append(loud, l)
		}
	}
	require.Empty(t, loud, "a new cluster started one node at a time warned")
	require.Contains(t, out, "waiting for a quorum", "node 1 waited for the others: the test must reach that wait")
}

// lockedBuffer is a bytes.Buffer several nodes' loggers write to.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
