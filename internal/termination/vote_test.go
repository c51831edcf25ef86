package termination

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestVotes(t *testing.T) {
	// Three members, node 3 failed: two successes win.
	v := NewVotes(3)
	require.Equal(t, Undecided, v.Add(10, 1, 3, false))
	require.Equal(t, Undecided, v.Add(10, 1, 1, true))
	require.Equal(t, Applied, v.Add(10, 1, 2, true))
	require.Equal(t, Applied, v.Add(10, 1, 3, false), "later votes change nothing")

	// Two of three failed: the entry is skipped, its origin (which applied it) leaves.
	v = NewVotes(3)
	require.Equal(t, Undecided, v.Add(7, 1, 2, false))
	require.Equal(t, Undecided, v.Add(7, 1, 1, true))
	require.Equal(t, Skipped, v.Add(7, 1, 3, false))

	// A node's second vote does not count twice.
	v = NewVotes(3)
	v.Add(5, 1, 2, false)
	require.Equal(t, Undecided, v.Add(5, 1, 2, false))
	require.True(t, v.Voted(5, 2))
	require.False(t, v.Voted(5, 3))

	// Four members, even split: the origin's side wins.
	v = NewVotes(4)
	v.Add(9, 2, 1, true)
	v.Add(9, 2, 2, true)
	v.Add(9, 2, 3, false)
	require.Equal(t, Applied, v.Add(9, 2, 4, false))
	v = NewVotes(4)
	v.Add(9, 3, 1, true)
	v.Add(9, 3, 2, true)
	v.Add(9, 3, 3, false)
	require.Equal(t, Skipped, v.Add(9, 3, 4, false))
	require.Equal(t, Skipped, v.Verdict(9))
	require.Equal(t, Undecided, v.Verdict(8))
}

// TestVotesDecidedByAMemberChange: a voter removed before it voted leaves
// the others even (or a majority of fewer); the poll is decided at the
// change, where it used to wait for a vote that would never come.
func TestVotesDecidedByAMemberChange(t *testing.T) {
	v := NewVotes(3)
	require.Equal(t, Undecided, v.Add(4, 1, 3, false))
	require.Equal(t, Undecided, v.Add(4, 1, 1, true))
	require.Equal(t, Undecided, v.Add(6, 2, 1, false))
	require.Empty(t, v.SetMembers(3), "the same count decides nothing")
	got := v.SetMembers(2) // node 2 removed: 1 against 1 on entry 4, whose origin (1) applied it
	require.Equal(t, []Decided{{Seqno: 4, Origin: 1, Verdict: Applied}}, got)
	require.Equal(t, Applied, v.Verdict(4))
	require.Equal(t, Undecided, v.Verdict(6), "one vote of two members decides nothing")
	got = v.SetMembers(1)
	require.Equal(t, []Decided{{Seqno: 6, Origin: 2, Verdict: Skipped}}, got)
	require.Equal(t, 1, v.Members())
}
