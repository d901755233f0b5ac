package weightedroundrobin

import (
	"fmt"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

func benchmarkPick(b *testing.B, max int) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			p := newPicker(b, max)
			eps := schedulingtest.Endpoints(n, func(i int, e *schedulingtest.EndpointBuilder) { e.Weight(1 + i%4) })
			scored := make([]scheduling.ScoredEndpoint, n)
			for i, e := range eps {
				scored[i].Endpoint = e
			}
			b.ReportAllocs()
			for b.Loop() {
				p.Pick(b.Context(), nil, scored)
			}
		})
	}
}

// BenchmarkPick picks one endpoint (the default).
func BenchmarkPick(b *testing.B) { benchmarkPick(b, 1) }

// BenchmarkPickThree picks a primary and two fallbacks.
func BenchmarkPickThree(b *testing.B) { benchmarkPick(b, 3) }
