package minmax

import (
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

func queue(e *scheduling.Endpoint) int { return e.Metrics().WaitingQueueSize }

func TestScore(t *testing.T) {
	tests := []struct {
		name   string
		values []int
		want   []float64
	}{
		{name: "no endpoints", values: nil, want: []float64{}},
		{name: "single endpoint", values: []int{42}, want: []float64{1}},
		{name: "all equal", values: []int{5, 5, 5}, want: []float64{1, 1, 1}},
		{name: "all zero", values: []int{0, 0}, want: []float64{1, 1}},
		{name: "lowest 1, highest 0", values: []int{10, 5, 0}, want: []float64{0, 0.5, 1}},
		{name: "uneven spread", values: []int{3, 7, 11, 4}, want: []float64{1, 0.5, 0, 0.875}},
		{name: "two values", values: []int{1, 2, 2, 1}, want: []float64{1, 0, 0, 1}},
		{name: "negative values", values: []int{-4, 0, 4}, want: []float64{1, 0.5, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eps := schedulingtest.Endpoints(len(tt.values), func(i int, b *schedulingtest.EndpointBuilder) { b.Queue(tt.values[i]) })
			scores := make([]float64, len(eps))
			Score(eps, scores, queue)
			for i := range tt.want {
				if scores[i] != tt.want[i] {
					t.Errorf("score[%d] (value %d) = %v, want %v", i, tt.values[i], scores[i], tt.want[i])
				}
			}
		})
	}
}

func TestScoreAllocs(t *testing.T) {
	eps := schedulingtest.Endpoints(100, func(i int, b *schedulingtest.EndpointBuilder) { b.Queue(i % 7) })
	scores := make([]float64, len(eps))
	if n := testing.AllocsPerRun(100, func() { Score(eps, scores, queue) }); n != 0 {
		t.Errorf("Score allocates %v times, want 0", n)
	}
}
