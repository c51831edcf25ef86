package wire

import "testing"

// TestErrorPositionsAreTheClients: positions in a rewritten piece of a
// query string, mapped back to the client's string.
func TestErrorPositionsAreTheClients(t *testing.T) {
	// The client's "show transaction_isolation; select nope" (14 + 12
	// characters before "nope"), its SHOW (26 characters) rewritten as
	// 40, and the same as the piece of a string that begins 10
	// characters later.
	show := []Replaced{{At: 0, Was: 26, Now: 40}}
	for _, tc := range []struct {
		ps   positions
		p    int32
		want int32
	}{
		{positions{}, 7, 7},
		{positions{shift: 10}, 7, 17},
		{positions{replaced: show}, 49, 35}, // "nope", after the rewritten SHOW
		{positions{replaced: show}, 12, 1},  // inside the SELECT put in: the SHOW's first character
		{positions{replaced: show, shift: 10}, 49, 45},
		// Two replaced: BEGIN (5) as 36 characters at 0, SHOW (26) as 40 at 7.
		{positions{replaced: []Replaced{{0, 5, 36}, {7, 26, 40}}}, 36, 1}, // in the first, at its end: its first character
		{positions{replaced: []Replaced{{0, 5, 36}, {7, 26, 40}}}, 37, 6}, // between: "; "
		{positions{replaced: []Replaced{{0, 5, 36}, {7, 26, 40}}}, 40, 8}, // inside the second: its first character
		{positions{replaced: []Replaced{{0, 5, 36}, {7, 26, 40}}}, 36 + 2 + 40 + 3, 5 + 2 + 26 + 3},
	} {
		if got := tc.ps.client(tc.p); got != tc.want {
			t.Errorf("%+v: position %d is the client's %d, want %d", tc.ps, tc.p, got, tc.want)
		}
	}
}
