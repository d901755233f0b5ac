package scheduling_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

// queueBenchScorer scores 1 - queue/maxQueue, like a queue-depth scorer,
// so the benchmark reads endpoint metrics instead of a map.
type queueBenchScorer struct {
	name     string
	maxQueue float64
}

func (s *queueBenchScorer) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: "queue-bench-scorer", Name: s.name}
}

func (*queueBenchScorer) Category() scheduling.ScorerCategory { return scheduling.Distribution }

func (s *queueBenchScorer) Score(_ context.Context, _ *scheduling.Request, eps []*scheduling.Endpoint, scores []float64) {
	for i, e := range eps {
		scores[i] = 1 - float64(e.Metrics().WaitingQueueSize)/s.maxQueue
	}
}

// benchProfile builds a profile of three scorers and a max picker.
func benchProfile(b *testing.B, m *scheduling.FrameworkMetrics) *scheduling.Profile {
	b.Helper()
	p, err := scheduling.NewProfile("bench", nil, []scheduling.WeightedScorer{
		{Scorer: &queueBenchScorer{name: "q16", maxQueue: 16}, Weight: 1},
		{Scorer: &queueBenchScorer{name: "q64", maxQueue: 64}, Weight: 2},
		{Scorer: &queueBenchScorer{name: "q128", maxQueue: 128}, Weight: 0.5},
	}, maxPicker{name: "max"}, m)
	if err != nil {
		b.Fatal(err)
	}
	return p
}

func benchEndpoints(n int) []*scheduling.Endpoint {
	return schedulingtest.Endpoints(n, func(i int, eb *schedulingtest.EndpointBuilder) { eb.Queue((i * 7) % 13) })
}

func runProfileBench(b *testing.B, p *scheduling.Profile, eps []*scheduling.Endpoint) {
	req := &scheduling.Request{ID: "bench"}
	ctx := b.Context()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Run(ctx, req, eps); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkProfileRun(b *testing.B) {
	m, err := scheduling.NewFrameworkMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	p := benchProfile(b, m)
	for _, n := range []int{10, 100, 1000} {
		eps := benchEndpoints(n)
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) { runProfileBench(b, p, eps) })
	}
}

// BenchmarkProfileRunNoMetrics is BenchmarkProfileRun/endpoints=1000
// without the plugin duration histogram, to show what it costs.
func BenchmarkProfileRunNoMetrics(b *testing.B) {
	p := benchProfile(b, nil)
	eps := benchEndpoints(1000)
	b.Run("endpoints=1000", func(b *testing.B) { runProfileBench(b, p, eps) })
}
