package endpointsfile

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestC36_ProviderLimitsParsed: providerTpm and providerRpm are read from
// the file; 0 and wrong types are errors with their path.
func TestC36_ProviderLimitsParsed(t *testing.T) {
	specs, err := Parse([]byte("endpoints:\n- {name: a, address: 127.0.0.1, port: 80, providerTpm: 200000, providerRpm: 500}\n- {name: b, address: 127.0.0.1, port: 81}\n"))
	require.NoError(t, err)
	assert.Equal(t, 200000, specs[0].ProviderTPM)
	assert.Equal(t, 500, specs[0].ProviderRPM)
	assert.Zero(t, specs[1].ProviderTPM)

	for data, want := range map[string]string{
		"endpoints:\n- {name: a, address: 127.0.0.1, port: 80, providerTpm: 0}\n":          "endpoints[0].providerTpm: must be 1..1000000000 tokens per minute, got 0",
		"endpoints:\n- {name: a, address: 127.0.0.1, port: 80, providerRpm: -3}\n":         "endpoints[0].providerRpm: must be 1..1000000000 requests per minute",
		"endpoints:\n- {name: a, address: 127.0.0.1, port: 80, providerRpm: \"x\"}\n":      "endpoints[0].providerRpm: expected an integer",
		"endpoints:\n- {name: a, address: 127.0.0.1, port: 80, providerTpm: 2000000000}\n": "endpoints[0].providerTpm: must be 1..1000000000",
	} {
		_, err := Parse([]byte(data))
		require.Error(t, err, data)
		assert.Contains(t, err.Error(), want)
	}
}
