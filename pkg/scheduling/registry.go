package scheduling

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/switchyard-ai/switchyard/pkg/internal/suggest"
)

// Stability says how settled a plugin's type, parameters and behaviour are.
type Stability string

const (
	// Alpha plugins may change or go away without notice.
	Alpha Stability = "alpha"
	// Beta plugins keep their parameters for at least two minor releases.
	Beta Stability = "beta"
	// Stable plugins do not change incompatibly.
	Stable Stability = "stable"
)

// Factory builds a plugin instance from its configured name and raw JSON
// parameters (nil when the configuration has none). Build factories with
// Typed.
type Factory func(name string, params json.RawMessage, h Handle) (Plugin, error)

// Registration describes one plugin type.
type Registration struct {
	// Type is the kebab-case type name used in configuration.
	Type string
	// Stability of the type.
	Stability Stability
	// Deprecated, when set, says what to use instead; the type still works.
	Deprecated string
	// Factory builds instances.
	Factory Factory
}

// Registry maps plugin types to their registrations. It is built once at
// start-up and read-only afterwards.
type Registry struct {
	regs map[string]Registration
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{regs: map[string]Registration{}} }

// Register adds a plugin type. A duplicate or malformed registration is an
// error.
func (r *Registry) Register(reg Registration) error {
	switch {
	case reg.Type == "":
		return fmt.Errorf("register plugin: empty type")
	case reg.Factory == nil:
		return fmt.Errorf("register plugin %q: nil factory", reg.Type)
	}
	if _, dup := r.regs[reg.Type]; dup {
		return fmt.Errorf("register plugin %q: type already registered", reg.Type)
	}
	r.regs[reg.Type] = reg
	return nil
}

// MustRegister is Register that panics on error, for static registration
// lists whose duplicates are programming errors caught by tests.
func (r *Registry) MustRegister(regs ...Registration) *Registry {
	for _, reg := range regs {
		if err := r.Register(reg); err != nil {
			panic(err)
		}
	}
	return r
}

// Lookup returns the registration of a type.
func (r *Registry) Lookup(pluginType string) (Registration, bool) {
	reg, ok := r.regs[pluginType]
	return reg, ok
}

// Types returns every registered type, sorted.
func (r *Registry) Types() []string {
	out := make([]string, 0, len(r.regs))
	for t := range r.regs {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// Suggest returns up to three registered types closest to an unknown one,
// closest first, for "did you mean" messages.
func (r *Registry) Suggest(unknown string) []string {
	return Closest(unknown, r.Types(), 3)
}

// Closest returns up to n candidates that are plausible misspellings of
// word (edit distance at most a third of its length, and at least 1,
// ignoring case), closest first.
func Closest(word string, candidates []string, n int) []string {
	type cand struct {
		s string
		d int
	}
	var cands []cand
	limit := max(1, len(word)/3)
	lw := strings.ToLower(word)
	for _, c := range candidates {
		if d := suggest.Distance(lw, strings.ToLower(c)); d <= limit {
			cands = append(cands, cand{c, d})
		}
	}
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].d < cands[j].d })
	out := make([]string, 0, n)
	for i := 0; i < len(cands) && i < n; i++ {
		out = append(out, cands[i].s)
	}
	return out
}
