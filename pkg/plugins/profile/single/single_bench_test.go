package single

import (
	"fmt"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

// BenchmarkHandler measures the handler's own work for one request.
func BenchmarkHandler(b *testing.B) {
	h := newHandler(b)
	profs := profiles(b, "default")
	res := map[string]*scheduling.ProfileResult{"default": {Targets: schedulingtest.Endpoints(1, nil)}}
	req := &scheduling.Request{}
	b.ReportAllocs()
	for b.Loop() {
		h.Pick(b.Context(), req, profs, nil)
		h.Pick(b.Context(), req, profs, res)
		if _, err := h.ProcessResults(b.Context(), req, res); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSchedule runs a whole scheduling cycle with the handler and one
// profile (a fake scorer and picker).
func BenchmarkSchedule(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			eps := schedulingtest.Endpoints(n, nil)
			scores := map[string]float64{}
			for i, e := range eps {
				scores[e.Name()] = float64(i%7) / 7
			}
			prof, err := scheduling.NewProfile("default", nil,
				[]scheduling.WeightedScorer{{Scorer: &schedulingtest.FakeScorer{Scores: scores}, Weight: 1}},
				&schedulingtest.FakePicker{}, nil)
			if err != nil {
				b.Fatal(err)
			}
			s, err := scheduling.NewScheduler(scheduling.SchedulerConfig{ProfileHandler: newHandler(b), Profiles: []*scheduling.Profile{prof}})
			if err != nil {
				b.Fatal(err)
			}
			req := &scheduling.Request{}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Schedule(b.Context(), req, eps); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
