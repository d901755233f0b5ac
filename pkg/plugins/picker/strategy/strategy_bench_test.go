package strategy

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

// benchmarkPick measures the precedence check and the strategy call (a
// rotation, like round-robin-picker's), over 10, 100 and 1000 endpoints.
// decided says whether the scorers decide (one clear winner) or the
// strategy does (all tied). The profile's scoring is measured by the
// loader's BenchmarkStrategyPickerDefaultProfile (pkg/config).
func benchmarkPick(b *testing.B, max int, decided bool) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			params := DefaultParams()
			params.MaxNumOfEndpoints = max
			p, _ := newPicker(b, params, prometheus.NewRegistry())
			scores := make([]float64, n)
			for i := range scores {
				scores[i] = 3
			}
			if decided {
				scores[n/2] = 6
			}
			scored := schedulingtest.Scored(scores...)
			info := scheduling.PickInfo{TotalWeight: 7, Scorers: 3}
			b.ReportAllocs()
			for b.Loop() {
				p.PickInProfile(b.Context(), nil, scored, info)
			}
		})
	}
}

// BenchmarkPickScorersDecide: one endpoint scores clearly highest.
func BenchmarkPickScorersDecide(b *testing.B) { benchmarkPick(b, 1, true) }

// BenchmarkPickStrategyDecides: the scores tie; the strategy chooses.
func BenchmarkPickStrategyDecides(b *testing.B) { benchmarkPick(b, 1, false) }

// BenchmarkPickThree: the scorers decide the primary, the strategy orders
// two fallbacks.
func BenchmarkPickThree(b *testing.B) { benchmarkPick(b, 3, true) }
