package activerequest

import (
	"fmt"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

func BenchmarkScore(b *testing.B) {
	s, err := New(Type, Params{IdleThreshold: 1, MaxBusyScore: 0.8}, schedulingtest.NewHandle(b))
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{10, 100, 1000} {
		eps := schedulingtest.Endpoints(n, nil)
		load := fakeLoad{}
		for i, e := range eps {
			load[e.Key()] = int64(i % 7)
		}
		req := &scheduling.Request{}
		scheduling.InFlightLoadKey.Set(req, load)
		scores := make([]float64, n)
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s.Score(b.Context(), req, eps, scores)
			}
		})
	}
}
