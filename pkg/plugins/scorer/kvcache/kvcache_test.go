package kvcache

import (
	"testing"

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
