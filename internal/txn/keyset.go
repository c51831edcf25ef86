package txn

import "sort"

// KeyMode is one key with the modes a transaction holds on it.
type KeyMode struct {
	Key  Key
	Mode Mode
}

// KeySet maps keys to the modes held on them. The zero value is ready to
// use.
type KeySet struct {
	m map[Key]Mode
}

// Add adds mode to k (modes accumulate).
func (s *KeySet) Add(k Key, mode Mode) {
	if s.m == nil {
		s.m = make(map[Key]Mode)
	}
	s.m[k] |= mode
}

// Mode returns the modes held on k, 0 if none.
func (s *KeySet) Mode(k Key) Mode { return s.m[k] }

// Len returns the number of distinct keys.
func (s *KeySet) Len() int { return len(s.m) }

// Sorted returns the keys with their modes in Key.Less order.
func (s *KeySet) Sorted() []KeyMode {
	out := make([]KeyMode, 0, len(s.m))
	for k, m := range s.m {
		out = append(out, KeyMode{k, m})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key.Less(out[j].Key) })
	return out
}

// Escalate replaces, in every table with more than perTable row, granule
// or unique keys held in a recorded mode (X, IX, R: writes and
// references), all of its finer keys (reads included) by X on the table
// key, and returns the table keys it escalated (perTable <= 0: never). If
// the tables under the limit still hold more than 10*perTable such keys
// together, all of them are escalated too.
// Reads alone never escalate here (ReadSet has its own limit). It loses
// no conflict: X on a table conflicts with every mode recorded on it
// (txn.Conflicts), every write of a row records IX on its table, every
// reference to a parent row records R on the parent's table, and a finer
// key is checked against an X on its table.
func (s *KeySet) Escalate(perTable int) []Key {
	if perTable <= 0 || len(s.m) <= perTable {
		return nil
	}
	count := map[Key]int{}
	for k, m := range s.m {
		if k.Level != LevelTable && m&Recorded != 0 {
			count[k.TableKey()]++
		}
	}
	// Tables over the limit; and if the rest still hold more than ten
	// times the limit between them (a transaction touching many tables a
	// little), every table with finer keys, so the keys of one
	// transaction stay bounded whatever it touched.
	total := 0
	for _, n := range count {
		if n <= perTable {
			total += n
		}
	}
	var out []Key
	for tk, n := range count {
		if n > perTable || total > 10*perTable {
			out = append(out, tk)
		}
	}
	if len(out) == 0 {
		return nil
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j]) })
	esc := make(map[Key]bool, len(out))
	for _, tk := range out {
		esc[tk] = true
	}
	for k := range s.m {
		if k.Level != LevelTable && esc[k.TableKey()] {
			delete(s.m, k)
		}
	}
	for _, tk := range out {
		s.m[tk] |= X
	}
	return out
}

// ReadSet accumulates the S keys a transaction read. It never loses a read:
// when it grows past its limit, row and granule keys of the largest tables
// are replaced by their table keys, and All marks a read of everything.
// The zero value has no limit.
type ReadSet struct {
	all   bool
	limit int
	keys  map[Key]struct{}
	// tables holds the table keys present, so finer keys under them are
	// not added.
	tables map[Key]struct{}
}

// NewReadSet returns a read set that escalates to table keys once it holds
// more than limit keys (limit <= 0: never).
func NewReadSet(limit int) *ReadSet { return &ReadSet{limit: limit} }

// SetLimit sets the number of keys beyond which the set escalates to table
// keys (limit <= 0: never); it takes effect at the next Add.
func (r *ReadSet) SetLimit(limit int) { r.limit = limit }

// AddAll records a read of everything (a read the analyzer could not
// attribute to tables).
func (r *ReadSet) AddAll() { r.all = true; r.keys = nil; r.tables = nil }

// All reports whether the set covers every key.
func (r *ReadSet) All() bool { return r.all }

// Add records a read of k.
func (r *ReadSet) Add(k Key) {
	if r.all {
		return
	}
	if r.keys == nil {
		r.keys = make(map[Key]struct{})
		r.tables = make(map[Key]struct{})
	}
	tk := k.TableKey()
	if _, ok := r.tables[tk]; ok {
		return
	}
	if k.Level == LevelTable {
		for o := range r.keys {
			if o.Schema == k.Schema && o.Table == k.Table {
				delete(r.keys, o)
			}
		}
		r.tables[tk] = struct{}{}
	}
	r.keys[k] = struct{}{}
	if r.limit > 0 && len(r.keys) > r.limit {
		r.Escalate()
	}
}

// Escalate replaces every row and granule key by its table key.
func (r *ReadSet) Escalate() {
	for k := range r.keys {
		if k.Level != LevelTable {
			delete(r.keys, k)
			tk := k.TableKey()
			r.keys[tk] = struct{}{}
			r.tables[tk] = struct{}{}
		}
	}
}

// Len returns the number of keys (0 when All).
func (r *ReadSet) Len() int { return len(r.keys) }

// Covers reports whether a read of k is in the set, directly or through its
// table key or All.
func (r *ReadSet) Covers(k Key) bool {
	if r.all {
		return true
	}
	if _, ok := r.tables[k.TableKey()]; ok {
		return true
	}
	_, ok := r.keys[k]
	return ok
}

// Keys returns the keys in Key.Less order (nil when All).
func (r *ReadSet) Keys() []Key {
	out := make([]Key, 0, len(r.keys))
	for k := range r.keys {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j]) })
	return out
}
