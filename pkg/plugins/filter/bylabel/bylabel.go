// Package bylabel provides llm-d's by-label filter: it keeps the endpoints
// whose value for one label is in a list, and optionally those without the
// label. It is deprecated, as in llm-d: use label-selector-filter with an
// In (and, for allowsNoLabel, a DoesNotExist) expression instead.
package bylabel

import (
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Type is the plugin type used in configuration.
const Type = "by-label"

// Params configures a by-label filter.
type Params struct {
	// Label is the key of the endpoint label to check, e.g.
	// "llm-d.ai/role". Required.
	Label string `json:"label"`
	// ValidValues are the label values that keep an endpoint. As in llm-d,
	// an empty string in the list also keeps endpoints without the label.
	// Must not be empty unless allowsNoLabel is true.
	ValidValues []string `json:"validValues,omitempty"`
	// AllowsNoLabel keeps endpoints that do not have the label at all.
	// Default false.
	AllowsNoLabel bool `json:"allowsNoLabel"`
}

// DefaultParams returns the default parameters.
func DefaultParams() Params { return Params{} }

// Validate reports every invalid parameter.
func (p *Params) Validate() error {
	var errs []error
	if strings.TrimSpace(p.Label) == "" {
		errs = append(errs, errors.New("label: required"))
	}
	if len(p.ValidValues) == 0 && !p.AllowsNoLabel {
		errs = append(errs, errors.New("validValues: must not be empty unless allowsNoLabel is true (the filter would remove every endpoint)"))
	}
	return errors.Join(errs...)
}

// Filter is a by-label filter instance. It is immutable and safe for
// concurrent use.
type Filter struct {
	typedName     scheduling.TypedName
	label         string
	values        []string // sorted and deduplicated, for few values
	valueSet      map[string]struct{}
	allowsNoLabel bool
}

// setMin is the number of valid values from which a map beats a scan.
const setMin = 9

// New returns a by-label filter.
func New(name string, p Params, _ scheduling.Handle) (*Filter, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if name == "" {
		name = Type
	}
	f := &Filter{
		typedName:     scheduling.TypedName{Type: Type, Name: name},
		label:         p.Label,
		allowsNoLabel: p.AllowsNoLabel,
	}
	values := slices.Compact(slices.Sorted(slices.Values(p.ValidValues)))
	if len(values) >= setMin {
		f.valueSet = make(map[string]struct{}, len(values))
		for _, v := range values {
			f.valueSet[v] = struct{}{}
		}
	} else {
		f.values = values
	}
	return f, nil
}

// TypedName implements scheduling.Plugin.
func (f *Filter) TypedName() scheduling.TypedName { return f.typedName }

// keep reports whether an endpoint with these labels passes.
func (f *Filter) keep(labels map[string]string) bool {
	v, ok := labels[f.label]
	if !ok && f.allowsNoLabel {
		return true
	}
	// A missing label reads as "", as in llm-d.
	if f.valueSet != nil {
		_, in := f.valueSet[v]
		return in
	}
	return slices.Contains(f.values, v)
}

// Filter implements scheduling.Filter. It keeps, in order, the endpoints
// whose label value is valid, and those without the label when
// allowsNoLabel is set. When every endpoint passes it returns endpoints
// itself.
func (f *Filter) Filter(_ context.Context, _ *scheduling.Request, endpoints []*scheduling.Endpoint) []*scheduling.Endpoint {
	for i, e := range endpoints {
		if f.keep(e.Metadata().Labels) {
			continue
		}
		// First endpoint dropped: copy the ones kept so far and go on.
		kept := make([]*scheduling.Endpoint, i, len(endpoints)-1)
		copy(kept, endpoints[:i])
		for _, e := range endpoints[i+1:] {
			if f.keep(e.Metadata().Labels) {
				kept = append(kept, e)
			}
		}
		return kept
	}
	return endpoints
}

// Registration registers the by-label filter.
var Registration = scheduling.Registration{
	Type:       Type,
	Stability:  scheduling.Beta,
	Deprecated: "use label-selector-filter with matchExpressions [{key: <label>, operator: In, values: <validValues>}]",
	Factory:    scheduling.Typed(DefaultParams, New),
}

var _ scheduling.Filter = (*Filter)(nil)
