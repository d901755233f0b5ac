package queue

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
	req := &scheduling.Request{}
	for _, n := range []int{10, 100, 1000} {
		eps := schedulingtest.Endpoints(n, func(i int, eb *schedulingtest.EndpointBuilder) { eb.Queue(i % 17) })
		scores := make([]float64, n)
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s.Score(b.Context(), req, eps, scores)
			}
		})
	}
}
