package strategies

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// The canonical strategy names, in PascalCase as the Continuum Router
// spells them.
const (
	RoundRobin         = "RoundRobin"
	WeightedRoundRobin = "WeightedRoundRobin"
	LeastLatency       = "LeastLatency"
	Random             = "Random"
	ConsistentHash     = "ConsistentHash"
	PrefixAwareHash    = "PrefixAwareHash"
	EngineLoad         = "EngineLoad"
	LeastBusy          = "LeastBusy"
	LeastCost          = "LeastCost"
)

// Default is the strategy used when neither the flag, the environment nor
// the configuration names one.
const Default = RoundRobin

// EnvVar is the environment variable that chooses the strategy when the
// --selection-strategy flag is not given (the Continuum Router's
// CONTINUUM_SELECTION_STRATEGY under Switchyard's prefix).
const EnvVar = "SWITCHYARD_SELECTION_STRATEGY"

// Strategy is one entry of the table.
type Strategy struct {
	// Name is the canonical name (PascalCase).
	Name string
	// PluginType is the picker type that implements the strategy.
	PluginType string
}

// table lists every strategy in the order of the Continuum Router's
// documentation. Keep Names' doc and the README in step with it.
var table = [...]Strategy{
	{RoundRobin, "round-robin-picker"},
	{WeightedRoundRobin, "weighted-round-robin-picker"},
	{LeastLatency, "least-latency-picker"},
	{Random, "random-picker"},
	{ConsistentHash, "consistent-hash-picker"},
	{PrefixAwareHash, "prefix-aware-hash-picker"},
	{EngineLoad, "engine-load-picker"},
	{LeastBusy, "least-busy-picker"},
	{LeastCost, "least-cost-picker"},
}

// All returns every strategy, in the table's order. The slice is a copy.
func All() []Strategy {
	out := make([]Strategy, len(table))
	copy(out, table[:])
	return out
}

// Names returns the canonical names in the table's order: RoundRobin,
// WeightedRoundRobin, LeastLatency, Random, ConsistentHash,
// PrefixAwareHash, EngineLoad, LeastBusy, LeastCost.
func Names() []string {
	out := make([]string, len(table))
	for i, s := range table {
		out[i] = s.Name
	}
	return out
}

// ErrUnknown is wrapped by Parse's error for a name that is not a
// strategy.
var ErrUnknown = errors.New("unknown strategy")

// Parse reads a strategy name as users write it and returns its canonical
// name and picker type. Case does not matter, and words may be run
// together (PascalCase, camelCase) or separated by underscores (snake_case)
// or hyphens (kebab-case): "LeastBusy", "least_busy", "least-busy" and
// "LEASTBUSY" are all LeastBusy. Surrounding spaces are ignored. Any other
// name, the empty one included, is an error wrapping ErrUnknown that lists
// the valid names.
func Parse(name string) (canonical, pluginType string, err error) {
	if words, ok := split(name); ok {
		for _, s := range table {
			if matches(s.Name, words) {
				return s.Name, s.PluginType, nil
			}
		}
	}
	return "", "", fmt.Errorf("%w %q; valid: %s (case-insensitive; PascalCase, snake_case or kebab-case)", ErrUnknown, name, strings.Join(Names(), ", "))
}

// PluginType returns the picker type of a canonical name, and whether it
// is one.
func PluginType(canonical string) (string, bool) {
	for _, s := range table {
		if s.Name == canonical {
			return s.PluginType, true
		}
	}
	return "", false
}

// split cuts a trimmed name at its underscores and hyphens into lower-case
// words; a name without separators is one word. It fails on an empty
// name, an empty word (a leading, trailing or doubled separator) and any
// character other than ASCII letters and digits.
func split(name string) ([]string, bool) {
	name = strings.TrimSpace(name)
	if name == "" {
		return nil, false
	}
	words := strings.FieldsFunc(name, func(r rune) bool { return r == '_' || r == '-' })
	if len(strings.Join(words, "-")) != len(name) {
		return nil, false // an empty word between separators
	}
	for i, w := range words {
		for j := 0; j < len(w); j++ {
			c := w[j]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
				return nil, false
			}
		}
		words[i] = strings.ToLower(w)
	}
	return words, true
}

// matches reports whether words spell the canonical name: one word equal
// to the whole name (PascalCase or camelCase, any case), or exactly the
// name's PascalCase words in order (snake_case, kebab-case).
func matches(canonical string, words []string) bool {
	if len(words) == 1 {
		return words[0] == strings.ToLower(canonical)
	}
	start, n := 0, 0
	for i := 1; i <= len(canonical); i++ {
		if i < len(canonical) && !(canonical[i] >= 'A' && canonical[i] <= 'Z') {
			continue
		}
		if n >= len(words) || words[n] != strings.ToLower(canonical[start:i]) {
			return false
		}
		start, n = i, n+1
	}
	return n == len(words)
}

// Nested instances. A plugin whose parameters name a strategy (the
// strategy-picker's strategy, the engine-load-picker's baseStrategy) gets
// that strategy as a hidden instance of its picker type, built by the
// configuration loader before the plugin itself and found by the plugin's
// factory with Handle.Plugin under these names. Plugins never import one
// another; the names are the contract between the loader and them.
const (
	// StrategySuffix names the strategy-picker's strategy instance.
	StrategySuffix = "/strategy"
	// BaseSuffix names the engine-load-picker's base strategy instance.
	BaseSuffix = "/base"
)

// StrategyInstance returns the name of the strategy instance of the
// strategy-picker named parent: "parent/strategy".
func StrategyInstance(parent string) string { return parent + StrategySuffix }

// BaseInstance returns the name of the base strategy instance of the
// engine-load-picker named parent: "parent/base".
func BaseInstance(parent string) string { return parent + BaseSuffix }

// CheckNestedParameters checks the shape of a nested strategy's
// parameters (strategyParameters, baseStrategyParameters): absent, null,
// or a JSON object without maxNumOfEndpoints, which is the parent's
// parameter (the parent returns that many endpoints, in its strategy's
// order). Their content is the nested type's to check. The plugins that
// hold such parameters call it from their Validate, prefixing the field.
func CheckNestedParameters(raw json.RawMessage) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return errors.New("expected an object (the parameters of the strategy's picker type)")
	}
	if _, ok := obj["maxNumOfEndpoints"]; ok {
		return errors.New("maxNumOfEndpoints: not allowed here; set maxNumOfEndpoints on the plugin itself, and its strategy orders that many endpoints")
	}
	return nil
}
