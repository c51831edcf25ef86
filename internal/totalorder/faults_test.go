package totalorder

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/ordo-db/ordo/internal/totalorder/faults"
)

func TestAgreementUnderFaults(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c := newTestCluster(t, 3, func(cfg *Config) { cfg.ProposeTimeout = 500 * time.Millisecond })
	c.startAll()
	defer c.stopAll()
	c.leader(5 * time.Second)
	bad := faults.Link{Delay: 2 * time.Millisecond, Drop: 0.03, Duplicate: 0.2}
	for _, a := range ids(3) {
		for _, b := range ids(3) {
			if a != b {
				c.node(a).faults.SetLink(b, bad)
			}
		}
	}
	acks := c.proposeRetry(ids(3), 2, 30, "lossy")
	for _, tn := range c.running() {
		tn.faults.Heal()
	}
	for p, s := range c.proposeRetry(ids(3), 1, 5, "healed") {
		acks[p] = s
	}
	checkAgreement(t, c.running(), acks)
}

func TestBackPressure(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c := newTestCluster(t, 3, func(cfg *Config) {
		cfg.MaxInflight = 2
		cfg.ProposeTimeout = 2 * time.Second
	})
	c.startAll()
	defer c.stopAll()
	lead := c.leader(5 * time.Second)
	var others []uint64
	for _, id := range ids(3) {
		if id != lead {
			others = append(others, id)
		}
	}
	partition(c, []uint64{lead}, others)
	tn := c.node(lead)
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = tn.Propose(context.Background(), []byte("stuck"))
		}()
	}
	deadline := time.Now().Add(time.Second)
	for testutil.ToFloat64(tn.m.inflight) != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("inflight = %v, want 2", testutil.ToFloat64(tn.m.inflight))
		}
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := tn.Propose(ctx, []byte("third"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("third proposal: %v, want context.DeadlineExceeded", err)
	}
	if el := time.Since(start); el > 500*time.Millisecond {
		t.Fatalf("third proposal waited %v", el)
	}
	wg.Wait()
}

func TestMetrics(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c := newTestCluster(t, 3, func(cfg *Config) { cfg.SnapshotEntries = 20 })
	c.startAll()
	defer c.stopAll()
	c.leader(5 * time.Second)
	acks := c.proposeAll([]uint64{1}, 2, 25, "m")
	checkAgreement(t, c.running(), acks)
	tn := c.node(1)
	if got := testutil.ToFloat64(tn.m.proposals); got != 50 {
		t.Fatalf("proposals_total = %v, want 50", got)
	}
	if got := testutil.CollectAndCount(tn.m.commitLatency); got != 1 {
		t.Fatalf("latency histogram series = %d", got)
	}
	var top uint64
	for _, s := range acks {
		top = max(top, s)
	}
	if got := testutil.ToFloat64(tn.m.applied); got < float64(top) {
		t.Fatalf("applied_index = %v, want >= %d", got, top)
	}
	if got := testutil.ToFloat64(tn.m.term); got < 1 {
		t.Fatalf("term = %v", got)
	}
	var changes, snaps float64
	for _, n := range c.running() {
		changes += testutil.ToFloat64(n.m.leaderChanges)
		snaps += testutil.ToFloat64(n.m.snapshotsMade)
	}
	if changes < 3 {
		t.Fatalf("leader changes seen = %v, want every node to see the first election", changes)
	}
	deadline := time.Now().Add(3 * time.Second)
	for snaps == 0 && time.Now().Before(deadline) {
		// compaction needs every member's applied report: give it a moment
		c.proposeAll([]uint64{1}, 1, 1, fmt.Sprint("poke", time.Now().UnixNano()))
		time.Sleep(50 * time.Millisecond)
		for _, n := range c.running() {
			snaps += testutil.ToFloat64(n.m.snapshotsMade)
		}
	}
	if snaps == 0 {
		t.Fatal("no snapshot was made")
	}
	// the names follow ordo_<component>_<what>_<unit|total>
	mfs, err := tn.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "ordo_totalorder_") {
			t.Fatalf("metric %s", mf.GetName())
		}
	}
	if len(mfs) < 9 {
		t.Fatalf("only %d metric families registered", len(mfs))
	}
}

// TestMutualTLS runs the group with mutual TLS; a node whose certificate
// comes from another CA cannot take part.
func TestMutualTLS(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ca, caKey := newCA(t, "ordo test CA")
	srv, cli := tlsConfigs(t, ca, caKey)
	c := newTestCluster(t, 3, nil)
	c.srvTLS, c.cliTLS = srv, cli
	c.startAll()
	defer c.stopAll()
	c.leader(5 * time.Second)
	acks := c.proposeAll(ids(3), 2, 10, "tls")
	checkAgreement(t, c.running(), acks)

	// a stranger with a certificate from another CA
	other, otherKey := newCA(t, "another CA")
	srv2, cli2 := tlsConfigs(t, other, otherKey)
	s := newTestCluster(t, 3, nil)
	s.srvTLS, s.cliTLS = srv, cli
	s.start(1, 0, false)
	s.start(2, 0, false)
	s.srvTLS, s.cliTLS = srv2, cli2
	s.start(3, 0, false)
	defer s.stopAll()
	lead := s.leader2(5*time.Second, 1, 2)
	if lead == 3 {
		t.Fatal("the stranger became leader")
	}
	more := s.proposeAll([]uint64{1, 2}, 1, 5, "without-3")
	checkAgreement(t, []*testNode{s.node(1), s.node(2)}, more)
	if got := s.node(3).deliveries(); len(got) != 0 {
		t.Fatalf("node with a foreign certificate delivered %d entries", len(got))
	}
}

// leader2 waits for a leader the listed nodes agree on.
func (c *testCluster) leader2(timeout time.Duration, ids ...uint64) uint64 {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		var lead uint64
		ok := true
		for _, id := range ids {
			l := c.node(id).Leader()
			if l == 0 || (lead != 0 && l != lead) {
				ok = false
			}
			lead = l
		}
		if ok {
			return lead
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.t.Fatalf("no leader among %v within %v", ids, timeout)
	return 0
}

func newCA(t *testing.T, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	must(t, err)
	cert, err := x509.ParseCertificate(der)
	must(t, err)
	return cert, key
}

// tlsConfigs returns server and client configs with one node certificate
// (valid for 127.0.0.1, both server and client auth) signed by ca.
func tlsConfigs(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey) (*tls.Config, *tls.Config) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "ordo node"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	must(t, err)
	pair := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	srv := &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13}
	cli := &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS13}
	return srv, cli
}

// TestProposalsWhileTheLeaderStreamReconnects: the majority restarts and a
// node that stayed up proposes as soon as it knows the new leader, while
// its own stream to that leader may still be reconnecting (gRPC waits up
// to a second between attempts after the peer was gone for a while). A
// forwarded proposal the transport could not send is proposed again, not
// left to time out: a client would be told its commit's outcome is unknown.
func TestProposalsWhileTheLeaderStreamReconnects(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	// The node that stays up waits four times longer before it stands
	// for election, so that one of the restarted nodes leads: left to
	// chance, the stayer, whose clock runs on while the others start,
	// won 10 of 12 rounds on a loaded machine (CI rehearsal, 2026-12-04).
	const stay = 3
	c := newTestCluster(t, 3, func(cfg *Config) {
		cfg.ProposeTimeout = 2 * time.Second
		if cfg.ID == stay {
			cfg.ElectionTicks = 40
		}
	})
	c.startAll()
	defer c.stopAll()
	c.leader(5 * time.Second)
	var others []uint64
	for _, id := range ids(3) {
		if id != stay {
			others = append(others, id)
		}
	}
	round := 0
	for attempt := 0; round < 3; attempt++ {
		if attempt == 12 {
			t.Fatalf("in %d restarts, a restarted node led only %d times", attempt, round)
		}
		for _, id := range others {
			c.stop(id)
		}
		time.Sleep(1500 * time.Millisecond) // the stayer's reconnect backoff grows to its limit
		for _, id := range others {
			c.start(id, 0, false)
		}
		deadline := time.Now().Add(10 * time.Second)
		for c.node(stay).Leader() == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: node %d knows no leader (%s)", round, stay, c.describe())
			}
			time.Sleep(time.Millisecond)
		}
		if c.node(stay).Leader() == stay {
			continue // it proposes to itself: nothing to forward
		}
		round++
		began := time.Now()
		_, err := c.node(stay).Propose(context.Background(), []byte(fmt.Sprintf("round %d", round)))
		if err != nil {
			t.Fatalf("round %d: a proposal made once the leader was known failed after %v: %v (%s)",
				round, time.Since(began).Round(time.Millisecond), err, c.describe())
		}
		t.Logf("round %d: ordered after %v", round, time.Since(began).Round(time.Millisecond))
	}
}
