// Package candcache memoizes what a filter derives from a candidate list
// (which endpoints declare models, which are internal), so that the
// per-request cost does not grow with the pool's data. Most requests of a
// published snapshot see the same candidate list; a value is computed
// once per list and found again by comparing the endpoint pointers (which
// a snapshot never reuses for other data): no endpoint is dereferenced
// on a hit. Only filters under pkg/plugins/filter import it.
package candcache

import (
	"slices"
	"sync/atomic"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// slots is how many candidate lists a Cache remembers: the published set,
// and a few subsets (subset hints, earlier filters).
const slots = 4

// Cache remembers values computed from candidate lists. The zero value is
// ready; it is safe for concurrent use and lock-free.
type Cache[T any] struct {
	entries [slots]atomic.Pointer[entry[T]]
	next    atomic.Uint32
}

type entry[T any] struct {
	eps []*scheduling.Endpoint // a copy of the list
	v   T
}

// Get returns compute(eps), computed once per candidate list. compute
// must derive its value from eps alone (endpoints are immutable) and must
// not keep eps.
func (c *Cache[T]) Get(eps []*scheduling.Endpoint, compute func([]*scheduling.Endpoint) T) T {
	if len(eps) == 0 {
		return compute(eps)
	}
	for i := range c.entries {
		if e := c.entries[i].Load(); e != nil && same(e.eps, eps) {
			return e.v
		}
	}
	v := compute(eps)
	c.entries[c.next.Add(1)%slots].Store(&entry[T]{eps: slices.Clone(eps), v: v})
	return v
}

// same reports whether two lists hold the same endpoints in the same
// order, comparing pointers only.
func same(a, b []*scheduling.Endpoint) bool {
	if len(a) != len(b) || a[0] != b[0] || a[len(a)-1] != b[len(b)-1] {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
