package config

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/strategies"
)

// Plugin types whose parameters name a selection strategy, which the
// loader builds as a hidden nested instance.
const (
	StrategyPickerType   = "strategy-picker"
	EngineLoadPickerType = "engine-load-picker"
)

// nestedKind describes a parameter that names a strategy.
type nestedKind struct {
	// strategyKey and paramsKey are the parameter names of the strategy
	// and of its parameters.
	strategyKey, paramsKey string
	// instance names the nested instance of the plugin named parent.
	instance func(parent string) string
	// overridden: Options.SelectionStrategy sets this strategy.
	overridden bool
	// forbidden is a strategy the parameter may not name (the plugin's
	// own Validate says why); the loader builds nothing for it.
	forbidden string
}

// nestedKinds are the plugin types that take a strategy, by type.
var nestedKinds = map[string]nestedKind{
	StrategyPickerType:   {strategyKey: "strategy", paramsKey: "strategyParameters", instance: strategies.StrategyInstance, overridden: true},
	EngineLoadPickerType: {strategyKey: "baseStrategy", paramsKey: "baseStrategyParameters", instance: strategies.BaseInstance, forbidden: strategies.EngineLoad},
}

// maxNesting bounds strategy instances within strategy instances (a
// strategy-picker whose strategy is EngineLoad has a base strategy: 2).
const maxNesting = 2

// nestedResult is what building a plugin's strategy instance gave.
type nestedResult struct {
	// fresh: the strategy instance was built anew (not kept from
	// Options.Previous), so its parent is rebuilt too.
	fresh bool
	// stubs stand in for strategy instances that failed, by name.
	stubs map[string]scheduling.Plugin
}

// selectionStrategy checks Options.SelectionStrategy. It reports whether
// the load may go on.
func (l *loader) selectionStrategy() bool {
	if l.opts.SelectionStrategy == "" {
		return true
	}
	canonical, _, err := strategies.Parse(l.opts.SelectionStrategy)
	if err != nil {
		l.errs.Add("selectionStrategy", "%v (the --selection-strategy flag or %s)", err, strategies.EnvVar)
		return false
	}
	l.override = canonical
	return true
}

// note records what the loader changed beyond the file's own defaults
// (every load's Loaded.Notes has them all) and logs it at start-up, then
// on a reload only when the configuration it replaces did not say the
// same: a reload that changes nothing the override does stays quiet.
func (l *loader) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.out.Notes = append(l.out.Notes, msg)
	if prev := l.opts.Previous; prev != nil && slices.Contains(prev.Notes, msg) {
		return
	}
	l.opts.Logger.Info("Selection strategy override", "note", msg)
}

// strategies builds, before a plugin whose parameters name a strategy, the
// strategy's picker instance, with the strategy's parameters and the
// plugin's maxNumOfEndpoints. It returns the plugin's parameters (with the
// selection strategy override applied) and what it built. Parameters it
// cannot read, a strategy name that does not parse, or strategy
// parameters of the wrong shape build nothing: the plugin's own factory
// reports those problems with its other ones.
func (l *loader) strategies(name, pluginType string, params json.RawMessage, s site) (json.RawMessage, nestedResult) {
	var res nestedResult
	kind, ok := nestedKinds[pluginType]
	if !ok {
		return params, res
	}
	obj := map[string]json.RawMessage{}
	if trimmed := bytes.TrimSpace(params); len(trimmed) > 0 && !bytes.Equal(trimmed, []byte("null")) {
		if json.Unmarshal(trimmed, &obj) != nil {
			return params, res
		}
	}
	strategy := strategies.Default
	if raw, set := obj[kind.strategyKey]; set {
		if json.Unmarshal(raw, &strategy) != nil {
			return params, res
		}
	}
	if kind.overridden && l.override != "" && s.depth == 0 {
		if file, _, err := strategies.Parse(strategy); err != nil || file != l.override {
			msg := fmt.Sprintf("%s: strategy %s, chosen by --selection-strategy or %s, replaces %q", s.label, l.override, strategies.EnvVar, strategy)
			if _, set := obj[kind.paramsKey]; set {
				// They were written for the file's strategy.
				msg += fmt.Sprintf("; its %s are not used", kind.paramsKey)
				delete(obj, kind.paramsKey)
				params = dropKey(params, kind.paramsKey)
			}
			l.note("%s", msg)
		}
		strategy = l.override
		params = setKey(params, kind.strategyKey, jsonString(l.override))
	}
	canonical, nestedType, err := strategies.Parse(strategy)
	if err != nil || canonical == kind.forbidden {
		return params, res
	}
	nestedParams := obj[kind.paramsKey]
	if strategies.CheckNestedParameters(nestedParams) != nil {
		return params, res
	}
	if maxN, set := obj["maxNumOfEndpoints"]; set {
		nestedParams = setKey(nestedParams, "maxNumOfEndpoints", maxN)
	}
	nested := kind.instance(name)
	stub := func() {
		res.stubs = map[string]scheduling.Plugin{nested: &stubPicker{name: scheduling.TypedName{Type: nestedType, Name: nested}}}
	}
	switch {
	case s.depth >= maxNesting:
		l.errs.Add(s.label, "parameters: %s%s: strategies nest more than %d deep", s.prefix, kind.strategyKey, maxNesting)
		stub()
		return params, res
	case l.taken(nested):
		i := l.specIndex[nested]
		l.errs.Add(s.label, "parameters: %s%s: its strategy instance is named %q, which plugins[%d] also uses; rename that plugin", s.prefix, kind.strategyKey, nested, i)
		stub()
		return params, res
	}
	if _, found := l.opts.Registry.Lookup(nestedType); !found {
		l.errs.Add(s.label, "parameters: %s%s: %s needs the plugin type %q, which this build of Switchyard does not have", s.prefix, kind.strategyKey, canonical, nestedType)
		stub()
		return params, res
	}
	l.hidden[nested] = name
	built, fresh := l.constructAt(nested, nestedType, nestedParams, site{label: s.label, prefix: s.prefix + kind.paramsKey + ": ", depth: s.depth + 1})
	if !built {
		stub()
		return params, res
	}
	res.fresh = fresh
	return params, res
}

// taken reports whether a nested instance's name is already used by a
// configured plugin or another instance.
func (l *loader) taken(name string) bool {
	if _, ok := l.specIndex[name]; ok {
		return true
	}
	_, ok := l.instances[name]
	return ok
}

// overrideProfilePickers applies Options.SelectionStrategy to a
// configuration without a strategy-picker: each profile's picker is
// replaced by a strategy-picker of the chosen strategy with the replaced
// picker's maxNumOfEndpoints, the profile's scorers keeping precedence.
// (With a strategy-picker declared, the override sets its strategy
// instead; see strategies.) It reports whether it added instances.
func (l *loader) overrideProfilePickers() (added bool) {
	if l.override == "" || l.anyFailed() {
		return false
	}
	for _, spec := range l.cfg.Plugins {
		if spec.Type == StrategyPickerType {
			return false
		}
	}
	for i := range l.cfg.SchedulingProfiles {
		prof := &l.cfg.SchedulingProfiles[i]
		for j := range prof.Plugins {
			ref := &prof.Plugins[j]
			p, ok := l.instances[ref.PluginRef].(scheduling.Picker)
			if !ok {
				continue
			}
			maxN := 1
			if m, ok := p.(interface{ MaxEndpoints() int }); ok {
				maxN = m.MaxEndpoints()
			}
			base := StrategyPickerType
			if len(l.cfg.SchedulingProfiles) > 1 {
				base += "-" + prof.Name
			}
			name := base
			for n := 2; l.taken(name); n++ {
				name = fmt.Sprintf("%s-%d", base, n)
			}
			params, _ := json.Marshal(map[string]any{"strategy": l.override, "maxNumOfEndpoints": maxN})
			l.cfg.Plugins = append(l.cfg.Plugins, PluginSpec{Name: name, Type: StrategyPickerType, Parameters: params})
			l.specIndex[name] = len(l.cfg.Plugins) - 1
			if !l.construct(name, StrategyPickerType, params) {
				return false
			}
			added = true
			l.note("schedulingProfiles[%d] %q: its picker %s is replaced by the %s %q with strategy %s (chosen by --selection-strategy or %s) and maxNumOfEndpoints %d; the profile's scorers decide first when one endpoint scores clearly highest",
				i, prof.Name, p.TypedName(), StrategyPickerType, name, l.override, strategies.EnvVar, maxN)
			ref.PluginRef = name
			break // one picker per profile
		}
	}
	return added
}

// effectiveNested returns a plugin's effective parameters with its
// strategy's parameters replaced by the strategy instance's effective ones
// (defaults filled in, maxNumOfEndpoints left to the plugin), recursively:
// the nested instances are shown inside their plugin, not as plugins.
func (l *loader) effectiveNested(name, pluginType string, raw json.RawMessage) json.RawMessage {
	kind, ok := nestedKinds[pluginType]
	if !ok {
		return raw
	}
	nested := kind.instance(name)
	in, ok := l.owned[nested]
	if !ok {
		return raw
	}
	p, ok := l.handle.Params(nested)
	if !ok {
		return raw
	}
	sub, err := json.Marshal(p)
	if err != nil {
		return raw
	}
	sub = l.effectiveNested(nested, in.typ, sub)
	sub = dropKey(sub, "maxNumOfEndpoints")
	if string(sub) == "{}" {
		return dropKey(raw, kind.paramsKey)
	}
	return setKeyAfter(raw, kind.paramsKey, sub, kind.strategyKey)
}

// stubPicker stands in for a strategy instance that could not be built,
// so that its parent's factory can still check its own parameters. It is
// never used to pick.
type stubPicker struct{ name scheduling.TypedName }

func (s *stubPicker) TypedName() scheduling.TypedName { return s.name }

func (s *stubPicker) Pick(_ context.Context, _ *scheduling.Request, _ []scheduling.ScoredEndpoint) *scheduling.ProfileResult {
	return &scheduling.ProfileResult{}
}

// MaxEndpoints answers the pickers that ask their strategy (any is
// fine: the instance is discarded).
func (s *stubPicker) MaxEndpoints() int { return 1 }

// stubHandle is the instance handle factories get: it finds stand-ins for
// failed strategy instances, and Warn adds a configuration warning (shown
// by epp validate and logged at start-up and reload) under the instance's
// label.
type stubHandle struct {
	*scheduling.InstanceHandle
	stubs map[string]scheduling.Plugin
	warn  func(msg string)
}

// Warn records a configuration warning of the plugin being built.
func (h stubHandle) Warn(msg string) {
	if h.warn != nil {
		h.warn(msg)
	}
}

// Plugin implements scheduling.Handle.
func (h stubHandle) Plugin(name string) (scheduling.Plugin, bool) {
	if p, ok := h.stubs[name]; ok {
		return p, true
	}
	return h.InstanceHandle.Plugin(name)
}

// jsonString returns s as a JSON string.
func jsonString(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}

// setKey returns the JSON object obj with key set to value, keeping the
// order of the other keys (an absent or null obj is an empty object; the
// key is appended when new). obj must be an object, else it is returned
// unchanged.
func setKey(obj json.RawMessage, key string, value json.RawMessage) json.RawMessage {
	return setKeyAfter(obj, key, value, "")
}

// setKeyAfter is setKey that places a new key right after the key after,
// when obj has it, so that a parameter shown only in the effective
// configuration sits where its plugin declares it.
func setKeyAfter(obj json.RawMessage, key string, value json.RawMessage, after string) json.RawMessage {
	keys, vals, ok := members(obj)
	if !ok {
		return obj
	}
	for i, k := range keys {
		if k == key {
			vals[i] = value
			return object(keys, vals)
		}
	}
	at := len(keys)
	for i, k := range keys {
		if k == after {
			at = i + 1
		}
	}
	keys = slices.Insert(keys, at, key)
	vals = slices.Insert(vals, at, value)
	return object(keys, vals)
}

// dropKey returns the JSON object obj without key, keeping the order of
// the other keys.
func dropKey(obj json.RawMessage, key string) json.RawMessage {
	keys, vals, ok := members(obj)
	if !ok {
		return obj
	}
	for i := 0; i < len(keys); i++ {
		if keys[i] == key {
			keys, vals = append(keys[:i], keys[i+1:]...), append(vals[:i], vals[i+1:]...)
			i--
		}
	}
	return object(keys, vals)
}

// members splits a JSON object into its keys and values, in order.
func members(obj json.RawMessage) (keys []string, vals []json.RawMessage, ok bool) {
	trimmed := bytes.TrimSpace(obj)
	if len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null")) {
		return nil, nil, true
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, nil, false
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, nil, false
		}
		k, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, false
		}
		keys, vals = append(keys, k), append(vals, v)
	}
	return keys, vals, true
}

// object renders keys and values as a JSON object, in order.
func object(keys []string, vals []json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(jsonString(k))
		b.WriteByte(':')
		b.Write(vals[i])
	}
	b.WriteByte('}')
	return b.Bytes()
}
