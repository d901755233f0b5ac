package datastore

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestC36_ProviderLimitsValidated: providerTpm and providerRpm are 1..MaxProviderLimit
// (0: not declared), with the field path in the error.
func TestC36_ProviderLimitsValidated(t *testing.T) {
	base := EndpointSpec{Name: "a", Address: "127.0.0.1", Port: 80}
	for _, tc := range []struct {
		name     string
		tpm, rpm int
		want     []string
	}{
		{name: "undeclared"},
		{name: "both", tpm: 1, rpm: MaxProviderLimit},
		{name: "negative tpm", tpm: -1, want: []string{"endpoints[0].providerTpm: must be 1..1000000000 tokens per minute"}},
		{name: "huge rpm", rpm: MaxProviderLimit + 1, want: []string{"endpoints[0].providerRpm: must be 1..1000000000 requests per minute"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := base
			s.ProviderTPM, s.ProviderRPM = tc.tpm, tc.rpm
			err := ValidateSpecs([]EndpointSpec{s})
			if len(tc.want) == 0 {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

// TestC36_ProviderLimitsPublished: a declared limit is published as its
// attribute, an undeclared one is absent.
func TestC36_ProviderLimitsPublished(t *testing.T) {
	s := New(Options{})
	require.NoError(t, s.Replace([]EndpointSpec{
		{Name: "priced", Address: "127.0.0.1", Port: 80, ProviderTPM: 40000, ProviderRPM: 60},
		{Name: "self", Address: "127.0.0.1", Port: 81},
	}))
	got := map[string][2]any{}
	for _, e := range s.Snapshot().All() {
		tpm, _ := ProviderTPMKey.Get(e)
		_, hasRPM := e.Attribute(ProviderRPMKey.Name())
		got[e.Name()] = [2]any{tpm, hasRPM}
	}
	assert.Equal(t, map[string][2]any{"priced": {40000, true}, "self": {0, false}}, got)
	assert.Equal(t, "switchyard.io/provider-tpm", ProviderTPMKey.Name())
	assert.Equal(t, "switchyard.io/provider-rpm", ProviderRPMKey.Name())
}
