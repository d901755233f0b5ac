package utilization

import (
	"fmt"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

var sizes = []int{10, 100, 1000}

// benchEndpoints mixes fresh, busy and stale endpoints so that the filter
// removes some of them.
func benchEndpoints(n int) []*scheduling.Endpoint {
	return schedulingtest.Endpoints(n, func(i int, b *schedulingtest.EndpointBuilder) {
		b.Queue(i % 8).KVCache(float64(i%10) / 10).UpdateTime(base)
		if i%17 == 0 {
			b.UpdateTime(base.Add(-time.Second))
		}
	})
}

func benchDetector(b *testing.B) *Detector {
	d, err := New("sd", DefaultParams(), schedulingtest.NewHandle(b))
	if err != nil {
		b.Fatal(err)
	}
	d.now = func() time.Time { return base }
	return d
}

func BenchmarkSaturation(b *testing.B) {
	for _, n := range sizes {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			d, eps := benchDetector(b), benchEndpoints(n)
			ctx := b.Context()
			b.ReportAllocs()
			for b.Loop() {
				d.Saturation(ctx, nil, eps)
			}
		})
	}
}

func BenchmarkFilter(b *testing.B) {
	for _, n := range sizes {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			d, eps := benchDetector(b), benchEndpoints(n)
			ctx, req := b.Context(), &scheduling.Request{}
			b.ReportAllocs()
			for b.Loop() {
				d.Filter(ctx, req, eps)
			}
		})
	}
}

// BenchmarkFilterAllPass is the common case of an unloaded pool: nothing is
// removed and the input slice is returned as is.
func BenchmarkFilterAllPass(b *testing.B) {
	for _, n := range sizes {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			d := benchDetector(b)
			eps := schedulingtest.Endpoints(n, func(_ int, e *schedulingtest.EndpointBuilder) { e.UpdateTime(base) })
			ctx, req := b.Context(), &scheduling.Request{}
			b.ReportAllocs()
			for b.Loop() {
				d.Filter(ctx, req, eps)
			}
		})
	}
}
