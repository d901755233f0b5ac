package modelsim

// block is one hashed (shareable) KV block. Blocks with ref == 0 are cached
// but free: they sit in the LRU list and are evicted when space is needed.
type block struct {
	hash       uint64
	ref        int32
	prev, next *block // LRU links, only while ref == 0
}

// blockList is an intrusive doubly linked list of blocks; the front is the
// least recently used.
type blockList struct {
	head, tail *block
	n          int
}

func (l *blockList) pushBack(b *block) {
	b.prev, b.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = b
	} else {
		l.head = b
	}
	l.tail = b
	l.n++
}

func (l *blockList) remove(b *block) {
	if b.prev != nil {
		b.prev.next = b.next
	} else {
		l.head = b.next
	}
	if b.next != nil {
		b.next.prev = b.prev
	} else {
		l.tail = b.prev
	}
	b.prev, b.next = nil, nil
	l.n--
}

// kvCache is the paged KV cache with automatic prefix caching. Every one of
// the total blocks is in exactly one of four states:
//
//   - pinned: a hashed block referenced by at least one running sequence
//     (shared prefixes are counted once);
//   - private: an unhashed block of one running sequence (the partial last
//     prompt block and the output blocks);
//   - cached: a hashed block no running sequence uses, kept in the LRU and
//     found by later prompts with the same prefix;
//   - empty.
//
// Used blocks (vLLM's kv_cache_usage_perc numerator) are pinned + private;
// cached blocks count as free because they can be evicted at any time.
// Not safe for concurrent use: the engine's lock guards it.
type kvCache struct {
	total     int
	blocks    map[uint64]*block
	lru       blockList
	pinned    int
	private   int
	evictions uint64
	spare     []*block // recycled block structs
}

func newKVCache(total int) *kvCache {
	return &kvCache{total: total, blocks: make(map[uint64]*block, min(total, 1<<14))}
}

// used returns the blocks held by running sequences.
func (c *kvCache) used() int { return c.pinned + c.private }

// available returns how many blocks could be handed out now: empty plus
// evictable ones.
func (c *kvCache) available() int { return c.total - c.pinned - c.private }

// cached returns the number of free blocks that still hold a prefix.
func (c *kvCache) cached() int { return c.lru.n }

// lookup returns the number of leading hashes present in the cache (pinned
// or cached), looking at no more than limit of them, and how many of those
// hits are currently in the LRU (free).
func (c *kvCache) lookup(hashes []uint64, limit int) (hits, free int) {
	if limit > len(hashes) {
		limit = len(hashes)
	}
	for hits < limit {
		b, ok := c.blocks[hashes[hits]]
		if !ok {
			break
		}
		if b.ref == 0 {
			free++
		}
		hits++
	}
	return hits, free
}

// takeSlot makes one empty block available, evicting the least recently used
// cached block if needed. It reports false when every block is in use.
func (c *kvCache) takeSlot() bool {
	if c.total-c.pinned-c.private-c.lru.n > 0 {
		return true
	}
	victim := c.lru.head
	if victim == nil {
		return false
	}
	c.lru.remove(victim)
	delete(c.blocks, victim.hash)
	c.evictions++
	c.spare = append(c.spare, victim)
	return true
}

// pin references the block with hash h, creating it in an empty slot when it
// is not cached. It returns nil only when no slot is available.
func (c *kvCache) pin(h uint64) *block {
	if b, ok := c.blocks[h]; ok {
		if b.ref == 0 {
			c.lru.remove(b)
			c.pinned++
		}
		b.ref++
		return b
	}
	if !c.takeSlot() {
		return nil
	}
	var b *block
	if n := len(c.spare); n > 0 {
		b = c.spare[n-1]
		c.spare = c.spare[:n-1]
		*b = block{}
	} else {
		b = new(block)
	}
	b.hash, b.ref = h, 1
	c.blocks[h] = b
	c.pinned++
	return b
}

// release drops one reference to each block. Blocks nobody uses any more join
// the LRU in reverse order, so a prefix's deepest block is evicted first and
// its root, the part most likely to be shared, last.
func (c *kvCache) release(bs []*block) {
	for i := len(bs) - 1; i >= 0; i-- {
		b := bs[i]
		b.ref--
		if b.ref == 0 {
			c.pinned--
			c.lru.pushBack(b)
		}
	}
}

// allocPrivate takes one unhashed block; false when the cache is full.
func (c *kvCache) allocPrivate() bool {
	if !c.takeSlot() {
		return false
	}
	c.private++
	return true
}

// freePrivate returns n unhashed blocks.
func (c *kvCache) freePrivate(n int) { c.private -= n }
