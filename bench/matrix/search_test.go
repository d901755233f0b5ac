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
	st := Step{Rate: rate, Served: rate, Duration: time.Second, Arrivals: int64(rate), P99: time.Millisecond}
	if rate > s.ceiling {
		st.P99, st.Served = time.Second, s.ceiling
	}
	if answers := s.script[rate]; n < len(answers) {
		a := answers[n] // its zero fields are the default's
		if a.Served != 0 {
			st.Served = a.Served
		}
		st.Errors, st.Dropped, st.P99 = a.Errors, a.Dropped, a.P99
	}
	return st
}

func TestSearch(t *testing.T) {
	search := Search{First: 250, Max: 128000, P99: 5 * time.Millisecond, Retry: 4}
	stall := Step{P99: 9 * time.Millisecond} // one stall: p99 just over
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
			max: 437.5, tries: []float64{250, 500, 500, 375, 437.5}, plateau: 500},
		{name: "far over the bound is not retried", epp: scripted{ceiling: 1500, script: map[float64][]Step{500: {{P99: 20 * time.Millisecond}}}},
			max: 437.5, tries: []float64{250, 500, 375, 437.5}, plateau: 500},
		{name: "a step that fell behind its schedule is not retried", epp: scripted{ceiling: 1500, script: map[float64][]Step{1000: {{Served: 800, P99: 6 * time.Millisecond}}}},
			max: 875, tries: []float64{250, 500, 1000, 750, 875}, plateau: 875},
		{name: "errors are not retried", epp: scripted{ceiling: 1500, script: map[float64][]Step{250: {{Errors: 1, P99: time.Millisecond}}}},
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

// TestSearchKeepsPace: what must be kept is the pace of the arrivals the
// Poisson schedule produced, which at a low rate is off the nominal rate
// by several percent; a step that answers everything but stretches past
// its duration (the load generator or the EPP fell behind) fails.
func TestSearchKeepsPace(t *testing.T) {
	c := Search{P99: 5 * time.Millisecond, Retry: 4}
	five := 5 * time.Second
	assert.True(t, c.ok(Step{Rate: 12.5, Served: 11, Duration: five, Arrivals: 55, P99: 4 * time.Millisecond}),
		"55 arrivals in 5 s at a nominal 12.5/s, all answered in time")
	assert.False(t, c.ok(Step{Rate: 1000, Served: 900, Duration: five, Arrivals: 5000, P99: time.Millisecond}),
		"5000 arrivals answered over 5.6 s: behind the schedule")
	assert.False(t, c.ok(Step{Rate: 100, Served: 100, Duration: five, Arrivals: 500, Dropped: 1, P99: time.Millisecond}))
	assert.False(t, c.ok(Step{Rate: 100, Served: 100, Duration: five, Arrivals: 500, Errors: 1, P99: time.Millisecond}))
	assert.False(t, c.ok(Step{Rate: 100, Served: 100, Duration: five, Arrivals: 500, P99: 6 * time.Millisecond}))
	assert.False(t, c.ok(Step{Rate: 100, Served: 100, Arrivals: 500, P99: time.Millisecond}), "no duration: nothing to judge")
	max, plateau := Search{First: 0, Max: 100, P99: time.Millisecond, Retry: 4}.Run(func(float64) Step { panic("no step without a first rate") })
	assert.Zero(t, max+plateau)
}
