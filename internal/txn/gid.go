package txn

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// GID is the cluster-unique id of a transaction. It is also the name Ordo
// gives the transaction in PREPARE TRANSACTION, so it is short ASCII:
// "ordo_<node>_<counter>" (node and counter in decimal).
type GID string

// gidPrefix starts every GID; client-chosen PREPARE TRANSACTION names never
// reach PostgreSQL (the analyzer refuses them), so the prefix is Ordo's own.
const gidPrefix = "ordo_"

// ErrBadGID is returned by ParseGID for a string that is not a GID made by
// NewGID.
var ErrBadGID = errors.New("txn: malformed gid")

// NewGID returns the GID of the counter-th transaction begun on node.
func NewGID(node uint32, counter uint64) GID {
	b := make([]byte, 0, 32)
	b = append(b, gidPrefix...)
	b = strconv.AppendUint(b, uint64(node), 10)
	b = append(b, '_')
	b = strconv.AppendUint(b, counter, 10)
	return GID(b)
}

// ParseGID splits a GID made by NewGID into its node and counter. It returns
// an error wrapping ErrBadGID for anything else (for example a prepared
// transaction found in pg_prepared_xacts that Ordo did not create).
func ParseGID(s string) (node uint32, counter uint64, err error) {
	rest, ok := strings.CutPrefix(s, gidPrefix)
	if !ok {
		return 0, 0, fmt.Errorf("%w: %q has no %q prefix", ErrBadGID, s, gidPrefix)
	}
	n, c, ok := strings.Cut(rest, "_")
	if !ok {
		return 0, 0, fmt.Errorf("%w: %q", ErrBadGID, s)
	}
	nv, err1 := strconv.ParseUint(n, 10, 32)
	cv, err2 := strconv.ParseUint(c, 10, 64)
	if err1 != nil || err2 != nil || NewGID(uint32(nv), cv) != GID(s) {
		return 0, 0, fmt.Errorf("%w: %q", ErrBadGID, s)
	}
	return uint32(nv), cv, nil
}

// Node returns the node that began the transaction, or 0 for a malformed GID.
func (g GID) Node() uint32 {
	n, _, _ := ParseGID(string(g))
	return n
}

// String returns the GID text.
func (g GID) String() string { return string(g) }
