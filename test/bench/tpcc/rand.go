package tpcc

import (
	"math/rand/v2"
)

// The constants C of NURand (clause 2.1.6): one set for the load, one for
// the run, C_LAST's differing as clause 2.1.6.1 asks.
const (
	cLastLoad = 157
	cLastRun  = 223
	cID       = 259
	cItem     = 7911
)

// nuRand is NURand(A, x, y) (clause 2.1.6).
func nuRand(r *rand.Rand, a, c, x, y int) int {
	return ((between(r, 0, a)|between(r, x, y))+c)%(y-x+1) + x
}

// between returns a uniform integer in [lo, hi].
func between(r *rand.Rand, lo, hi int) int { return lo + r.IntN(hi-lo+1) }

var syllables = []string{"BAR", "OUGHT", "ABLE", "PRI", "PRES", "ESE", "ANTI", "CALLY", "ATION", "EING"}

// lastName is C_LAST for number n in [0, 999] (clause 4.3.2.3).
func lastName(n int) string {
	return syllables[n/100] + syllables[(n/10)%10] + syllables[n%10]
}

// nameRange is how many last names a population has: 1,000, or as many
// as customers per district when it is scaled below that.
func (s Scale) nameRange() int { return min(1000, s.Customers) }

// runLastName draws the last name of a customer looked up by name.
func (s Scale) runLastName(r *rand.Rand) string {
	return lastName(nuRand(r, 255, cLastRun, 0, s.nameRange()-1))
}

// customerID draws a customer id (NURand(1023, 1, 3000) at spec size).
func (s Scale) customerID(r *rand.Rand) int { return nuRand(r, 1023, cID, 1, s.Customers) }

// itemID draws an item id (NURand(8191, 1, 100000) at spec size).
func (s Scale) itemID(r *rand.Rand) int { return nuRand(r, 8191, cItem, 1, s.Items) }

const alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

// aString is a random a-string of length in [lo, hi] (clause 4.3.2.2).
func aString(r *rand.Rand, lo, hi int) string {
	n := between(r, lo, hi)
	b := make([]byte, n)
	for i := range b {
		b[i] = alnum[r.IntN(len(alnum))]
	}
	return string(b)
}

// nString is a random numeric string of length in [lo, hi].
func nString(r *rand.Rand, lo, hi int) string {
	n := between(r, lo, hi)
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('0' + r.IntN(10))
	}
	return string(b)
}

// zip is a zip code: 4 random digits and "11111" (clause 4.3.2.7).
func zip(r *rand.Rand) string { return nString(r, 4, 4) + "11111" }

// original is I_DATA or S_DATA: for 10 % of rows with "ORIGINAL" at a
// random place (clause 4.3.3.1).
func original(r *rand.Rand) string {
	s := aString(r, 26, 50)
	if r.IntN(10) != 0 {
		return s
	}
	at := r.IntN(len(s) - 8)
	return s[:at] + "ORIGINAL" + s[at+8:]
}

// permutation returns a random permutation of 1..n.
func permutation(r *rand.Rand, n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = i + 1
	}
	r.Shuffle(n, func(i, j int) { p[i], p[j] = p[j], p[i] })
	return p
}
