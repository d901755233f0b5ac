package engineload

import (
	"context"
	"fmt"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/internal/pick"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

// benchBase is a base strategy that costs nothing: its first candidate.
type benchBase struct{}

func (benchBase) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: "round-robin-picker"}
}

func (benchBase) Pick(_ context.Context, _ *scheduling.Request, scored []scheduling.ScoredEndpoint) *scheduling.ProfileResult {
	return pick.Single(scored[0].Endpoint)
}

func benchmarkPick(b *testing.B, waiting func(i int) int) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			pk, _ := setup(b, prometheus.NewRegistry(), logr.Discard(), nil)
			pk.base, pk.pbase = benchBase{}, nil
			scored := make([]scheduling.ScoredEndpoint, n)
			for i := range scored {
				scored[i] = scheduling.ScoredEndpoint{Endpoint: schedulingtest.Endpoint(fmt.Sprintf("ep-%d", i)).Queue(waiting(i)).KVCache(float64(i%10) / 10).UpdateTime(now).Build()}
			}
			b.ReportAllocs()
			for b.Loop() {
				pk.Pick(b.Context(), nil, scored)
			}
		})
	}
}

// BenchmarkPick ranks by engine load (the deadband open: queues 0..990).
func BenchmarkPick(b *testing.B) { benchmarkPick(b, func(i int) int { return (i * 37 % 100) * 10 }) }

// BenchmarkPickHold holds inside the deadband (queues 0..9): the base picks.
func BenchmarkPickHold(b *testing.B) { benchmarkPick(b, func(i int) int { return i % 10 }) }
