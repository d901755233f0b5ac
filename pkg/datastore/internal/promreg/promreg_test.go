package promreg

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRegister(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := prometheus.CounterOpts{Name: "x_total", Help: "x"}
	a, err := Register(reg, prometheus.NewCounter(opts))
	require.NoError(t, err)
	b, err := Register(reg, prometheus.NewCounter(opts))
	require.NoError(t, err)
	assert.Same(t, a, b, "the registered collector is reused")

	// Same name, different type: the registry's error is returned.
	_, err = Register(reg, prometheus.NewGauge(prometheus.GaugeOpts{Name: "x_total", Help: "x"}))
	require.Error(t, err)

	c := prometheus.NewCounter(opts)
	got, err := Register(nil, c)
	require.NoError(t, err)
	assert.Same(t, c, got)
}
