package queue

import (
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

func TestFactory(t *testing.T) {
	schedulingtest.RunFactoryCases(t, Registration, schedulingtest.NoParamsCases())
}

// TestScoreReadsWaitingQueue checks the wiring: the scorer min-max
// normalises the waiting queue size, not the running requests.
// The normalisation itself is tested in scorer/internal/minmax.
func TestScoreReadsWaitingQueue(t *testing.T) {
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
	eps := schedulingtest.Endpoints(3, func(i int, b *schedulingtest.EndpointBuilder) {
		b.Queue([]int{10, 5, 0}[i]).Running([]int{0, 5, 10}[i])
	})
	scores := make([]float64, len(eps))
	s.Score(t.Context(), &scheduling.Request{}, eps, scores)
	for i, want := range []float64{0, 0.5, 1} {
		if scores[i] != want {
			t.Errorf("score[%d] = %v, want %v", i, scores[i], want)
		}
	}
}
