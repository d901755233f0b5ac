package consistenthash

import (
	"fmt"
	"testing"
)

func benchmarkPick(b *testing.B, max int) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			p := newPicker(b, max, DefaultVirtualNodes)
			scored := pool(named("ep", n)...)
			reqs := make([]string, 64)
			for i := range reqs {
				reqs[i] = fmt.Sprintf("model-%d", i)
			}
			p.Pick(b.Context(), req(reqs[0]), scored) // the ring is built once per set
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				p.Pick(b.Context(), req(reqs[i%64]), scored)
			}
		})
	}
}

// BenchmarkPick picks one endpoint (the default) over a cached ring.
func BenchmarkPick(b *testing.B) { benchmarkPick(b, 1) }

// BenchmarkPickThree picks a primary and two fallbacks.
func BenchmarkPickThree(b *testing.B) { benchmarkPick(b, 3) }

// BenchmarkBuild builds the ring of a new candidate set (what a change of
// the pool costs, once).
func BenchmarkBuild(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			scored := pool(named("ep", n)...)
			b.ReportAllocs()
			for b.Loop() {
				build(scored, 1, DefaultVirtualNodes)
			}
		})
	}
}
