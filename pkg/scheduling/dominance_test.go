package scheduling_test

import (
	"math"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

// TestC37_StrictlyDominant: the index of the one strictly highest score,
// -1 for a tie at the top (wherever the tied runner-up is), no
// candidates, or NaN at the top; a lone candidate dominates.
func TestC37_StrictlyDominant(t *testing.T) {
	t.Parallel()
	nan := math.NaN()
	tests := []struct {
		name   string
		scores []float64
		want   int
	}{
		{name: "none", scores: nil, want: -1},
		{name: "lone", scores: []float64{0}, want: 0},
		{name: "first", scores: []float64{0.18, 0.16}, want: 0},
		{name: "last by a hair", scores: []float64{0.5, 0.5 + 1e-12}, want: 1},
		{name: "tie", scores: []float64{0.2, 0.2}, want: -1},
		{name: "tie behind a lower first", scores: []float64{0.1, 0.2, 0.2}, want: -1},
		{name: "tie broken by a later higher", scores: []float64{0.2, 0.2, 0.3}, want: 2},
		{name: "all zero", scores: []float64{0, 0, 0}, want: -1},
		{name: "NaN first", scores: []float64{nan, 0.1}, want: -1},
		{name: "NaN later ignored", scores: []float64{0.1, nan}, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := scheduling.StrictlyDominant(schedulingtest.Scored(tt.scores...)); got != tt.want {
				t.Errorf("StrictlyDominant(%v) = %d, want %d", tt.scores, got, tt.want)
			}
		})
	}
}

// TestC37_TakeStrictDominance: reading the request clears it; a request
// that never asked, a false value and a nil request do not ask.
func TestC37_TakeStrictDominance(t *testing.T) {
	t.Parallel()
	req := &scheduling.Request{}
	if scheduling.TakeStrictDominance(req) {
		t.Error("a request that never asked")
	}
	scheduling.StrictDominanceKey.Set(req, true)
	if !scheduling.TakeStrictDominance(req) {
		t.Error("asked, not taken")
	}
	if scheduling.TakeStrictDominance(req) {
		t.Error("taken twice")
	}
	scheduling.StrictDominanceKey.Set(req, false)
	if scheduling.TakeStrictDominance(req) {
		t.Error("false asks nothing")
	}
	if _, ok := scheduling.StrictDominanceKey.Get(req); ok {
		t.Error("false left on the request")
	}
	if scheduling.TakeStrictDominance(nil) {
		t.Error("nil request")
	}
}

// TestDecidedByLabels: the values' names are the strategy-picker's
// decided_by labels, and recording one allocates nothing.
func TestDecidedByLabels(t *testing.T) {
	if scheduling.DecidedByScorers.String() != "scorers" || scheduling.DecidedByStrategy.String() != "strategy" || scheduling.DecidedBy(0).String() != "unknown" {
		t.Errorf("labels %q %q %q", scheduling.DecidedByScorers, scheduling.DecidedByStrategy, scheduling.DecidedBy(0))
	}
	req := &scheduling.Request{}
	scheduling.DecidedByKey.Set(req, scheduling.DecidedByScorers)
	scheduling.StrictDominanceKey.Set(req, true)
	if n := testing.AllocsPerRun(100, func() {
		scheduling.DecidedByKey.Set(req, scheduling.DecidedByStrategy)
		scheduling.StrictDominanceKey.Set(req, true)
	}); n != 0 {
		t.Errorf("recording allocates %v", n)
	}
}
