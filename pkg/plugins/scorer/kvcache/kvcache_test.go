package kvcache

import (
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

func TestFactory(t *testing.T) {
	schedulingtest.RunFactoryCases(t, Registration, schedulingtest.NoParamsCases())
}

// TestNew checks the default name and the category.
func TestNew(t *testing.T) {
	s, err := New("", DefaultParams(), schedulingtest.NewHandle(t))
	if err != nil {
		t.Fatal(err)
	}
	if s.TypedName().Name != Type {
		t.Errorf("name = %q, want %q", s.TypedName().Name, Type)
	}
	if s.Category() != scheduling.Distribution {
		t.Errorf("Category() = %v, want Distribution", s.Category())
	}
}

// TestScore reproduces GIE v1.5.0's KV cache utilization scorer cases.
func TestScore(t *testing.T) {
	tests := []struct {
		name  string
		usage []float64
		want  []float64
	}{
		{name: "different utilization", usage: []float64{0.8, 0.5, 0}, want: []float64{0.2, 0.5, 1}},
		{name: "same utilization", usage: []float64{0.6, 0.6}, want: []float64{0.4, 0.4}},
		{name: "zero utilization", usage: []float64{0, 0}, want: []float64{1, 1}},
		{name: "full utilization", usage: []float64{1, 0.5}, want: []float64{0, 0.5}},
		{name: "over-reported usage is left for the framework to clamp", usage: []float64{1.25}, want: []float64{-0.25}},
		{name: "no endpoints", usage: nil, want: []float64{}},
	}
	s, err := New(Type, DefaultParams(), schedulingtest.NewHandle(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eps := schedulingtest.Endpoints(len(tt.usage), func(i int, b *schedulingtest.EndpointBuilder) { b.KVCache(tt.usage[i]) })
			scores := make([]float64, len(eps))
			s.Score(t.Context(), &scheduling.Request{}, eps, scores)
			for i := range tt.want {
				if d := scores[i] - tt.want[i]; d > 1e-12 || d < -1e-12 {
					t.Errorf("score[%d] (usage %v) = %v, want %v", i, tt.usage[i], scores[i], tt.want[i])
				}
			}
		})
	}
}

// TestScoreUnmeasured: an endpoint that is not scraped (zero UpdateTime)
// scores 0 next to measured ones, never as an empty cache; with none
// measured the zeros are used as GIE does.
func TestScoreUnmeasured(t *testing.T) {
	s, err := New(Type, DefaultParams(), schedulingtest.NewHandle(t))
	if err != nil {
		t.Fatal(err)
	}
	mixed := schedulingtest.Endpoints(2, func(i int, b *schedulingtest.EndpointBuilder) {
		b.KVCache(0.5)
		if i == 0 {
			b.KVCache(0).UpdateTime(time.Time{})
		}
	})
	scores := make([]float64, 2)
	s.Score(t.Context(), &scheduling.Request{}, mixed, scores)
	if scores[0] != 0 || scores[1] != 0.5 {
		t.Errorf("mixed: scores %v, want [0 0.5]", scores)
	}
	none := schedulingtest.Endpoints(2, func(_ int, b *schedulingtest.EndpointBuilder) { b.UpdateTime(time.Time{}) })
	s.Score(t.Context(), &scheduling.Request{}, none, scores)
	if scores[0] != 1 || scores[1] != 1 {
		t.Errorf("none measured: scores %v, want [1 1]", scores)
	}
}
