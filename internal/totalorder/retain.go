package totalorder

import "sort"

// Retention in bytes (Config.RetainBytes). The apply goroutine records,
// for every entry it applies, the payload bytes of the log up to it
// (cumulated since the node started); compaction reads them to find how
// far back the last RetainBytes of the log reach, and drops what it
// compacted.

type indexBytes struct {
	index uint64
	cum   uint64
}

// sampleBytes: a sample is kept every sampleBytes of entries (or every
// 1024 entries), so the samples stay small beside the log (at most 16
// bytes per 4 KiB of it) and sizes are known to within that.
const sampleBytes = 4 << 10

// recordSize counts entry index of size bytes.
func (n *Node) recordSize(index uint64, size int) {
	n.cumBytes += uint64(size)
	if k := len(n.sizes); k > 0 && n.cumBytes-n.sizes[k-1].cum < sampleBytes && index-n.sizes[k-1].index < 1024 {
		return // counted at the next sample
	}
	n.sizes = append(n.sizes, indexBytes{index: index, cum: n.cumBytes})
}

// bytesAt is the cumulated size up to index (the last sample at or
// before it), and whether any sample is that old.
func (n *Node) bytesAt(index uint64) (uint64, bool) {
	i := sort.Search(len(n.sizes), func(i int) bool { return n.sizes[i].index > index })
	if i == 0 {
		return 0, false
	}
	return n.sizes[i-1].cum, true
}

// bytesFloor is the index below which the entries up to target hold more
// than RetainBytes: a member behind it no longer holds compaction back.
// 0 without RetainBytes, or while the log holds less.
func (n *Node) bytesFloor(target uint64) uint64 {
	r := n.cfg.RetainBytes
	if r == 0 {
		return 0
	}
	top, ok := n.bytesAt(target)
	if !ok || top <= r {
		return 0
	}
	// The first sample (up to target) after which at most r bytes remain
	// up to target: cum only grows, so cum >= top-r is ordered (top-cum
	// is not, past target).
	k := sort.Search(len(n.sizes), func(i int) bool { return n.sizes[i].index > target })
	i := sort.Search(k, func(i int) bool { return n.sizes[i].cum >= top-r })
	if i == 0 || i >= k {
		return 0
	}
	return n.sizes[i].index
}

// bytesDue: the entries between the last compaction and target hold at
// least RetainBytes/2, so compact now however few they are.
func (n *Node) bytesDue(target uint64) bool {
	r := n.cfg.RetainBytes
	if r == 0 {
		return false
	}
	top, ok := n.bytesAt(target)
	if !ok {
		return false
	}
	base, _ := n.bytesAt(n.compacted)
	return top-base >= r/2
}

// trimSizes drops the samples before index (the last one at or before it
// stays: sizes are measured from it).
func (n *Node) trimSizes(index uint64) {
	i := sort.Search(len(n.sizes), func(i int) bool { return n.sizes[i].index > index })
	if i > 1 {
		n.sizes = append(n.sizes[:0], n.sizes[i-1:]...)
	}
}
