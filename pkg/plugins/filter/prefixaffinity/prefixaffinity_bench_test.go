package prefixaffinity

import (
	"fmt"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

// benchRequest returns a request whose prefix match makes three endpoints
// sticky and two more partial hits.
func benchRequest(eps []*scheduling.Endpoint) *scheduling.Request {
	req := &scheduling.Request{PromptTokens: 1024}
	m := scheduling.PrefixHitMap{}
	for i, blocks := range []int{64, 60, 52, 20, 8} {
		m[eps[(i*37)%len(eps)].Key()] = blocks
	}
	scheduling.PrefixMatchKey.Set(req, &scheduling.PrefixMatch{TotalBlocks: 64, BlockSizeTokens: 16, Hits: m})
	return req
}

// BenchmarkFilter narrows to the sticky endpoints with the TTFT gate on
// (ttftSource prefillThroughput).
func BenchmarkFilter(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			f := newFilter(b, `{"explorationProbability": 0, "ttftSource": "prefillThroughput"}`)
			eps := schedulingtest.Endpoints(n, func(i int, e *schedulingtest.EndpointBuilder) { e.Queue(i % 5) })
			req := benchRequest(eps)
			ctx := b.Context()
			b.ReportAllocs()
			for b.Loop() {
				f.Filter(ctx, req, eps)
			}
		})
	}
}

// BenchmarkFilterNoGate narrows to the sticky endpoints with the default
// ttftSource none, as GIE v1.5 without a latency predictor.
func BenchmarkFilterNoGate(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			f := newFilter(b, `{"explorationProbability": 0}`)
			eps := schedulingtest.Endpoints(n, func(i int, e *schedulingtest.EndpointBuilder) { e.Queue(i % 5) })
			req := benchRequest(eps)
			ctx := b.Context()
			b.ReportAllocs()
			for b.Loop() {
				f.Filter(ctx, req, eps)
			}
		})
	}
}

// BenchmarkFilterNoMatch is the common cold case: no endpoint has a hit.
func BenchmarkFilterNoMatch(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			f := newFilter(b, "")
			eps := schedulingtest.Endpoints(n, nil)
			req := &scheduling.Request{}
			scheduling.PrefixMatchKey.Set(req, &scheduling.PrefixMatch{TotalBlocks: 64, BlockSizeTokens: 16})
			ctx := b.Context()
			b.ReportAllocs()
			for b.Loop() {
				f.Filter(ctx, req, eps)
			}
		})
	}
}
