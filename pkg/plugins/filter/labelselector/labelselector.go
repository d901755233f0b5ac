// Package labelselector provides llm-d's label-selector-filter: it keeps
// the endpoints whose labels match a Kubernetes label selector
// (matchLabels and matchExpressions, with the semantics and validation of
// metav1.LabelSelector). The selector is checked and compiled once, when the
// filter is built. The deprecated llm-d name by-label-selector is registered
// as an alias.
package labelselector

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

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

// Validate reports every invalid key, operator and value, each prefixed by
// its field path.
func (p *Params) Validate() error {
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(p.MatchLabels)) {
		path := fmt.Sprintf("matchLabels[%q]", k)
		if err := validateKey(k); err != nil {
			errs = append(errs, fmt.Errorf("%s: invalid label key: %w", path, err))
		}
		if err := validateValue(p.MatchLabels[k]); err != nil {
			errs = append(errs, fmt.Errorf("%s: invalid label value %q: %w", path, p.MatchLabels[k], err))
		}
	}
	for i, r := range p.MatchExpressions {
		path := fmt.Sprintf("matchExpressions[%d]", i)
		if r.Key == "" {
			errs = append(errs, fmt.Errorf("%s.key: required", path))
		} else if err := validateKey(r.Key); err != nil {
			errs = append(errs, fmt.Errorf("%s.key: invalid label key %q: %w", path, r.Key, err))
		}
		switch r.Operator {
		case In, NotIn:
			if len(r.Values) == 0 {
				errs = append(errs, fmt.Errorf("%s.values: must not be empty for operator %s", path, r.Operator))
			}
			for j, v := range r.Values {
				if err := validateValue(v); err != nil {
					errs = append(errs, fmt.Errorf("%s.values[%d]: invalid label value %q: %w", path, j, v, err))
				}
			}
		case Exists, DoesNotExist:
			if len(r.Values) != 0 {
				errs = append(errs, fmt.Errorf("%s.values: must be empty for operator %s", path, r.Operator))
			}
		case "":
			errs = append(errs, fmt.Errorf("%s.operator: required (one of In, NotIn, Exists, DoesNotExist)", path))
		default:
			errs = append(errs, fmt.Errorf("%s.operator: must be one of In, NotIn, Exists, DoesNotExist, got %q", path, r.Operator))
		}
	}
	return errors.Join(errs...)
}

// Label syntax, as Kubernetes validates it.
var (
	nameRE      = regexp.MustCompile(`^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`)
	subdomainRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

const (
	maxNameLen   = 63
	maxPrefixLen = 253
	nameRule     = "must consist of alphanumeric characters, '-', '_' or '.', and start and end with an alphanumeric character"
)

// validateKey checks a label key: a name of at most 63 characters,
// optionally preceded by a DNS subdomain prefix and a slash.
func validateKey(key string) error {
	name := key
	if prefix, rest, ok := strings.Cut(key, "/"); ok {
		name = rest
		switch {
		case prefix == "":
			return errors.New("the prefix before '/' must not be empty")
		case len(prefix) > maxPrefixLen:
			return fmt.Errorf("the prefix must be at most %d characters", maxPrefixLen)
		case !subdomainRE.MatchString(prefix):
			return errors.New("the prefix must be a DNS subdomain: lower-case alphanumeric characters, '-' or '.', starting and ending with an alphanumeric character")
		case strings.Contains(rest, "/"):
			return errors.New("must contain at most one '/'")
		}
	}
	switch {
	case name == "":
		return errors.New("the name must not be empty")
	case len(name) > maxNameLen:
		return fmt.Errorf("the name must be at most %d characters", maxNameLen)
	case !nameRE.MatchString(name):
		return errors.New("the name " + nameRule)
	}
	return nil
}

// validateValue checks a label value: empty, or a name of at most 63
// characters.
func validateValue(v string) error {
	switch {
	case v == "":
		return nil
	case len(v) > maxNameLen:
		return fmt.Errorf("must be at most %d characters", maxNameLen)
	case !nameRE.MatchString(v):
		return errors.New(nameRule)
	}
	return nil
}

// requirement is a compiled Requirement; matchLabels entries compile to In
// with one value.
type requirement struct {
	key    string
	op     Operator
	values []string            // sorted and deduplicated, for few values
	set    map[string]struct{} // for many values
}

// setMin is the number of values from which a map beats a scan.
const setMin = 9

func compile(key string, op Operator, values []string) requirement {
	r := requirement{key: key, op: op}
	values = slices.Compact(slices.Sorted(slices.Values(values)))
	if len(values) >= setMin {
		r.set = make(map[string]struct{}, len(values))
		for _, v := range values {
			r.set[v] = struct{}{}
		}
	} else {
		r.values = values
	}
	return r
}

func (r *requirement) has(v string) bool {
	if r.set != nil {
		_, ok := r.set[v]
		return ok
	}
	return slices.Contains(r.values, v)
}

func (r *requirement) matches(labels map[string]string) bool {
	v, ok := labels[r.key]
	switch r.op {
	case In:
		return ok && r.has(v)
	case NotIn:
		return !ok || !r.has(v)
	case Exists:
		return ok
	default: // DoesNotExist
		return !ok
	}
}

// Filter is a label-selector-filter instance. It is immutable and safe for
// concurrent use.
type Filter struct {
	typedName    scheduling.TypedName
	requirements []requirement
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
	f := &Filter{typedName: scheduling.TypedName{Type: typ, Name: name}}
	for _, k := range slices.Sorted(maps.Keys(p.MatchLabels)) {
		f.requirements = append(f.requirements, compile(k, In, []string{p.MatchLabels[k]}))
	}
	for _, r := range p.MatchExpressions {
		f.requirements = append(f.requirements, compile(r.Key, r.Operator, r.Values))
	}
	return f, nil
}

// TypedName implements scheduling.Plugin.
func (f *Filter) TypedName() scheduling.TypedName { return f.typedName }

// Matches reports whether labels satisfy the selector.
func (f *Filter) Matches(labels map[string]string) bool {
	for i := range f.requirements {
		if !f.requirements[i].matches(labels) {
			return false
		}
	}
	return true
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
