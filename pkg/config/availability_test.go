package config_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/config"
	"github.com/switchyard-ai/switchyard/pkg/multisite/learner"
)

const availabilityBase = header + "plugins:\n- type: queue-scorer\n- type: max-score-picker\nschedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: queue-scorer\n  - pluginRef: max-score-picker\n"

func TestG80_AvailabilityNothingNeedsSetting(t *testing.T) {
	l, err := load(t, availabilityBase)
	require.NoError(t, err)
	assert.Nil(t, l.Config.Availability, "absent block: absent")
	assert.Equal(t, learner.DefaultSettings(), l.AvailabilitySettings())
	var nilLoaded *config.Loaded
	assert.Equal(t, learner.DefaultSettings(), nilLoaded.AvailabilitySettings())

	// A block naming some keys keeps the defaults of the others, and the
	// rendered configuration shows every value in effect.
	l, err = load(t, availabilityBase+"availability:\n  shedding: true\n  fullAfterMs: 3000\n")
	require.NoError(t, err)
	want := learner.DefaultSettings()
	want.Shedding, want.FullAfterMs = true, 3000
	assert.Equal(t, want, l.AvailabilitySettings())
	out, err := config.MarshalYAML(l.Config)
	require.NoError(t, err)
	assert.Contains(t, string(out), "availability:\n  shedding: true\n  smoothing: 0.3\n  ceilingHalfLifeMs: 600000\n  ceilingFloor: 8\n  exploreFloor: 0.25\n  fullAfterMs: 3000\n  roomAfterMs: 2000\n  queueFull: 1\n  freshnessWindowMs: 6000\n")
	// What is rendered loads back to the same settings.
	l2, err := load(t, string(out))
	require.NoError(t, err)
	assert.Equal(t, want, l2.AvailabilitySettings())

	// An empty block is the defaults too.
	l, err = load(t, availabilityBase+"availability: {}\n")
	require.NoError(t, err)
	assert.Equal(t, learner.DefaultSettings(), l.AvailabilitySettings())
}

func TestG80_AvailabilityEveryFieldValidatedWithItsPath(t *testing.T) {
	for i, tc := range []struct {
		block string
		want  []string
	}{
		{"availability: 3\n", []string{"availability: expected an object, got a number"}},
		{"availability:\n  sheding: true\n", []string{`availability: unknown field "sheding" (did you mean "shedding"?)`}},
		{"availability:\n  ceiling_half_life_ms: 1000\n", []string{`availability: unknown field "ceiling_half_life_ms" (keys are camelCase here: "ceilingHalfLifeMs")`}},
		{"availability:\n  shedding: yes please\n", []string{"availability.shedding: expected a boolean, got a string"}},
		{"availability:\n  smoothing: 0\n", []string{"availability.smoothing: must be in (0, 1] (1: no smoothing), got 0"}},
		{"availability:\n  ceilingHalfLifeMs: 1.5\n", []string{"availability.ceilingHalfLifeMs: expected an integer, got 1.5"}},
		{"availability:\n  ceilingHalfLifeMs: 0\n", []string{"availability.ceilingHalfLifeMs: must be in 1 … 86400000, got 0"}},
		{"availability:\n  ceilingFloor: 0\n", []string{"availability.ceilingFloor: must be in 1 … 1000000, got 0"}},
		{"availability:\n  exploreFloor: 2\n", []string{"availability.exploreFloor: must be in [0, 1], got 2"}},
		{"availability:\n  fullAfterMs: -5\n", []string{"availability.fullAfterMs: must be in 0 … 86400000, got -5"}},
		{"availability:\n  roomAfterMs: \"2s\"\n", []string{"availability.roomAfterMs: expected an integer, got a string"}},
		{"availability:\n  queueFull: 0\n", []string{"availability.queueFull: must be in (0, 1000000], got 0"}},
		{"availability:\n  freshnessWindowMs: 0\n  smoothing: 2\n", []string{
			"availability.smoothing: must be in (0, 1] (1: no smoothing), got 2",
			"availability.freshnessWindowMs: must be in 1 … 86400000, got 0",
		}},
	} {
		_, err := load(t, availabilityBase+tc.block)
		require.Error(t, err, "case %d", i)
		got := errorStrings(t, err)
		require.Len(t, got, len(tc.want), "case %d: %v", i, got)
		for j, w := range tc.want {
			assert.True(t, strings.Contains(got[j], w), "case %d: %q does not contain %q", i, got[j], w)
		}
	}
}

// TestG81_SeedSnakeCaseNamesMapToCamelCaseKeys: the seed's chart renders
// the availability block in snake_case; this configuration's block is the
// top-level `availability` of the EndpointPickerConfig with the same names
// spelled camelCase. Every seed name is refused with the spelling to use,
// and that spelling loads.
func TestG81_SeedSnakeCaseNamesMapToCamelCaseKeys(t *testing.T) {
	for _, tc := range []struct{ seed, key, value string }{
		{"shedding", "shedding", "true"},
		{"smoothing", "smoothing", "0.5"},
		{"ceiling_half_life_ms", "ceilingHalfLifeMs", "1000"},
		{"ceiling_floor", "ceilingFloor", "4"},
		{"explore_floor", "exploreFloor", "0.1"},
		{"full_after_ms", "fullAfterMs", "3000"},
		{"room_after_ms", "roomAfterMs", "1500"},
		{"queue_full", "queueFull", "2"},
		{"freshness_window_ms", "freshnessWindowMs", "4000"},
	} {
		if tc.seed != tc.key {
			_, err := load(t, availabilityBase+"availability:\n  "+tc.seed+": "+tc.value+"\n")
			require.Error(t, err, tc.seed)
			assert.Equal(t, []string{`availability: unknown field "` + tc.seed + `" (keys are camelCase here: "` + tc.key + `")`}, errorStrings(t, err), tc.seed)
		}
		l, err := load(t, availabilityBase+"availability:\n  "+tc.key+": "+tc.value+"\n")
		require.NoError(t, err, tc.key)
		assert.NotEqual(t, learner.DefaultSettings(), l.AvailabilitySettings(), "%s: %s is not its default, so it must show", tc.key, tc.value)
	}
}
