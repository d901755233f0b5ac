package datastore

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestStatsConcurrentStartFinish(t *testing.T) {
	var st EndpointStats
	var wg sync.WaitGroup
	const workers, each = 16, 1000
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				tokens := int64(w*10 + i%7)
				st.Start(tokens)
				st.FirstToken(time.Duration(1+i%5) * time.Millisecond)
				st.Finish(tokens, time.Duration(10+i%3)*time.Millisecond, i%10 != 0)
			}
		})
	}
	wg.Wait()
	assert.Zero(t, st.InFlight())
	assert.Zero(t, st.InFlightTokens())
	assert.Equal(t, uint64(workers*each*9/10), st.Served())
	assert.Equal(t, uint64(workers*each/10), st.Errors())
	assert.GreaterOrEqual(t, st.TTFT(), time.Millisecond)
	assert.LessOrEqual(t, st.TTFT(), 5*time.Millisecond)
	assert.GreaterOrEqual(t, st.E2E(), 10*time.Millisecond)
	assert.LessOrEqual(t, st.E2E(), 12*time.Millisecond)
}

func TestStatsEWMA(t *testing.T) {
	tests := []struct {
		name    string
		samples []time.Duration
		want    time.Duration
	}{
		{"none", nil, 0},
		{"first sets", []time.Duration{100 * time.Millisecond}, 100 * time.Millisecond},
		{"second moves by alpha", []time.Duration{100 * time.Millisecond, 200 * time.Millisecond}, 120 * time.Millisecond},
		// 100 → 120 → 120 + 0.2×(0 − 120)... zero samples are ignored.
		{"ignores non-positive", []time.Duration{100 * time.Millisecond, 0, -time.Second}, 100 * time.Millisecond},
		{"three", []time.Duration{time.Second, 0, 2 * time.Second, 2 * time.Second}, 1360 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var st EndpointStats
			for _, s := range tt.samples {
				st.FirstToken(s)
				st.Start(0)
				st.Finish(0, s, true)
			}
			assert.InDelta(t, float64(tt.want), float64(st.TTFT()), 1)
			assert.InDelta(t, float64(tt.want), float64(st.E2E()), 1)
		})
	}
}

func TestStatsFailedRequestsDoNotMoveE2E(t *testing.T) {
	var st EndpointStats
	st.Start(5)
	st.Finish(5, time.Second, true)
	st.Start(5)
	assert.Equal(t, int64(1), st.InFlight())
	assert.Equal(t, int64(5), st.InFlightTokens())
	st.Finish(5, time.Hour, false)
	assert.Equal(t, time.Second, st.E2E())
	assert.Equal(t, uint64(1), st.Served())
	assert.Equal(t, uint64(1), st.Errors())
}
