package config

import (
	"sort"
	"strconv"
	"strings"

	"github.com/switchyard-ai/switchyard/pkg/internal/yamldoc"
)

// MaxFallbackChainLength bounds the models of one fallback chain, and so
// the scheduling attempts of one request (the model itself plus at most
// this many fallbacks).
const MaxFallbackChainLength = 8

// MaxFallbackChains bounds the number of chains.
const MaxFallbackChains = 1024

// PrefixRoutingConfig is the top-level prefixRouting section: settings of
// prefix routing that concern the request itself rather than one plugin.
type PrefixRoutingConfig struct {
	// AnthropicCacheControlInjection (default false) is the fleet-wide
	// switch of C-18: native Anthropic /v1/messages requests get
	// cache_control {"type": "ephemeral"} breakpoints on the last tools
	// entry and the last system block, so that the provider caches the
	// shared prefix; breakpoints the client wrote are kept, and nothing is
	// added beyond the provider's four.
	AnthropicCacheControlInjection bool `json:"anthropicCacheControlInjection"`
}

// fallbackPath is the field path of a chain, or of its i-th model when
// i >= 0: fallbackChains["model"][i]. Model names hold dots, so the key
// is always quoted.
func fallbackPath(model string, i int) string {
	p := "fallbackChains[" + strconv.Quote(model) + "]"
	if i >= 0 {
		p = index(p, i)
	}
	return p
}

// fallbackChains decodes and validates the top-level fallbackChains: an
// object from a model name to the ordered list of the models a request
// for it falls back to. Every name is a non-empty string without
// surrounding spaces; a chain is not empty, at most
// MaxFallbackChainLength long, names no model twice and not its own
// model; and following chains from any model never comes back to it (no
// cycle), so the configuration reads as a preference order, not a loop.
func (d decoder) fallbackChains(path string, v any) map[string][]string {
	obj, ok := d.object(path, v)
	if !ok {
		return nil
	}
	if len(obj) > MaxFallbackChains {
		d.errs.Add(path, "at most %d chains, got %d", MaxFallbackChains, len(obj))
		return nil
	}
	models := make([]string, 0, len(obj))
	for m := range obj {
		models = append(models, m)
	}
	sort.Strings(models)
	chains := make(map[string][]string, len(obj))
	for _, m := range models {
		cpath := fallbackPath(m, -1)
		if strings.TrimSpace(m) == "" || strings.TrimSpace(m) != m {
			d.errs.Add(cpath, "the model name must be non-empty, without surrounding spaces")
		}
		list := d.list(cpath, obj[m])
		if len(list) == 0 {
			if _, isList := obj[m].([]any); isList || obj[m] == nil {
				d.errs.Add(cpath, "a chain needs at least one fallback model")
			}
			continue
		}
		if len(list) > MaxFallbackChainLength {
			d.errs.Add(cpath, "at most %d fallback models, got %d", MaxFallbackChainLength, len(list))
			continue
		}
		seen := make(map[string]bool, len(list))
		chain := make([]string, 0, len(list))
		for i, x := range list {
			p := fallbackPath(m, i)
			name := d.str(p, x)
			switch {
			case x == nil || strings.TrimSpace(name) == "":
				d.errs.Add(p, "the model name must be non-empty")
			case strings.TrimSpace(name) != name:
				d.errs.Add(p, "the model name %q has surrounding spaces", name)
			case name == m:
				d.errs.Add(p, "a model cannot fall back to itself")
			case seen[name]:
				d.errs.Add(p, "%q is named twice in the chain", name)
			default:
				seen[name] = true
				chain = append(chain, name)
			}
		}
		chains[m] = chain
	}
	for _, m := range models {
		if cycle := fallbackCycle(chains, m); cycle != nil {
			d.errs.Add(fallbackPath(m, -1), "the chains form a cycle: %s", strings.Join(cycle, " -> "))
		}
	}
	if len(chains) == 0 {
		return nil
	}
	return chains
}

// fallbackCycle returns a path of chain edges from start back to start,
// nil when there is none. Chains are short and few (bounded above), so a
// depth-first search per model is cheap.
func fallbackCycle(chains map[string][]string, start string) []string {
	visited := map[string]bool{}
	var path []string
	var walk func(m string) bool
	walk = func(m string) bool {
		path = append(path, m)
		for _, next := range chains[m] {
			if next == start {
				path = append(path, next)
				return true
			}
			if !visited[next] {
				visited[next] = true
				if walk(next) {
					return true
				}
			}
		}
		path = path[:len(path)-1]
		return false
	}
	if walk(start) {
		return path
	}
	return nil
}

// prefixRouting decodes the top-level prefixRouting section.
func (d decoder) prefixRouting(path string, v any) *PrefixRoutingConfig {
	obj, ok := d.object(path, v)
	if !ok {
		return nil
	}
	d.keys(path, obj, "anthropicCacheControlInjection")
	pr := &PrefixRoutingConfig{}
	if x, ok := obj["anthropicCacheControlInjection"]; ok && x != nil {
		b, isBool := x.(bool)
		if !isBool {
			d.errs.Add(field(path, "anthropicCacheControlInjection"), "expected a boolean, got %s", yamldoc.TypeName(x))
		}
		pr.AnthropicCacheControlInjection = b
	}
	return pr
}
