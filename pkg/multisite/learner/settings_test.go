package learner

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestG80_NothingNeedsSetting(t *testing.T) {
	d := DefaultSettings()
	require.NoError(t, d.Validate())
	assert.Equal(t, Settings{
		Shedding: false, Smoothing: 0.3, CeilingHalfLifeMs: 600000, CeilingFloor: 8, ExploreFloor: 0.25,
		FullAfterMs: 5000, RoomAfterMs: 2000, QueueFull: 1.0, FreshnessWindowMs: 6000,
	}, d)
	assert.Equal(t, "6s", d.FreshnessWindow().String())
}

func TestG80_EveryFieldValidatedWithItsKey(t *testing.T) {
	for i, tc := range []struct {
		mut  func(*Settings)
		want string
	}{
		{func(s *Settings) { s.Smoothing = 0 }, "smoothing: must be in (0, 1]"},
		{func(s *Settings) { s.Smoothing = 1.5 }, "smoothing:"},
		{func(s *Settings) { s.CeilingHalfLifeMs = 0 }, "ceilingHalfLifeMs: must be in 1 … 86400000, got 0"},
		{func(s *Settings) { s.CeilingHalfLifeMs = 86400001 }, "ceilingHalfLifeMs:"},
		{func(s *Settings) { s.CeilingFloor = 0.5 }, "ceilingFloor: must be in 1 … 1000000, got 0.5"},
		{func(s *Settings) { s.ExploreFloor = -0.1 }, "exploreFloor: must be in [0, 1]"},
		{func(s *Settings) { s.ExploreFloor = 1.1 }, "exploreFloor:"},
		{func(s *Settings) { s.FullAfterMs = -1 }, "fullAfterMs: must be in 0 … 86400000, got -1"},
		{func(s *Settings) { s.RoomAfterMs = -1 }, "roomAfterMs:"},
		{func(s *Settings) { s.QueueFull = 0 }, "queueFull: must be in (0, 1000000], got 0"},
		{func(s *Settings) { s.FreshnessWindowMs = 0 }, "freshnessWindowMs: must be in 1 … 86400000, got 0"},
	} {
		s := DefaultSettings()
		tc.mut(&s)
		err := s.Validate()
		require.Error(t, err, "case %d", i)
		assert.Contains(t, err.Error(), tc.want, "case %d", i)
	}
	// Every problem at once.
	s := Settings{}
	err := s.Validate()
	require.Error(t, err)
	assert.Equal(t, 5, strings.Count(err.Error(), "\n")+1, err.Error())
	// Zero durations that mean "at once" are valid.
	s = DefaultSettings()
	s.FullAfterMs, s.RoomAfterMs, s.ExploreFloor = 0, 0, 0
	assert.NoError(t, s.Validate())
}
