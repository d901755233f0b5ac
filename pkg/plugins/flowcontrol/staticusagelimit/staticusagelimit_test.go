package staticusagelimit_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/plugins/flowcontrol/staticusagelimit"
)

func TestParams(t *testing.T) {
	tests := []struct {
		raw  string
		want float64
		err  string
	}{
		{raw: ``, want: 1},
		{raw: `{"threshold": 0.8}`, want: 0.8},
		{raw: `{"threshold": 2}`, want: 2},
		{raw: `{"threshold": 0}`, err: "threshold: must be in (0, 100], got 0"},
		{raw: `{"threshold": -1}`, err: "threshold: must be in (0, 100], got -1"},
		{raw: `{"threshold": 101}`, err: "threshold: must be in (0, 100], got 101"},
		{raw: `{"limit": 1}`, err: `unknown field "limit"`},
	}
	for _, tt := range tests {
		t.Run(tt.raw, func(t *testing.T) {
			p, err := staticusagelimit.Registration.Factory("u", []byte(tt.raw), nil)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			pol := p.(*staticusagelimit.Policy)
			for _, prio := range []int{-5, 0, 100} {
				require.Equal(t, tt.want, pol.Ceiling(0.5, prio), "same ceiling for every band")
			}
		})
	}
}
