package certifier

import (
	"fmt"

	"github.com/ordo-db/ordo/internal/txn"
)

// Request is what certification needs of a transaction: its snapshot and
// its keys with their modes. Keys come from the proposal, never from the
// local catalog.
type Request struct {
	SnapshotSeqno uint64
	Keys          []txn.KeyMode
	// ReadAll marks a read the analyzer could not attribute: it conflicts
	// with every write committed after the snapshot (when reads are
	// certified).
	ReadAll bool
	// CheckReads certifies this transaction's reads (S keys, ReadAll)
	// even when Config.CheckReads does not: a transaction that ran at
	// SERIALIZABLE under dbsm-si or dbsm-rc.
	CheckReads bool
}

// Reason says why a transaction aborted.
type Reason uint8

// The abort reasons.
const (
	// ReasonNone: the transaction commits.
	ReasonNone Reason = iota
	// ReasonConflict: a concurrent, earlier transaction wrote a conflicting key.
	ReasonConflict
	// ReasonTooOld: the snapshot is older than the certification window.
	ReasonTooOld
)

func (r Reason) String() string {
	switch r {
	case ReasonNone:
		return "commit"
	case ReasonConflict:
		return "conflict"
	case ReasonTooOld:
		return "snapshot too old"
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// Decision is the outcome of Certify.
type Decision struct {
	Commit bool
	Reason Reason
	// Key and By name the first conflict found (for the client's error
	// message and logs): T's key and the seqno of the transaction that
	// recorded the conflicting key.
	Key txn.Key
	By  uint64
}

// Config is cluster configuration; every node must use the same values.
type Config struct {
	// CheckReads is true under dbsm (every transaction's S keys are
	// certified) and false under dbsm-si and dbsm-rc (only those of a
	// Request with CheckReads).
	CheckReads bool
	// Window is how many seqnos the index remembers (default 1<<20).
	Window uint64
}

// recorded is the last committed seqno per write-side mode of one key.
type recorded struct {
	x, ix, r uint64
}

func (r recorded) max() uint64 { return max(r.x, r.ix, r.r) }

// Certifier is the certification index.
type Certifier struct {
	cfg     Config
	index   map[txn.Key]recorded
	last    uint64 // seqno of the last entry passed to Certify or Record
	lastAny uint64 // seqno of the last committed write of anything
	// history lists, in seqno order, the keys recorded at each seqno, so
	// trimming can forget them.
	history []recordedAt
	floor   uint64 // snapshots below floor are too old
}

type recordedAt struct {
	seqno uint64
	keys  []txn.Key
}

// New returns an empty certifier that starts after seqno start (the first
// entry it may see is start+1). Snapshots older than start are too old: a
// certifier rebuilt after a restart knows nothing before it.
func New(cfg Config, start uint64) *Certifier {
	if cfg.Window == 0 {
		cfg.Window = 1 << 20
	}
	return &Certifier{cfg: cfg, index: make(map[txn.Key]recorded), last: start, floor: start}
}

// Last returns the seqno of the last entry certified or recorded.
func (c *Certifier) Last() uint64 { return c.last }

// Certify decides the transaction delivered at seqno and, if it commits,
// records its write-side keys. Seqnos must increase; gaps are allowed (the
// total order skips its own internal entries).
func (c *Certifier) Certify(seqno uint64, req *Request) Decision {
	c.advance(seqno)
	d := c.check(req)
	if d.Commit {
		c.record(seqno, req.Keys)
	}
	return d
}

// CheckAt decides whether the transaction delivered at seqno would commit,
// without recording anything: its outcome is decided later (pgr, where
// the origin certifies its transaction once every earlier one is
// decided, and the index records it only when its commit outcome is
// delivered, with Record or Skip at seqno). Every seqno before seqno must
// have been recorded or skipped already.
func (c *Certifier) CheckAt(seqno uint64, req *Request) Decision {
	if seqno <= c.last {
		panic(fmt.Sprintf("certifier: seqno %d checked after %d", seqno, c.last))
	}
	if seqno > c.cfg.Window {
		c.trim(seqno - c.cfg.Window) // as Record or Skip at seqno will
	}
	return c.check(req)
}

// Record records keys committed at seqno without certifying them (entries
// that always commit, such as DDL in total order).
func (c *Certifier) Record(seqno uint64, keys []txn.KeyMode) {
	c.advance(seqno)
	c.record(seqno, keys)
}

// Skip notes that seqno was delivered and recorded nothing (an entry that
// is not a transaction).
func (c *Certifier) Skip(seqno uint64) { c.advance(seqno) }

func (c *Certifier) advance(seqno uint64) {
	if seqno <= c.last {
		panic(fmt.Sprintf("certifier: seqno %d delivered after %d", seqno, c.last))
	}
	c.last = seqno
	if seqno > c.cfg.Window {
		c.trim(seqno - c.cfg.Window)
	}
}

func (c *Certifier) check(req *Request) Decision {
	snap := req.SnapshotSeqno
	if snap < c.floor {
		return Decision{Reason: ReasonTooOld}
	}
	if snap >= c.lastAny {
		return Decision{Commit: true} // nothing committed after the snapshot
	}
	checkReads := c.cfg.CheckReads || req.CheckReads
	if req.ReadAll && checkReads && c.lastAny > snap {
		return Decision{Reason: ReasonConflict, By: c.lastAny}
	}
	for _, km := range req.Keys {
		mode := km.Mode
		if !checkReads {
			mode &^= txn.S
		}
		if mode == 0 {
			continue
		}
		if by, ok := c.conflict(km.Key, mode, snap); ok {
			return Decision{Reason: ReasonConflict, Key: km.Key, By: by}
		}
		// A finer key also conflicts with an X on its table (TRUNCATE,
		// DDL, unattributable writes), whatever its own mode.
		if km.Key.Level != txn.LevelTable {
			if x := c.index[km.Key.TableKey()].x; x > snap {
				return Decision{Reason: ReasonConflict, Key: km.Key, By: x}
			}
		}
	}
	return Decision{Commit: true}
}

// conflict checks T's mode on k against what was recorded on k after snap.
func (c *Certifier) conflict(k txn.Key, mode txn.Mode, snap uint64) (uint64, bool) {
	rec, ok := c.index[k]
	if !ok || rec.max() <= snap {
		return 0, false
	}
	checkReads := true // S was already removed from mode when reads are not certified
	if rec.x > snap && txn.Conflicts(mode, txn.X, checkReads) {
		return rec.x, true
	}
	if rec.ix > snap && txn.Conflicts(mode, txn.IX, checkReads) {
		return rec.ix, true
	}
	if rec.r > snap && txn.Conflicts(mode, txn.R, checkReads) {
		return rec.r, true
	}
	return 0, false
}

func (c *Certifier) record(seqno uint64, keys []txn.KeyMode) {
	var kept []txn.Key
	for _, km := range keys {
		m := km.Mode & txn.Recorded
		if m == 0 {
			continue
		}
		rec := c.index[km.Key]
		if m&txn.X != 0 {
			rec.x = seqno
		}
		if m&txn.IX != 0 {
			rec.ix = seqno
		}
		if m&txn.R != 0 {
			rec.r = seqno
		}
		c.index[km.Key] = rec
		kept = append(kept, km.Key)
	}
	if len(kept) > 0 {
		c.history = append(c.history, recordedAt{seqno, kept})
		c.lastAny = seqno
	}
}

// trim forgets everything recorded at or below floor and makes snapshots
// older than floor too old.
func (c *Certifier) trim(floor uint64) {
	if floor <= c.floor {
		return
	}
	c.floor = floor
	i := 0
	for ; i < len(c.history) && c.history[i].seqno <= floor; i++ {
		h := c.history[i]
		for _, k := range h.keys {
			rec := c.index[k]
			if rec.max() <= floor {
				delete(c.index, k)
			}
		}
	}
	c.history = c.history[i:]
}

// Len returns the number of keys in the index.
func (c *Certifier) Len() int { return len(c.index) }
