package lora

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
	if s.Category() != scheduling.Affinity {
		t.Errorf("Category() = %v, want Affinity", s.Category())
	}
}

type epSpec struct {
	active, waiting []string
	max             int
}

// TestScore reproduces GIE v1.5.0's LoRA affinity scorer cases, including
// its order of conditions: a free slot (0.8) wins over "waiting" (0.6).
func TestScore(t *testing.T) {
	tests := []struct {
		name   string
		target string
		eps    []epSpec
		want   []float64
	}{
		{
			name:   "target model is active",
			target: "active-model-1",
			eps:    []epSpec{{active: []string{"active-model-1"}, max: 5}},
			want:   []float64{1},
		},
		{
			name:   "target model is waiting on a full endpoint",
			target: "active-model-1",
			eps:    []epSpec{{active: []string{"active-model-2"}, waiting: []string{"active-model-1"}, max: 2}},
			want:   []float64{0.6},
		},
		{
			name:   "endpoints have no space for a new model",
			target: "active-model-1",
			eps: []epSpec{
				{active: []string{"active-model-2"}, waiting: []string{"active-model-3"}, max: 2},
				{max: 0},
			},
			want: []float64{0, 0},
		},
		{
			name:   "mixed active and waiting models",
			target: "active-model-1",
			eps: []epSpec{
				{active: []string{"active-model-1"}, max: 5},
				{active: []string{"active-model-2"}, waiting: []string{"active-model-1"}, max: 5},
				{active: []string{"active-model-2"}, max: 2},
				{active: []string{"active-model-3"}, waiting: []string{"active-model-1"}, max: 2},
				{active: []string{"active-model-4", "active-model-5"}, max: 2},
			},
			want: []float64{1, 0.8, 0.8, 0.6, 0},
		},
		{
			name:   "no target model and free slots",
			target: "",
			eps:    []epSpec{{max: 4}, {active: []string{"a"}, max: 1}},
			want:   []float64{0.8, 0},
		},
		{name: "no endpoints", target: "modelA", eps: nil, want: []float64{}},
	}
	s, err := New(Type, DefaultParams(), schedulingtest.NewHandle(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eps := schedulingtest.Endpoints(len(tt.eps), func(i int, b *schedulingtest.EndpointBuilder) {
				b.ActiveModels(tt.eps[i].active...).WaitingModels(tt.eps[i].waiting...).MaxModels(tt.eps[i].max)
			})
			scores := make([]float64, len(eps))
			s.Score(t.Context(), &scheduling.Request{Model: "base", TargetModel: tt.target}, eps, scores)
			for i := range tt.want {
				if scores[i] != tt.want[i] {
					t.Errorf("score[%d] = %v, want %v", i, scores[i], tt.want[i])
				}
			}
		})
	}
}

func TestScoreNilRequest(t *testing.T) {
	s, _ := New(Type, DefaultParams(), schedulingtest.NewHandle(t))
	eps := schedulingtest.Endpoints(1, func(_ int, b *schedulingtest.EndpointBuilder) { b.MaxModels(1) })
	scores := make([]float64, 1)
	s.Score(t.Context(), nil, eps, scores)
	if scores[0] != ScoreFreeSlot {
		t.Errorf("score = %v, want %v", scores[0], ScoreFreeSlot)
	}
}
