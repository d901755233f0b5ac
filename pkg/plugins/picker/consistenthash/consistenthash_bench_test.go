package consistenthash

import (
	"fmt"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/internal/hashring"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
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

// BenchmarkPickSubsets picks over 16 different candidate subsets of the
// pool (filters that vary per request: served models, caller scope), in
// turn: one ring over the pool, walked skipping the others (a per-subset
// ring cache rebuilt on every miss before).
func BenchmarkPickSubsets(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			p := newPicker(b, 1, DefaultVirtualNodes)
			all := pool(named("ep", n)...)
			subsets := make([][]scheduling.ScoredEndpoint, 16)
			for s := range subsets {
				for i, e := range all {
					if i%16 != s { // all but every 16th endpoint, shifted
						subsets[s] = append(subsets[s], e)
					}
				}
			}
			models := named("model", 64)
			p.Pick(b.Context(), req("m"), all)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				p.Pick(b.Context(), req(models[i%64]), subsets[(i*7)%16])
			}
		})
	}
}

// BenchmarkBuild builds the ring of a pool (once per new endpoint).
func BenchmarkBuild(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			scored := pool(named("ep", n)...)
			members := make([]hashring.Member, n)
			for i, s := range scored {
				members[i] = hashring.Member{KeyHash: s.Endpoint.KeyHash(), Key: s.Endpoint.Key()}
			}
			b.ReportAllocs()
			for b.Loop() {
				hashring.Build(members, DefaultVirtualNodes)
			}
		})
	}
}
