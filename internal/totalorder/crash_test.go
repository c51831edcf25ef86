package totalorder

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ordo-db/ordo/internal/totalorder/transport"
)

// crashEnv names the environment variable that turns the test binary into
// the crash child (see crashChild); TestMain checks it.
const crashEnv = "ORDO_TOTALORDER_CRASH_CHILD"

type crashSpec struct {
	Addrs map[uint64]string
	Dirs  map[uint64]string
}

// TestKill9WholeCluster runs a 3-node cluster in a child process with
// proposers on every node, kills the process with SIGKILL in the middle of
// the load, restarts the cluster on the same directories and checks that
// every proposal the child saw acknowledged is delivered at its seqno on
// every node.
func TestKill9WholeCluster(t *testing.T) {
	// no compaction: every acknowledged entry must still be in the logs
	c := newTestCluster(t, 3, func(cfg *Config) { cfg.SnapshotEntries = 1 << 40 })
	spec, _ := json.Marshal(crashSpec{Addrs: c.addrs, Dirs: c.dirs})
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashEnv+"="+string(spec))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acks := map[string]uint64{}
	sc := bufio.NewScanner(out)
	deadline := time.AfterFunc(20*time.Second, func() { _ = cmd.Process.Kill() })
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 || f[0] != "ACK" {
			continue
		}
		seq, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			t.Fatalf("bad line %q", sc.Text())
		}
		acks[f[2]] = seq
		if len(acks) == 400 {
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	deadline.Stop()
	_ = cmd.Wait()
	if len(acks) < 400 {
		t.Fatalf("child acknowledged only %d proposals before exiting", len(acks))
	}
	c.startAll()
	defer c.stopAll()
	c.leader(5 * time.Second)
	for p, s := range c.proposeRetry(ids(3), 1, 5, "after-crash") {
		acks[p] = s
	}
	checkAgreement(t, c.running(), acks)
	for _, tn := range c.running() {
		if rep := tn.st.Report(); rep.TornTail {
			t.Logf("node %d: torn tail cut at offset %d", tn.ID(), rep.TruncatedAt)
		}
	}
}

// crashChild runs the cluster described in the environment and proposes
// until killed, printing "ACK <seqno> <payload>" for every acknowledged
// proposal.
func crashChild(specJSON string) int {
	var spec crashSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "crash child:", err)
		return 2
	}
	var nodes []*Node
	for id := uint64(1); id <= 3; id++ {
		var (
			l   net.Listener
			err error
		)
		for try := 0; try < 50; try++ { // the port may take a moment to be free
			if l, err = net.Listen("tcp", spec.Addrs[id]); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "crash child:", err)
			return 2
		}
		tr, err := transport.NewGRPC(transport.GRPCConfig{ID: id, Listener: l})
		if err != nil {
			fmt.Fprintln(os.Stderr, "crash child:", err)
			return 2
		}
		nd, err := Start(Config{ID: id, Dir: spec.Dirs[id], Peers: spec.Addrs, Transport: tr,
			TickInterval: 10 * time.Millisecond, SnapshotEntries: 1 << 40})
		if err != nil {
			fmt.Fprintln(os.Stderr, "crash child:", err)
			return 2
		}
		go func() {
			for d := range nd.Deliveries() {
				nd.MarkApplied(d.Seqno)
			}
		}()
		nodes = append(nodes, nd)
	}
	var mu sync.Mutex
	w := bufio.NewWriter(os.Stdout)
	for i, nd := range nodes {
		for g := 0; g < 4; g++ {
			go func() {
				for k := 0; ; k++ {
					p := fmt.Sprintf("crash/n%d/g%d/%d", i+1, g, k)
					seq, err := nd.Propose(context.Background(), []byte(p))
					if err != nil {
						continue
					}
					mu.Lock()
					fmt.Fprintf(w, "ACK %d %s\n", seq, p)
					w.Flush()
					mu.Unlock()
				}
			}()
		}
	}
	select {} // until killed
}
