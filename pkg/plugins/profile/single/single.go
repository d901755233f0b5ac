// Package single provides the single-profile-handler: it runs every
// scheduling profile once, expects there to be exactly one, and makes its
// result the primary one. The configuration loader adds it when the
// configuration names no profile handler and has one profile, as GIE does.
package single

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Type is the plugin type used in configuration.
const Type = "single-profile-handler"

// Params is empty: the single-profile-handler takes no parameters.
type Params = scheduling.NoParams

// DefaultParams returns the (empty) default parameters.
func DefaultParams() Params { return Params{} }

// Handler is a single-profile-handler instance. It is stateless and safe
// for concurrent use.
type Handler struct {
	typedName scheduling.TypedName
}

// New returns a single-profile-handler.
func New(name string, _ Params, _ scheduling.Handle) (*Handler, error) {
	if name == "" {
		name = Type
	}
	return &Handler{typedName: scheduling.TypedName{Type: Type, Name: name}}, nil
}

// TypedName implements scheduling.Plugin.
func (h *Handler) TypedName() scheduling.TypedName { return h.typedName }

// Pick implements scheduling.ProfileHandler. The first call (no results
// yet) returns every profile, sorted by name; later calls return none, so
// each profile runs exactly once.
func (h *Handler) Pick(_ context.Context, _ *scheduling.Request, profiles map[string]*scheduling.Profile, results map[string]*scheduling.ProfileResult) []*scheduling.Profile {
	if len(results) > 0 || len(profiles) == 0 {
		return nil
	}
	out := make([]*scheduling.Profile, 0, len(profiles))
	for _, p := range profiles {
		out = append(out, p)
	}
	if len(out) > 1 {
		slices.SortFunc(out, func(a, b *scheduling.Profile) int { return strings.Compare(a.Name(), b.Name()) })
	}
	return out
}

// ProcessResults implements scheduling.ProfileHandler. It expects exactly
// one result and makes it the primary one. A failed profile (nil result)
// gives an error wrapping scheduling.ErrNoEndpoints; more than one profile
// is a configuration error.
func (h *Handler) ProcessResults(_ context.Context, _ *scheduling.Request, results map[string]*scheduling.ProfileResult) (*scheduling.Result, error) {
	switch len(results) {
	case 0:
		return nil, fmt.Errorf("%s: no profile ran: %w", h.typedName, scheduling.ErrNoEndpoints)
	case 1:
	default:
		names := make([]string, 0, len(results))
		for name := range results {
			names = append(names, name)
		}
		slices.Sort(names)
		return nil, fmt.Errorf("%s: expects exactly one scheduling profile, got %d (%s); use a handler that chooses among profiles",
			h.typedName, len(results), strings.Join(names, ", "))
	}
	var name string
	var res *scheduling.ProfileResult
	for name, res = range results { // the only entry
	}
	if res == nil {
		return nil, fmt.Errorf("profile %q failed: %w", name, scheduling.ErrNoEndpoints)
	}
	return &scheduling.Result{ProfileResults: results, PrimaryProfile: name}, nil
}

// Registration registers the single-profile-handler.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Beta,
	Factory:   scheduling.Typed(DefaultParams, New),
}

var _ scheduling.ProfileHandler = (*Handler)(nil)
