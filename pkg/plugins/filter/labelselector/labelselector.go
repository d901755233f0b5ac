// Package labelselector provides llm-d's label-selector-filter: it keeps
// the endpoints whose labels match a Kubernetes label selector
// (matchLabels and matchExpressions). Validation, compilation and matching
// are apimachinery's (metav1validation, metav1.LabelSelectorAsSelector,
// labels.Selector), so the semantics are exactly metav1.LabelSelector's.
// The selector is checked and compiled once, when the filter is built. The
// deprecated llm-d name by-label-selector is registered as an alias.
package labelselector

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Type is the plugin type used in configuration.
const Type = "label-selector-filter"

// AliasType is llm-d's deprecated name for the same filter.
const AliasType = "by-label-selector"

// Operator is a label selector operator.
type Operator string

// The operators of a Kubernetes label selector requirement.
const (
	// In requires the label to be present with one of the values.
	In Operator = "In"
	// NotIn requires the label to be absent or to have none of the values.
	NotIn Operator = "NotIn"
	// Exists requires the label to be present, with any value.
	Exists Operator = "Exists"
	// DoesNotExist requires the label to be absent.
	DoesNotExist Operator = "DoesNotExist"
)

// Requirement is one entry of matchExpressions.
type Requirement struct {
	// Key is the label key the requirement applies to. Required.
	Key string `json:"key"`
	// Operator is In, NotIn, Exists or DoesNotExist (case-sensitive).
	Operator Operator `json:"operator"`
	// Values are the label values for In and NotIn, which need at least
	// one; Exists and DoesNotExist take none.
	Values []string `json:"values,omitempty"`
}

// Params configures a label-selector-filter. Every condition must hold for
// an endpoint to be kept; with no condition at all every endpoint is kept,
// as with an empty Kubernetes selector.
type Params struct {
	// MatchLabels keeps endpoints that have each of these labels with
	// exactly the given value.
	MatchLabels map[string]string `json:"matchLabels,omitempty"`
	// MatchExpressions are further requirements on the labels.
	MatchExpressions []Requirement `json:"matchExpressions,omitempty"`
}

// DefaultParams returns the default parameters: an empty selector.
func DefaultParams() Params { return Params{} }

// Validate reports every invalid key, operator and value as Kubernetes
// validates a metav1.LabelSelector, each error prefixed by its field path
// (matchLabels["key"], matchExpressions[1].values, …).
func (p *Params) Validate() error {
	var errs field.ErrorList
	// metav1validation.ValidateLabelSelector would report every matchLabels
	// problem under the bare path "matchLabels", in map order; validating
	// one entry at a time names the key, in a stable order.
	for _, k := range slices.Sorted(maps.Keys(p.MatchLabels)) {
		path := field.NewPath(fmt.Sprintf("matchLabels[%q]", k))
		errs = append(errs, metav1validation.ValidateLabels(map[string]string{k: p.MatchLabels[k]}, path)...)
	}
	exprs := field.NewPath("matchExpressions")
	for i, r := range p.MatchExpressions {
		errs = append(errs, metav1validation.ValidateLabelSelectorRequirement(r.labelSelectorRequirement(),
			metav1validation.LabelSelectorValidationOptions{}, exprs.Index(i))...)
	}
	joined := make([]error, len(errs))
	for i, e := range errs {
		joined[i] = e
		// Kubernetes says an operator is not valid without saying which are;
		// tell the user what to write instead.
		if e.Type == field.ErrorTypeInvalid && strings.HasSuffix(e.Field, ".operator") {
			joined[i] = fmt.Errorf("%w (use one of In, NotIn, Exists, DoesNotExist)", e)
		}
	}
	return errors.Join(joined...)
}

// labelSelector returns p as a metav1.LabelSelector.
func (p *Params) labelSelector() *metav1.LabelSelector {
	sel := &metav1.LabelSelector{MatchLabels: p.MatchLabels}
	for _, r := range p.MatchExpressions {
		sel.MatchExpressions = append(sel.MatchExpressions, r.labelSelectorRequirement())
	}
	return sel
}

func (r Requirement) labelSelectorRequirement() metav1.LabelSelectorRequirement {
	return metav1.LabelSelectorRequirement{Key: r.Key, Operator: metav1.LabelSelectorOperator(r.Operator), Values: r.Values}
}

// Filter is a label-selector-filter instance. It is immutable and safe for
// concurrent use.
type Filter struct {
	typedName scheduling.TypedName
	selector  labels.Selector
}

// New returns a label-selector-filter.
func New(name string, p Params, _ scheduling.Handle) (*Filter, error) {
	return newFilter(Type, name, p)
}

// newAlias returns a filter built under the deprecated type name, which it
// keeps reporting (as llm-d does).
func newAlias(name string, p Params, _ scheduling.Handle) (*Filter, error) {
	return newFilter(AliasType, name, p)
}

func newFilter(typ, name string, p Params) (*Filter, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if name == "" {
		name = typ
	}
	sel, err := metav1.LabelSelectorAsSelector(p.labelSelector())
	if err != nil { // not expected: Validate checks what the conversion checks, and more
		return nil, err
	}
	return &Filter{typedName: scheduling.TypedName{Type: typ, Name: name}, selector: sel}, nil
}

// TypedName implements scheduling.Plugin.
func (f *Filter) TypedName() scheduling.TypedName { return f.typedName }

// Matches reports whether the labels l satisfy the selector. It allocates
// nothing.
func (f *Filter) Matches(l map[string]string) bool {
	return f.selector.Matches(labels.Set(l))
}

// Filter implements scheduling.Filter. It keeps, in order, the endpoints
// whose labels match. When every endpoint matches it returns endpoints
// itself.
func (f *Filter) Filter(_ context.Context, _ *scheduling.Request, endpoints []*scheduling.Endpoint) []*scheduling.Endpoint {
	for i, e := range endpoints {
		if f.Matches(e.Metadata().Labels) {
			continue
		}
		// First endpoint dropped: copy the ones kept so far and go on.
		kept := make([]*scheduling.Endpoint, i, len(endpoints)-1)
		copy(kept, endpoints[:i])
		for _, e := range endpoints[i+1:] {
			if f.Matches(e.Metadata().Labels) {
				kept = append(kept, e)
			}
		}
		return kept
	}
	return endpoints
}

// Registration registers the label-selector-filter.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Beta,
	Factory:   scheduling.Typed(DefaultParams, New),
}

// AliasRegistration registers the deprecated by-label-selector name.
var AliasRegistration = scheduling.Registration{
	Type:       AliasType,
	Stability:  scheduling.Beta,
	Deprecated: "use label-selector-filter (same parameters)",
	Factory:    scheduling.Typed(DefaultParams, newAlias),
}

var _ scheduling.Filter = (*Filter)(nil)
