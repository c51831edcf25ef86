package proccluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ordo-db/ordo/internal/pglocal"
	"github.com/stretchr/testify/require"
)

// TestLeaderOf: the leader is the node that says so with the highest term
// (an old leader cut off from the quorum may still say so); nodes that did
// not answer are ignored; nobody leading is -1.
func TestLeaderOf(t *testing.T) {
	for _, tc := range []struct {
		name   string
		states []leaderState
		want   int
		term   float64
	}{
		{"none answered", make([]leaderState, 3), -1, 0},
		{"election under way", []leaderState{{ok: true, term: 4}, {ok: true, term: 4}, {}}, -1, 0},
		{"one leader", []leaderState{{ok: true, term: 3}, {ok: true, isLeader: true, term: 3}, {ok: true, term: 3}}, 1, 3},
		{"stale leader", []leaderState{{ok: true, isLeader: true, term: 2}, {ok: true, term: 5}, {ok: true, isLeader: true, term: 5}}, 2, 5},
		{"a silent node's claim is not read", []leaderState{{isLeader: true, term: 9}, {ok: true, isLeader: true, term: 1}, {}}, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leader, term := leaderOf(tc.states)
			require.Equal(t, tc.want, leader)
			require.Equal(t, tc.term, term)
		})
	}
}

// TestPauseResumeKill: a paused process is not Exited; Resume lets it run
// again; Kill ends a paused process and reaps it; Resume after Kill is
// harmless.
func TestPauseResumeKill(t *testing.T) {
	c := &Cluster{procs: make([]*exec.Cmd, 1)}
	require.Error(t, c.Pause(0), "nothing to pause")
	cmd := exec.Command("sleep", "60")
	require.NoError(t, cmd.Start())
	c.procs[0] = cmd
	state := func() string {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
		require.NoError(t, err)
		_, rest, _ := strings.Cut(string(b), ") ")
		return rest[:1]
	}
	require.NoError(t, c.Pause(0))
	require.Eventually(t, func() bool { return state() == "T" }, 5*time.Second, 10*time.Millisecond)
	require.False(t, c.Exited(0), "a paused process has not exited")
	c.Resume(0)
	require.Eventually(t, func() bool { return state() != "T" }, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, c.Pause(0))
	require.Eventually(t, func() bool { return state() == "T" }, 5*time.Second, 10*time.Millisecond)
	done := make(chan struct{})
	go func() {
		c.Kill(0)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Kill of a paused process did not return")
	}
	require.True(t, c.Exited(0))
	c.Resume(0) // nothing left to resume
	require.ErrorIs(t, cmd.Process.Signal(syscall.Signal(0)), os.ErrProcessDone, "reaped")
}

// TestDumpStacks: a Go process ended by DumpStacks writes its goroutines'
// stacks to its log, and is reaped.
func TestDumpStacks(t *testing.T) {
	dir := t.TempDir()
	src := dir + "/main.go"
	require.NoError(t, os.WriteFile(src, []byte("package main\n\nimport \"time\"\n\nfunc stuckHere() { time.Sleep(time.Hour) }\n\nfunc main() { println(\"ready\"); stuckHere() }\n"), 0o644))
	bin := dir + "/stuck"
	out, err := exec.Command("go", "build", "-o", bin, src).CombinedOutput()
	require.NoError(t, err, "%s", out)
	c := &Cluster{procs: make([]*exec.Cmd, 1)}
	require.False(t, c.DumpStacks(0, time.Second), "nothing running")
	log, err := os.Create(dir + "/log")
	require.NoError(t, err)
	defer log.Close()
	cmd := exec.Command(bin)
	cmd.Stderr = log
	require.NoError(t, cmd.Start())
	c.procs[0] = cmd
	require.Eventually(t, func() bool {
		b, _ := os.ReadFile(dir + "/log")
		return strings.Contains(string(b), "ready")
	}, 10*time.Second, 10*time.Millisecond)
	require.True(t, c.DumpStacks(0, 10*time.Second))
	require.True(t, c.Exited(0))
	b, err := os.ReadFile(dir + "/log")
	require.NoError(t, err)
	require.Contains(t, string(b), "SIGQUIT")
	require.Contains(t, string(b), "main.stuckHere", "the goroutine's stack")
}

// TestStartThatFailsReturnsItsError: a Start that fails once its
// PostgreSQL servers are up (here in Prepare) stops them and returns the
// error. It panicked (Stop of the nil cluster its `return nil, err` had
// set), which hid the error and ended a whole safety matrix run.
func TestStartThatFailsReturnsItsError(t *testing.T) {
	c, err := Start(context.Background(), Options{N: 1, Protocol: "dbsm", Dir: t.TempDir(), Bin: "/bin/false",
		Prepare: func(context.Context, *pglocal.Cluster) error { return errors.New("prepare failed on purpose") }})
	require.ErrorContains(t, err, "prepare failed on purpose")
	require.Nil(t, c)
}
