package prefix

// table is an open-addressing hash table from block hashes to V, used for
// the reverse-map shards and the endpoint LRUs instead of Go maps. Its keys
// are already uniform 64-bit hashes, so a multiplicative (Fibonacci) slot
// index is enough. Linear probing with backward-shift deletion leaves no
// tombstones, so the constant insert/evict churn of an LRU never lengthens
// probe sequences, and a lookup costs one or two cache lines. The arrays
// hold no pointers, so the garbage collector does not scan them.
//
// Key 0 marks an empty slot; a hash of 0 is stored as 1 (one more 64-bit
// collision, on top of those the index already accepts). The zero table is
// empty and ready to use. It is not safe for concurrent use.
type table[V any] struct {
	keys  []uint64
	vals  []V
	n     int
	shift uint // 64 − log2(len(keys))
}

// tableMinSize is the number of slots of a table's first allocation.
const tableMinSize = 8

func tableKey(h uint64) uint64 {
	if h == 0 {
		return 1
	}
	return h
}

func (t *table[V]) home(k uint64) uint64 { return (k * 0x9E3779B97F4A7C15) >> t.shift }

// len returns the number of entries.
func (t *table[V]) len() int { return t.n }

// get returns the value stored for h.
func (t *table[V]) get(h uint64) (V, bool) {
	var zero V
	if t.n == 0 {
		return zero, false
	}
	k := tableKey(h)
	mask := uint64(len(t.keys) - 1)
	for i := t.home(k); ; i = (i + 1) & mask {
		switch t.keys[i] {
		case k:
			return t.vals[i], true
		case 0:
			return zero, false
		}
	}
}

// put stores v for h.
func (t *table[V]) put(h uint64, v V) {
	if (t.n+1)*4 > len(t.keys)*3 {
		t.grow()
	}
	k := tableKey(h)
	mask := uint64(len(t.keys) - 1)
	for i := t.home(k); ; i = (i + 1) & mask {
		switch t.keys[i] {
		case k:
			t.vals[i] = v
			return
		case 0:
			t.keys[i] = k
			t.vals[i] = v
			t.n++
			return
		}
	}
}

// del removes h and reports whether it was present.
func (t *table[V]) del(h uint64) bool {
	if t.n == 0 {
		return false
	}
	k := tableKey(h)
	mask := uint64(len(t.keys) - 1)
	i := t.home(k)
	for ; t.keys[i] != k; i = (i + 1) & mask {
		if t.keys[i] == 0 {
			return false
		}
	}
	// Backward shift: pull later entries of the cluster into the hole
	// when that does not move them before their home slot.
	for j := (i + 1) & mask; t.keys[j] != 0; j = (j + 1) & mask {
		if (j-t.home(t.keys[j]))&mask >= (j-i)&mask {
			t.keys[i], t.vals[i] = t.keys[j], t.vals[j]
			i = j
		}
	}
	var zero V
	t.keys[i], t.vals[i] = 0, zero
	t.n--
	return true
}

func (t *table[V]) grow() {
	oldKeys, oldVals := t.keys, t.vals
	size := max(tableMinSize, 2*len(oldKeys))
	t.keys = make([]uint64, size)
	t.vals = make([]V, size)
	t.shift = uint(64 - log2(size))
	t.n = 0
	for i, k := range oldKeys {
		if k != 0 {
			t.put(k, oldVals[i])
		}
	}
}

// all yields every entry, in no particular order. The table must not be
// modified meanwhile.
func (t *table[V]) all(yield func(uint64, V) bool) {
	for i, k := range t.keys {
		if k != 0 && !yield(k, t.vals[i]) {
			return
		}
	}
}

// log2 returns the base-2 logarithm of a power of two.
func log2(n int) int {
	l := 0
	for n > 1 {
		n >>= 1
		l++
	}
	return l
}
