package replica

import "github.com/ordo-db/ordo/internal/termination"

// The Replica is the delivery engine of every protocol: sessions see it as
// a termination.Protocol.
var (
	_ termination.Protocol = (*Replica)(nil)
	_ termination.Preparer = (*Replica)(nil)
)
