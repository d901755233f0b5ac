package matrix

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestCombine(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name   string
		rounds []Round
		want   Fixed
	}{
		{name: "none", want: Fixed{}},
		{
			name:   "one round is itself",
			rounds: []Round{{P50: ms, P99: 3 * ms, Served: 300, Answered: 3000, CPU: 3 * time.Second}},
			want:   Fixed{P50: ms, P99: 3 * ms, Served: 300, CPUms: 1},
		},
		{
			name: "a stalled window does not set the p99; p50 comes from the median window",
			rounds: []Round{
				{P50: 2 * ms, P99: 9 * ms, Served: 270, Answered: 2700, Failed: 1, CPU: 3 * time.Second},
				{P50: ms, P99: 2 * ms, Served: 300, Answered: 3000, CPU: 3 * time.Second},
				{P50: 3 * ms / 2, P99: 3 * ms, Served: 306, Answered: 3060, Failed: 2, CPU: 3 * time.Second},
			},
			want: Fixed{P50: 3 * ms / 2, P99: 3 * ms, Served: 292, Failed: 3, CPUms: 1000 * 9.0 / 8760},
		},
		{
			name: "an even count takes the lower middle",
			rounds: []Round{
				{P50: ms, P99: 4 * ms, Answered: 1, CPU: ms},
				{P50: 2 * ms, P99: 2 * ms, Answered: 1, CPU: ms},
			},
			want: Fixed{P50: 2 * ms, P99: 2 * ms, CPUms: 1},
		},
		{
			name: "a round that answered nothing is the worst, not the best",
			rounds: []Round{
				{Failed: 3000, CPU: time.Second},
				{P50: ms, P99: 2 * ms, Served: 300, Answered: 3000, CPU: 3 * time.Second},
				{P50: 2 * ms, P99: 4 * ms, Served: 300, Answered: 3000, CPU: 3 * time.Second},
			},
			want: Fixed{P50: 2 * ms, P99: 4 * ms, Served: 200, Failed: 3000, CPUms: 7000.0 / 6000},
		},
		{
			name: "most rounds answered nothing: none answered at the median",
			rounds: []Round{
				{Failed: 3000},
				{P50: ms, P99: 2 * ms, Served: 90, Answered: 900, Failed: 2100, CPU: time.Second},
				{Failed: 3000},
			},
			want: Fixed{Served: 30, Failed: 8100, CPUms: 1000.0 / 900},
		},
		{
			name: "p99s seconds apart order as durations",
			rounds: []Round{
				{P50: time.Second, P99: 5 * time.Second, Answered: 1},
				{P50: ms, P99: ms, Answered: 1},
				{P50: 2 * ms, P99: 3 * time.Second, Answered: 1},
			},
			want: Fixed{P50: 2 * ms, P99: 3 * time.Second},
		},
		{
			name:   "nothing answered: no CPU per request",
			rounds: []Round{{Failed: 5, CPU: time.Second}},
			want:   Fixed{Failed: 5},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Combine(tc.rounds)
			assert.Equal(t, tc.want.P50, got.P50)
			assert.Equal(t, tc.want.P99, got.P99)
			assert.InDelta(t, tc.want.Served, got.Served, 1e-9)
			assert.Equal(t, tc.want.Failed, got.Failed)
			assert.InDelta(t, tc.want.CPUms, got.CPUms, 1e-9)
		})
	}
}

func TestCombineKeepsItsInput(t *testing.T) {
	rounds := []Round{{P99: 3}, {P99: 1}, {P99: 2}}
	Combine(rounds)
	assert.Equal(t, []Round{{P99: 3}, {P99: 1}, {P99: 2}}, rounds)
}
