package benchcluster

import (
	"math"
	"testing"
)

func TestHostCPUShares(t *testing.T) {
	a := HostCPU{Busy: 100, Idle: 100, Steal: 10}
	b := HostCPU{Busy: 160, Idle: 120, Steal: 30}
	busy, steal := a.Until(b)
	if math.Abs(busy-0.6) > 1e-9 || math.Abs(steal-0.2) > 1e-9 {
		t.Fatalf("busy %v, steal %v; want 0.6 and 0.2", busy, steal)
	}
	if busy, steal := a.Until(a); busy != 0 || steal != 0 {
		t.Fatalf("no time passed: busy %v, steal %v", busy, steal)
	}
	h := SampleHost()
	if h.Busy+h.Idle <= 0 {
		t.Fatalf("/proc/stat read as %+v", h)
	}
}
