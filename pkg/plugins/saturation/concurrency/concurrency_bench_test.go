package concurrency

import (
	"fmt"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

var sizes = []int{10, 100, 1000}

// loaded returns a detector with maxConcurrency 8 and n endpoints carrying
// 0–9 in-flight requests, so that the filter removes some of them.
func loaded(b *testing.B, n int) (*Detector, []*scheduling.Endpoint) {
	d := mustBuild(b, `{"maxConcurrency": 8}`)
	eps := schedulingtest.Endpoints(n, nil)
	for i, e := range eps {
		send(b, d, e, i%10, 100)
	}
	return d, eps
}

func BenchmarkSaturation(b *testing.B) {
	for _, n := range sizes {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			d, eps := loaded(b, n)
			ctx := b.Context()
			b.ReportAllocs()
			for b.Loop() {
				d.Saturation(ctx, eps)
			}
		})
	}
}

func BenchmarkFilter(b *testing.B) {
	for _, n := range sizes {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			d, eps := loaded(b, n)
			ctx, req := b.Context(), &scheduling.Request{}
			b.ReportAllocs()
			for b.Loop() {
				d.Filter(ctx, req, eps)
			}
		})
	}
}

// BenchmarkRequestLifecycle measures the per-request hooks: count on
// PreRequest, release on ResponseComplete, spread over the pool.
func BenchmarkRequestLifecycle(b *testing.B) {
	for _, n := range sizes {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			d, eps := loaded(b, n)
			results := make([]*scheduling.Result, n)
			for i, e := range eps {
				results[i] = result(e)
			}
			ctx := b.Context()
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				req := &scheduling.Request{PromptTokens: 100}
				d.PreRequest(ctx, req, results[i%n])
				d.ResponseComplete(ctx, req, nil, nil)
				i++
			}
		})
	}
}
