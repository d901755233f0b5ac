package tokenload

import (
	"fmt"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

func BenchmarkScore(b *testing.B) {
	s, err := New(Type, DefaultParams(), schedulingtest.NewHandle(b))
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{10, 100, 1000} {
		eps := schedulingtest.Endpoints(n, nil)
		load := fakeLoad{}
		for i, e := range eps {
			load[e.Key()] = [2]int64{int64(i % 5), int64(i * 1000)}
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
