package prefixawarehash

import (
	"fmt"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

func benchmarkPick(b *testing.B, max int, reqs func(i int) *scheduling.Request) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			p := newPicker(b, func(p *Params) { p.MaxNumOfEndpoints = max })
			scored, loads := loaded(n)
			for i, l := range loads {
				l.InFlightN.Store(int64(i % 7))
			}
			p.Pick(b.Context(), reqs(0), scored) // the ring is built once per set
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				p.Pick(b.Context(), reqs(i), scored)
			}
		})
	}
}

// systemPrompts are 64 chat requests with 2 KiB system prompts (cut to
// the default 1024 bytes).
var systemPrompts = func() []*scheduling.Request {
	out := make([]*scheduling.Request, 64)
	for i := range out {
		out[i] = chat("llama-3.3-70b", fmt.Sprintf("tenant %d: ", i)+strings.Repeat("You are a helpful assistant. ", 70), "question")
	}
	return out
}()

// BenchmarkPick picks one endpoint for requests with a prefix key over a
// cached ring (SHA-256 of 1 KiB, the loads of every candidate, the walk).
func BenchmarkPick(b *testing.B) {
	benchmarkPick(b, 1, func(i int) *scheduling.Request { return systemPrompts[i%64] })
}

// BenchmarkPickThree picks a primary and two fallbacks.
func BenchmarkPickThree(b *testing.B) {
	benchmarkPick(b, 3, func(i int) *scheduling.Request { return systemPrompts[i%64] })
}

// BenchmarkPickFallback picks by the model's hash (no key).
func BenchmarkPickFallback(b *testing.B) {
	req := &scheduling.Request{Model: "llama-3.3-70b"}
	benchmarkPick(b, 1, func(int) *scheduling.Request { return req })
}

// BenchmarkPickSubsets picks over 16 different candidate subsets of the
// pool in turn (filters that vary per request): one ring over the pool,
// walked skipping the others (a per-subset ring cache rebuilt on every
// miss before).
func BenchmarkPickSubsets(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			p := newPicker(b, nil)
			all, loads := loaded(n)
			for i, l := range loads {
				l.InFlightN.Store(int64(i % 7))
			}
			subsets := make([][]scheduling.ScoredEndpoint, 16)
			for s := range subsets {
				for i, e := range all {
					if i%16 != s { // all but every 16th endpoint, shifted
						subsets[s] = append(subsets[s], e)
					}
				}
			}
			p.Pick(b.Context(), systemPrompts[0], all)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				p.Pick(b.Context(), systemPrompts[i%64], subsets[(i*7)%16])
			}
		})
	}
}
