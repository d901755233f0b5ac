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
				{P50: 2 * ms, P99: 9 * ms, Served: 290, Answered: 2900, Failed: 1, CPU: 3 * time.Second},
				{P50: ms, P99: 2 * ms, Served: 300, Answered: 3000, CPU: 3 * time.Second},
				{P50: 3 * ms / 2, P99: 3 * ms, Served: 310, Answered: 3100, Failed: 2, CPU: 3 * time.Second},
			},
			want: Fixed{P50: 3 * ms / 2, P99: 3 * ms, Served: 300, Failed: 3, CPUms: 1000 * 9.0 / 9000},
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
