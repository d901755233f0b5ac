package candcache

import (
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

func TestCache(t *testing.T) {
	var c Cache[int]
	calls := 0
	count := func(eps []*scheduling.Endpoint) int { calls++; return len(eps) }
	a := schedulingtest.Endpoints(5, nil)
	b := schedulingtest.Endpoints(5, nil) // same keys, another slice
	for range 3 {
		if got := c.Get(a, count); got != 5 {
			t.Fatal(got)
		}
	}
	if calls != 1 {
		t.Fatalf("%d computations for one slice, want 1", calls)
	}
	c.Get(b, count)
	c.Get(a[:3], count)
	c.Get(a, count)
	c.Get(append([]*scheduling.Endpoint(nil), a...), count) // a copy of a: the same list
	if calls != 3 {
		t.Errorf("%d computations, want 3 (a, b, a[:3]; a and its copy are cached)", calls)
	}
	// A slice reused for other endpoints (a pooled buffer) is recomputed.
	buf := make([]*scheduling.Endpoint, 5)
	copy(buf, a)
	c.Get(buf, count)
	buf[2] = schedulingtest.Endpoint("other").Build()
	c.Get(buf, count)
	if calls != 4 {
		t.Errorf("%d computations, want 4: the buffer first holds a, then another set", calls)
	}
	if got := c.Get(nil, count); got != 0 || calls != 5 {
		t.Errorf("empty list: %d, %d calls", got, calls)
	}
}

func BenchmarkGet(b *testing.B) {
	for _, n := range []int{10, 1000} {
		eps := schedulingtest.Endpoints(n, nil)
		var c Cache[int]
		b.Run("", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c.Get(eps, func(e []*scheduling.Endpoint) int { return len(e) })
			}
		})
	}
}
