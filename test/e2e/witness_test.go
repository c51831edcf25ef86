package e2e

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ordo-db/ordo/internal/node"
	"github.com/ordo-db/ordo/pkg/config"
)

// startWitnessCluster starts two data nodes and a witness (id 3, in the
// bootstrap set), and returns the cluster and the witness.
func startWitnessCluster(t *testing.T, protocol string) (*cluster, *node.Witness) {
	waddr := freeAddr(t)
	c := startClusterWith(t, 2, protocol, func(cfg *config.Node) {
		cfg.Peers[3] = waddr
		cfg.Witnesses = []uint32{3}
	})
	wcfg := &config.Node{
		ID: 3, PeerListen: waddr, DataDir: filepath.Join(c.dir, "witness3"),
		Peers: c.cfgs[0].Peers, Witnesses: []uint32{3}, ProposeTimeout: 3 * time.Second,
	}
	wcfg.Defaults()
	require.NoError(t, wcfg.Validate())
	w, err := node.StartWitness(context.Background(), wcfg, c.logger(2), nil)
	require.NoError(t, err)
	t.Cleanup(w.Stop)
	return c, w
}

// Two data nodes and a witness (ordo witness: a Raft voter without
// PostgreSQL) keep committing when either data node is lost, under bank
// transfers; the members list shows the witness; afterwards both data
// nodes are identical with every acknowledged transfer. An entry one data
// node cannot carry out is decided between the two data nodes alone (the
// witness never votes on entries: counted, the vote would wait for it
// for good): the origin's side wins the tie, the other leaves and rejoins
// by state transfer.
func TestWitnessKeepsTwoDataNodesWriting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, w := startWitnessCluster(t, "dbsm")
	ms, err := c.adminClient(0).Members(ctx)
	require.NoError(t, err)
	roles := map[uint64]string{}
	for _, m := range ms.Members {
		roles[m.ID] = m.Role
	}
	require.Equal(t, map[uint64]string{1: "voter", 2: "voter", 3: "witness"}, roles)

	b := newBank(c, 10)
	_, err = c.connect(0).Exec(ctx, "CREATE TABLE wt (id int PRIMARY KEY)")
	require.NoError(t, err)
	c.waitConverged()
	b.run([]int{0, 0, 0}, -1)
	for _, lost := range []int{1, 0} {
		other := 1 - lost
		time.Sleep(time.Second)
		c.nodes[lost].Stop()
		before := b.commits.Load()
		// Writes go on through the other node, with the witness as the
		// quorum's second voter.
		conn := c.connect(other)
		for i := 0; i < 20; i++ {
			_, err := conn.Exec(ctx, "INSERT INTO wt VALUES ($1)", 100*lost+i)
			require.NoError(t, err, "a write through node %d with node %d down", other+1, lost+1)
		}
		if other == 0 {
			require.Eventually(t, func() bool { return b.commits.Load() > before+20 }, 30*time.Second, 100*time.Millisecond,
				"transfers through node 1 go on with node 2 down")
		}
		require.Eventually(t, func() bool { return c.nodes[other].Order().Leader() == uint64(other+1) }, 10*time.Second, 50*time.Millisecond,
			"the data node leads, not the witness")
		c.startNode(lost)
		c.waitConverged()
		if lost == 1 {
			b.halt() // its clients are on node 1, which goes down next
		}
	}
	c.waitConverged()
	c.requireIdentical()
	for i := range c.nodes {
		b.check(i)
	}
	top := c.nodes[0].Order().Delivered()
	require.Eventually(t, func() bool { return w.Order().Delivered() >= top }, 10*time.Second, 50*time.Millisecond, "the witness carries the order")
	t.Logf("%d transfers committed, %d aborted", b.commits.Load(), b.aborts.Load())

	// A poison entry: node 2 cannot create the table node 1 created.
	_, err = c.direct(1).Exec(ctx, "CREATE TABLE clash (id int PRIMARY KEY)")
	require.NoError(t, err)
	_, err = c.connect(0).Exec(ctx, "CREATE TABLE clash (id int PRIMARY KEY)")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return c.replicaErr(1) != "" }, 30*time.Second, 100*time.Millisecond,
		"the vote is decided between the two data nodes")
	require.Contains(t, c.replicaErr(1), "--rejoin")
	require.Empty(t, c.replicaErr(0), "the origin's side wins the tie")
	_, err = c.connect(0).Exec(ctx, "INSERT INTO clash VALUES (1)")
	require.NoError(t, err, "node 1 and the witness go on")
	c.rejoin(1, 0)
	_, err = c.connect(1).Exec(ctx, "INSERT INTO clash VALUES (2)")
	require.NoError(t, err, "the rejoined node serves")
	c.waitConverged()
	c.requireIdentical()
}

// A witness added to a running two-node cluster ('ordo witness --join'):
// a learner that is a witness, whose log starts at a member's last applied
// entry, promotes itself to voter; then either data node may be lost.
func TestWitnessJoinsARunningCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := startClusterWith(t, 2, "dbsm-si", func(cfg *config.Node) { cfg.CertificationWindow = 20 })
	_, err := c.connect(0).Exec(ctx, "CREATE TABLE wt (id int PRIMARY KEY)")
	require.NoError(t, err)
	c.waitConverged() // node 2 inserts next (it had not applied the table yet, once, on a loaded machine)
	for i := 0; i < 50; i++ {
		_, err := c.connect(i%2).Exec(ctx, "INSERT INTO wt VALUES ($1)", i)
		require.NoError(t, err)
	}
	const wid = 9
	peers := map[uint32]string{}
	for id, a := range c.cfgs[0].Peers {
		peers[id] = a
	}
	peers[wid] = freeAddr(t)
	wcfg := &config.Node{ID: wid, PeerListen: peers[wid], DataDir: filepath.Join(c.dir, "witness"), Peers: peers, Witnesses: []uint32{wid}}
	wcfg.Defaults()
	require.NoError(t, wcfg.Validate())
	w, err := node.StartWitness(ctx, wcfg, c.logger(2), &node.WitnessJoin{From: c.adminClient(1)})
	require.NoError(t, err)
	t.Cleanup(w.Stop)
	role := func() string {
		ms, err := c.adminClient(0).Members(ctx)
		require.NoError(t, err)
		for _, m := range ms.Members {
			if m.ID == wid {
				return m.Role
			}
		}
		return ""
	}
	require.Eventually(t, func() bool { return role() == "witness" }, 30*time.Second, 100*time.Millisecond,
		"the witness promotes itself (role %q)", role())
	require.True(t, c.nodes[1].Order().IsWitness(wid))

	c.nodes[1].Stop()
	for i := 50; i < 70; i++ {
		_, err := c.connect(0).Exec(ctx, "INSERT INTO wt VALUES ($1)", i)
		require.NoError(t, err, "node 1 commits with the witness while node 2 is down")
	}
	c.startNode(1)
	c.waitConverged()
	c.requireIdentical()

	// A data node that joins now starts its log a window (20) before its
	// copy, past the entry that added the witness: it learns the witness
	// from its donor, or it would count it among the voters on entries.
	for i := 70; i < 120; i++ {
		_, err := c.connect(i%2).Exec(ctx, "INSERT INTO wt VALUES ($1)", i)
		require.NoError(t, err)
	}
	n3 := c.addPostgres()
	var out bytes.Buffer
	require.NoError(t, c.startJoin(ctx, n3, 0, &out), out.String())
	require.True(t, c.nodes[n3].Order().IsWitness(wid), "the joiner knows the witness")
	c.waitConverged()
	c.requireIdentical()
}
