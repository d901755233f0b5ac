// Package picktest holds the test cases every picker shares: the factory
// cases of the common maxNumOfEndpoints parameter. Imported by picker
// tests only.
package picktest

import (
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

// FactoryCases are the factory cases of a picker built on pick.Base: the
// default of one endpoint, a configured maximum, an invalid one, and the
// decoding errors every plugin rejects.
func FactoryCases() []schedulingtest.FactoryCase {
	return append([]schedulingtest.FactoryCase{
		{Name: "no parameters", Check: WantMax(1)},
		{Name: "maxNumOfEndpoints", Params: `{"maxNumOfEndpoints": 3}`, Check: WantMax(3)},
		{Name: "invalid", Params: `{"maxNumOfEndpoints": 0}`, WantErr: "maxNumOfEndpoints: must be >= 1, got 0"},
	}, schedulingtest.DecodeErrorCases()...)
}

// WantMax checks that the picker returns up to n endpoints.
func WantMax(n int) func(*testing.T, scheduling.Plugin) {
	return func(t *testing.T, p scheduling.Plugin) {
		t.Helper()
		m, ok := p.(interface{ MaxEndpoints() int })
		if !ok {
			t.Fatalf("%T has no MaxEndpoints; is it built on pick.Base?", p)
		}
		if got := m.MaxEndpoints(); got != n {
			t.Errorf("max = %d, want %d", got, n)
		}
	}
}
