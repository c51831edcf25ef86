package totalorder

import "testing"

// bytesFloor finds where the last RetainBytes of the log up to target
// begin, also when entries past target are applied but not durable yet
// (their samples used to make the search return 0: no floor).
func TestBytesFloor(t *testing.T) {
	n := &Node{cfg: Config{RetainBytes: 100}}
	for i := uint64(1); i <= 100; i++ {
		n.sizes = append(n.sizes, indexBytes{index: i, cum: 10 * i})
	}
	for _, tc := range []struct{ target, want uint64 }{
		{100, 90}, {90, 80}, {70, 60}, {30, 20}, {10, 0}, {5, 0},
	} {
		if got := n.bytesFloor(tc.target); got != tc.want {
			t.Errorf("bytesFloor(%d) = %d, want %d", tc.target, got, tc.want)
		}
	}
}

// Small entries are sampled every sampleBytes: few samples, and the floor
// within a sample of the exact one.
func TestSizesAreSampled(t *testing.T) {
	n := &Node{cfg: Config{RetainBytes: 64 << 10}}
	for i := uint64(1); i <= 10000; i++ {
		n.recordSize(i, 100)
	}
	if len(n.sizes) > 10000*100/sampleBytes+2 {
		t.Fatalf("%d samples for 10000 entries of 100 bytes", len(n.sizes))
	}
	// Exactly: the last 64 KiB up to 10000 begin after entry 10000-655.
	got, exact := n.bytesFloor(10000), uint64(10000-(64<<10)/100)
	if got+sampleBytes/100+1 < exact || got > exact+sampleBytes/100+1 {
		t.Fatalf("floor %d, exactly %d", got, exact)
	}
}
