package matrix

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// scripted is an EPP whose steps pass up to a ceiling, with scripted
// answers for chosen tries of chosen rates.
type scripted struct {
	ceiling float64
	script  map[float64][]Step // rate → answers for its 1st, 2nd… try
	tries   []float64
}

func (s *scripted) step(rate float64) Step {
	n := 0
	for _, r := range s.tries {
		if r == rate {
			n++
		}
	}
	s.tries = append(s.tries, rate)
	if answers := s.script[rate]; n < len(answers) {
		st := answers[n]
		st.Rate = rate
		return st
	}
	st := Step{Rate: rate, Served: rate, Arrivals: 100, Done: 100, P99: time.Millisecond}
	if rate > s.ceiling {
		st.P99, st.Served = time.Second, s.ceiling
	}
	return st
}

func TestSearch(t *testing.T) {
	search := Search{First: 250, Max: 128000, P99: 5 * time.Millisecond, Retry: 4}
	stall := Step{Served: 250, Arrivals: 100, Done: 100, P99: 9 * time.Millisecond} // one stall: p99 just over
	for _, tc := range []struct {
		name    string
		epp     scripted
		max     float64
		tries   []float64
		plateau float64
	}{
		{name: "doubles, then bisects twice", epp: scripted{ceiling: 1500},
			max: 1500, tries: []float64{250, 500, 1000, 2000, 1500, 1750}, plateau: 1500},
		{name: "first fails: halves to a bracket", epp: scripted{ceiling: 70},
			max: 62.5, tries: []float64{250, 125, 62.5, 93.75, 78.125}, plateau: 70},
		{name: "nothing passes down to a sixteenth", epp: scripted{ceiling: 1},
			max: 0, tries: []float64{250, 125, 62.5, 31.25, 15.625}, plateau: 1},
		{name: "a near miss is run once more and passes", epp: scripted{ceiling: 1500, script: map[float64][]Step{250: {stall}}},
			max: 1500, tries: []float64{250, 250, 500, 1000, 2000, 1500, 1750}, plateau: 1500},
		{name: "a near miss twice fails", epp: scripted{ceiling: 1500, script: map[float64][]Step{500: {stall, stall}}},
			max: 437.5, tries: []float64{250, 500, 500, 375, 437.5}, plateau: 437.5},
		{name: "far over the bound is not retried", epp: scripted{ceiling: 1500, script: map[float64][]Step{500: {{Served: 500, Arrivals: 100, Done: 100, P99: 20 * time.Millisecond}}}},
			max: 437.5, tries: []float64{250, 500, 375, 437.5}, plateau: 500},
		{name: "errors are not retried", epp: scripted{ceiling: 1500, script: map[float64][]Step{250: {{Served: 250, Arrivals: 100, Done: 99, Errors: 1, P99: time.Millisecond}}}},
			max: 218.75, tries: []float64{250, 125, 187.5, 218.75}, plateau: 250},
	} {
		t.Run(tc.name, func(t *testing.T) {
			epp := tc.epp
			max, plateau := search.Run(epp.step)
			assert.Equal(t, tc.max, max)
			assert.Equal(t, tc.tries, epp.tries)
			assert.Equal(t, tc.plateau, plateau)
		})
	}
}

// TestSearchCountsArrivals: at a low rate a Poisson schedule's count is
// off the nominal rate by several percent; what must be answered is what
// arrived, not rate × duration.
func TestSearchCountsArrivals(t *testing.T) {
	c := Search{P99: 5 * time.Millisecond, Retry: 4}
	assert.True(t, c.ok(Step{Rate: 12.5, Served: 11, Arrivals: 55, Done: 55, P99: 4 * time.Millisecond}),
		"all 55 arrivals answered at a nominal 12.5/s over 5 s")
	assert.False(t, c.ok(Step{Rate: 12.5, Served: 12, Arrivals: 70, Done: 60, P99: 4 * time.Millisecond}),
		"a seventh of the arrivals unanswered")
	assert.False(t, c.ok(Step{Rate: 100, Served: 100, Arrivals: 500, Done: 500, Dropped: 1, P99: time.Millisecond}))
	assert.False(t, c.ok(Step{Rate: 100, Served: 100, Arrivals: 500, Done: 500, P99: 6 * time.Millisecond}))
}
