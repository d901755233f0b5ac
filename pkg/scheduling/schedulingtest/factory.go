package schedulingtest

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// FactoryCase is one call of a Registration's Factory with raw JSON
// parameters, for RunFactoryCases.
type FactoryCase struct {
	// Name names the subtest.
	Name string
	// Params is the raw JSON given to the factory; "" passes nil, as when
	// the configuration has no parameters key.
	Params string
	// WantErr is a substring the factory's error must contain; "" (and no
	// WantErrs) means the factory must succeed.
	WantErr string
	// WantErrs are substrings the error must all contain, one per problem:
	// the error must report exactly len(WantErrs) problems
	// (scheduling.Errors), which checks that every problem is reported at
	// once.
	WantErrs []string
	// Check, if not nil, inspects the plugin a successful case built (e.g.
	// that a parameter took effect).
	Check func(t *testing.T, p scheduling.Plugin)
}

// FactoryName is the instance name RunFactoryCases gives the factory.
const FactoryName = "under-test"

// RunFactoryCases runs each case as a subtest: it calls reg.Factory with
// FactoryName, the case's parameters and a fresh NewHandle, and checks the
// error against WantErr. On success it checks the plugin is not nil and its
// TypedName is {reg.Type, FactoryName}, then calls Check.
func RunFactoryCases(t *testing.T, reg scheduling.Registration, cases []FactoryCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			var raw json.RawMessage
			if tc.Params != "" {
				raw = json.RawMessage(tc.Params)
			}
			p, err := reg.Factory(FactoryName, raw, NewHandle(t))
			if len(tc.WantErrs) > 0 {
				if err == nil {
					t.Fatalf("Factory(%s) succeeded, want errors %q", tc.Params, tc.WantErrs)
				}
				if got := len(scheduling.Errors(err)); got != len(tc.WantErrs) {
					t.Errorf("Factory(%s) reported %d problems (%v), want %d", tc.Params, got, err, len(tc.WantErrs))
				}
				for _, w := range tc.WantErrs {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("Factory(%s) error %q does not contain %q", tc.Params, err, w)
					}
				}
				return
			}
			if tc.WantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.WantErr) {
					t.Fatalf("Factory(%s) error = %v, want one containing %q", tc.Params, err, tc.WantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Factory(%s): unexpected error: %v", tc.Params, err)
			}
			if p == nil {
				t.Fatalf("Factory(%s) returned a nil plugin", tc.Params)
			}
			if got, want := p.TypedName(), (scheduling.TypedName{Type: reg.Type, Name: FactoryName}); got != want {
				t.Errorf("TypedName() = %v, want %v", got, want)
			}
			if tc.Check != nil {
				tc.Check(t, p)
			}
		})
	}
}

// DecodeErrorCases returns the cases every factory built with
// scheduling.Typed rejects, whatever its parameters: an unknown key, a
// value that is not an object, and trailing data.
func DecodeErrorCases() []FactoryCase {
	return []FactoryCase{
		{Name: "unknown key", Params: `{"x": 1}`, WantErr: `unknown field "x"`},
		{Name: "not an object", Params: `["x"]`, WantErr: "expected an object, got array"},
		{Name: "trailing data", Params: `{} {}`, WantErr: "after top-level value"},
	}
}

// NoParamsCases returns the standard cases for a plugin without parameters
// (scheduling.NoParams): no parameters, "{}" and "null" succeed, and the
// DecodeErrorCases fail.
func NoParamsCases() []FactoryCase {
	return append([]FactoryCase{
		{Name: "no parameters"},
		{Name: "empty object", Params: `{}`},
		{Name: "null", Params: `null`},
	}, DecodeErrorCases()...)
}
