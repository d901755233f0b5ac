package modelsim

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMetricsLint runs promlint over every metric. The only complaint
// allowed is the colon in vLLM's names, which are a wire contract.
func TestMetricsLint(t *testing.T) {
	s, err := New(DefaultConfig())
	require.NoError(t, err)
	defer s.Close()
	mfs, err := s.regs.all.Gather()
	require.NoError(t, err)
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	require.NoError(t, err)
	for _, p := range problems {
		assert.Equal(t, "metric names should not contain ':'", p.Text, p.Metric)
	}
}
