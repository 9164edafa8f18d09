package cache

// Weigher is implemented by a value type that says how much memory its
// values hold, for the bound on the process-local store
// (Options.MaxLocalBytes): the store of a Cache without Redis, and the
// values a Cache with Redis keeps in this process while Redis is
// unreachable. Process-local values are held as they are, not encoded, so
// their size is not known otherwise.
//
// Weight returns about how many bytes v holds beyond its fixed size: a
// body's length, its strings' lengths. It should be cheap (it is called on
// every write of the process-local store, never on a hit) and must not
// change while the value is held. A negative Weight counts as 0; one that
// panics (a nil pointer's, say) counts as 0 too.
//
// A value whose type does not implement Weigher weighs its length when it
// is a string or a []byte, and nothing otherwise; each entry also weighs
// its key, its tags and a fixed overhead of 128 bytes (see
// Options.MaxLocalBytes).
type Weigher interface {
	Weight() int
}

// localEntryOverhead is what an entry of the process-local store weighs
// against MaxLocalBytes beyond its key, its tags and its value's Weight:
// about what holding it costs (the entry and its windows, the bounded
// map's entry and ring slot, the sync.Map's node).
const localEntryOverhead = 128

// localCost is what key's entry e weighs against MaxLocalBytes.
func localCost[V any](key string, e *entry[V]) int64 {
	n := int64(len(key)) + localEntryOverhead + int64(weightOf(e.value))
	for _, t := range e.stamp.Tags {
		n += int64(len(t))
	}
	return n
}

// weightOf is v's Weight (see [Weigher]): its own say, else a string's or a
// []byte's length, else 0.
func weightOf[V any](v V) (n int) {
	defer func() {
		if recover() != nil {
			n = 0
		}
	}()
	switch x := any(v).(type) {
	case Weigher:
		return max(x.Weight(), 0)
	case string:
		return len(x)
	case []byte:
		return len(x)
	}
	return 0
}
