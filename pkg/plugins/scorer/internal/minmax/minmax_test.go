package minmax

import (
	"slices"
	"testing"
	"time"

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

// TestScoreUnmeasured: an endpoint that is not scraped (zero UpdateTime)
// never scores as idle next to measured ones; with none measured the
// values are used as they are.
func TestScoreUnmeasured(t *testing.T) {
	build := func(values []int, unmeasured ...int) []*scheduling.Endpoint {
		return schedulingtest.Endpoints(len(values), func(i int, b *schedulingtest.EndpointBuilder) {
			b.Queue(values[i])
			if slices.Contains(unmeasured, i) {
				b.UpdateTime(time.Time{})
			}
		})
	}
	for _, tt := range []struct {
		name       string
		values     []int
		unmeasured []int
		want       []float64
	}{
		{"unmeasured zero next to loaded", []int{0, 10, 20}, []int{0}, []float64{0, 1, 0}},
		{"unmeasured next to equal measured", []int{0, 5, 5}, []int{0}, []float64{0, 1, 1}},
		{"all unmeasured: as GIE", []int{0, 0}, []int{0, 1}, []float64{1, 1}},
		{"none unmeasured", []int{0, 10}, nil, []float64{1, 0}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			eps := build(tt.values, tt.unmeasured...)
			scores := make([]float64, len(eps))
			Score(eps, scores, queue)
			if !slices.Equal(scores, tt.want) {
				t.Errorf("scores %v, want %v", scores, tt.want)
			}
			if got, want := Measured(eps), len(tt.unmeasured) > 0 && len(tt.unmeasured) < len(eps); got != want {
				t.Errorf("Measured = %v, want %v", got, want)
			}
		})
	}
}
