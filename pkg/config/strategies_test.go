package config_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	configfiles "github.com/switchyard-ai/switchyard/config"
	"github.com/switchyard-ai/switchyard/pkg/config"
	"github.com/switchyard-ai/switchyard/pkg/plugins"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	st "github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/strategies"
)

// Test stand-ins for plugin types this package's tests need but do not
// own: the engine-load-picker (its real implementation lives elsewhere;
// this one has its parameters' shape and finds its base strategy the same
// way), and a profile handler that runs every profile.

type stubEngineLoadParams struct {
	MaxNumOfEndpoints      int             `json:"maxNumOfEndpoints"`
	BaseStrategy           string          `json:"baseStrategy"`
	BaseStrategyParameters json.RawMessage `json:"baseStrategyParameters,omitempty"`
	Fail                   bool            `json:"fail"`
}

func (p *stubEngineLoadParams) Validate() error {
	var errs []error
	if p.MaxNumOfEndpoints < 1 {
		errs = append(errs, fmt.Errorf("maxNumOfEndpoints: must be >= 1, got %d", p.MaxNumOfEndpoints))
	}
	if name, _, err := strategies.Parse(p.BaseStrategy); err != nil {
		errs = append(errs, fmt.Errorf("baseStrategy: %w", err))
	} else if name == strategies.EngineLoad {
		errs = append(errs, errors.New("baseStrategy: EngineLoad cannot be its own base strategy"))
	}
	if err := strategies.CheckNestedParameters(p.BaseStrategyParameters); err != nil {
		errs = append(errs, fmt.Errorf("baseStrategyParameters: %w", err))
	}
	if p.Fail {
		errs = append(errs, errors.New("fail: set"))
	}
	return errors.Join(errs...)
}

type stubEngineLoad struct {
	name string
	max  int
	base scheduling.Picker
}

func (s *stubEngineLoad) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: config.EngineLoadPickerType, Name: s.name}
}
func (s *stubEngineLoad) MaxEndpoints() int { return s.max }
func (s *stubEngineLoad) Pick(ctx context.Context, req *scheduling.Request, scored []scheduling.ScoredEndpoint) *scheduling.ProfileResult {
	return s.base.Pick(ctx, req, scored)
}

var stubEngineLoadRegistration = scheduling.Registration{
	Type: config.EngineLoadPickerType,
	Factory: scheduling.Typed(func() stubEngineLoadParams {
		return stubEngineLoadParams{MaxNumOfEndpoints: 1, BaseStrategy: strategies.RoundRobin}
	}, func(name string, p stubEngineLoadParams, h scheduling.Handle) (*stubEngineLoad, error) {
		b, ok := h.Plugin(strategies.BaseInstance(name))
		if !ok {
			return nil, fmt.Errorf("baseStrategy: no instance %q", strategies.BaseInstance(name))
		}
		return &stubEngineLoad{name: name, max: p.MaxNumOfEndpoints, base: b.(scheduling.Picker)}, nil
	}),
}

// allProfiles runs every profile; the first by name is primary.
type allProfiles struct{}

func (allProfiles) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: "all-profiles-handler", Name: "all-profiles-handler"}
}
func (allProfiles) Pick(_ context.Context, _ *scheduling.Request, profiles map[string]*scheduling.Profile, results map[string]*scheduling.ProfileResult) []*scheduling.Profile {
	if len(results) > 0 {
		return nil
	}
	var out []*scheduling.Profile
	for _, p := range profiles {
		out = append(out, p)
	}
	return out
}
func (allProfiles) ProcessResults(_ context.Context, _ *scheduling.Request, results map[string]*scheduling.ProfileResult) (*scheduling.Result, error) {
	names := make([]string, 0, len(results))
	for n := range results {
		names = append(names, n)
	}
	slices.Sort(names)
	return &scheduling.Result{ProfileResults: results, PrimaryProfile: names[0]}, nil
}

// testRegistry is InTree with the stand-ins, and without the types named
// in without (to test a strategy whose type a build lacks).
func testRegistry(without ...string) *scheduling.Registry {
	in := plugins.InTree()
	reg := scheduling.NewRegistry()
	for _, typ := range in.Types() {
		if typ == config.EngineLoadPickerType || slices.Contains(without, typ) {
			continue
		}
		r, _ := in.Lookup(typ)
		reg.MustRegister(r)
	}
	reg.MustRegister(stubEngineLoadRegistration, scheduling.Registration{
		Type:    "all-profiles-handler",
		Factory: scheduling.Typed(func() scheduling.NoParams { return scheduling.NoParams{} }, func(string, scheduling.NoParams, scheduling.Handle) (allProfiles, error) { return allProfiles{}, nil }),
	})
	return reg
}

func loadWith(t *testing.T, doc string, opts config.Options) (*config.Loaded, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if opts.Registry == nil {
		opts.Registry = testRegistry()
	}
	if opts.Registerer == nil {
		opts.Registerer = prometheus.NewRegistry()
	}
	opts.Context, opts.Seed = ctx, 1
	l, err := config.Load([]byte(doc), opts)
	if err == nil {
		t.Cleanup(l.Close)
	}
	return l, err
}

// strategyDoc is a configuration whose one profile has a queue scorer and
// the given picker plugin (YAML, indented as a plugins entry).
func strategyDoc(picker string) string {
	return header + "plugins:\n- type: queue-scorer\n" + picker + `
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
  - pluginRef: p
`
}

func typeOf(l *config.Loaded, name string) string {
	if p, ok := l.Plugins[name]; ok {
		return p.TypedName().Type
	}
	return ""
}

func profilePicker(t *testing.T, l *config.Loaded) scheduling.Picker {
	t.Helper()
	profiles := l.Scheduler.Profiles()
	require.Len(t, profiles, 1)
	return profiles[0].Picker()
}

// pluginParams returns the effective parameters of a configured plugin.
func pluginParams(t *testing.T, cfg *config.EndpointPickerConfig, name string) map[string]any {
	t.Helper()
	for _, p := range cfg.Plugins {
		if p.Name == name {
			var out map[string]any
			require.NoError(t, json.Unmarshal(p.Parameters, &out))
			return out
		}
	}
	t.Fatalf("no plugin %q in the effective configuration", name)
	return nil
}

// TestC03_StrategyFromConfiguration: the strategy is the strategy-picker's
// strategy parameter (RoundRobin when absent), in any accepted spelling;
// the loader builds it as the hidden instance "<name>/strategy" of the
// strategy's picker type, with strategyParameters and the picker's
// maxNumOfEndpoints; the effective configuration shows it inside the
// strategy-picker's parameters, defaults filled in, and not as a plugin.
func TestC03_StrategyFromConfiguration(t *testing.T) {
	tests := []struct {
		name       string
		picker     string
		wantType   string
		wantParams map[string]any
	}{
		{
			name:       "default RoundRobin",
			picker:     "- name: p\n  type: strategy-picker",
			wantType:   "round-robin-picker",
			wantParams: map[string]any{"maxNumOfEndpoints": 1.0, "strategy": "RoundRobin", "scorerThreshold": 0.3, "scorerMargin": 0.05},
		},
		{
			name:       "snake_case",
			picker:     "- name: p\n  type: strategy-picker\n  parameters: {strategy: least_busy}",
			wantType:   "least-busy-picker",
			wantParams: map[string]any{"maxNumOfEndpoints": 1.0, "strategy": "LeastBusy", "scorerThreshold": 0.3, "scorerMargin": 0.05},
		},
		{
			name:     "kebab-case with parameters and fallbacks",
			picker:   "- name: p\n  type: strategy-picker\n  parameters: {strategy: consistent-hash, strategyParameters: {virtualNodes: 20}, maxNumOfEndpoints: 3, scorerThreshold: 0.5}",
			wantType: "consistent-hash-picker",
			wantParams: map[string]any{"maxNumOfEndpoints": 3.0, "strategy": "ConsistentHash", "scorerThreshold": 0.5, "scorerMargin": 0.05,
				"strategyParameters": map[string]any{"virtualNodes": 20.0}},
		},
		{
			name:     "defaults of the strategy's parameters are shown",
			picker:   "- name: p\n  type: strategy-picker\n  parameters: {strategy: ConsistentHash}",
			wantType: "consistent-hash-picker",
			wantParams: map[string]any{"maxNumOfEndpoints": 1.0, "strategy": "ConsistentHash", "scorerThreshold": 0.3, "scorerMargin": 0.05,
				"strategyParameters": map[string]any{"virtualNodes": 150.0}},
		},
		{
			name:     "EngineLoad has a base strategy",
			picker:   "- name: p\n  type: strategy-picker\n  parameters: {strategy: EngineLoad, strategyParameters: {baseStrategy: weighted-round-robin}, maxNumOfEndpoints: 2}",
			wantType: "engine-load-picker",
			wantParams: map[string]any{"maxNumOfEndpoints": 2.0, "strategy": "EngineLoad", "scorerThreshold": 0.3, "scorerMargin": 0.05,
				"strategyParameters": map[string]any{"baseStrategy": "weighted-round-robin", "fail": false}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := loadWith(t, strategyDoc(tt.picker), config.Options{})
			require.NoError(t, err)
			require.Equal(t, config.StrategyPickerType, typeOf(l, "p"))
			require.Equal(t, tt.wantType, typeOf(l, "p/strategy"))
			picker := profilePicker(t, l)
			require.Same(t, l.Plugins["p"], picker)
			require.Same(t, l.Plugins["p/strategy"], picker.(interface{ StrategyPicker() scheduling.Picker }).StrategyPicker())
			wantMax := int(tt.wantParams["maxNumOfEndpoints"].(float64))
			require.Equal(t, wantMax, l.Plugins["p/strategy"].(interface{ MaxEndpoints() int }).MaxEndpoints(), "the strategy returns as many endpoints as the strategy-picker")
			if diff := cmp.Diff(tt.wantParams, pluginParams(t, l.Config, "p")); diff != "" {
				t.Errorf("effective parameters (-want +got):\n%s", diff)
			}
			for _, spec := range l.Config.Plugins {
				require.False(t, strings.Contains(spec.Name, "/"), "the strategy instance %q is listed as a plugin", spec.Name)
			}
			require.Empty(t, l.Notes)
			require.Empty(t, l.Warnings)
			// The effective configuration loads again into the same one.
			out, err := config.MarshalYAML(l.Config)
			require.NoError(t, err)
			again, err := loadWith(t, string(out), config.Options{})
			require.NoError(t, err, "effective configuration:\n%s", out)
			out2, err := config.MarshalYAML(again.Config)
			require.NoError(t, err)
			require.Equal(t, string(out), string(out2))
		})
	}

	t.Run("engine-load-picker's base strategy", func(t *testing.T) {
		l, err := loadWith(t, strategyDoc("- name: p\n  type: engine-load-picker\n  parameters: {baseStrategy: LeastLatency, maxNumOfEndpoints: 2}"), config.Options{})
		require.NoError(t, err)
		require.Equal(t, "least-latency-picker", typeOf(l, "p/base"))
		require.Equal(t, 2, l.Plugins["p/base"].(interface{ MaxEndpoints() int }).MaxEndpoints())
		l, err = loadWith(t, strategyDoc("- name: p\n  type: engine-load-picker"), config.Options{})
		require.NoError(t, err)
		require.Equal(t, "round-robin-picker", typeOf(l, "p/base"))
		require.NotContains(t, pluginParams(t, l.Config, "p"), "baseStrategyParameters", "a base without parameters of its own shows none")
		// Nested twice: the strategy-picker's EngineLoad has its base.
		l, err = loadWith(t, strategyDoc("- name: p\n  type: strategy-picker\n  parameters: {strategy: engine_load, strategyParameters: {baseStrategy: ConsistentHash, baseStrategyParameters: {virtualNodes: 7}}}"), config.Options{})
		require.NoError(t, err)
		require.Equal(t, "consistent-hash-picker", typeOf(l, "p/strategy/base"))
		want := map[string]any{"baseStrategy": "ConsistentHash", "baseStrategyParameters": map[string]any{"virtualNodes": 7.0}, "fail": false}
		if diff := cmp.Diff(want, pluginParams(t, l.Config, "p")["strategyParameters"]); diff != "" {
			t.Errorf("nested effective parameters (-want +got):\n%s", diff)
		}
	})
}

// Errors of a strategy and of its parameters name the strategy-picker's
// field; every problem is reported at once, the strategy-picker's own
// among them.
func TestStrategyErrors(t *testing.T) {
	valid := "valid: RoundRobin, WeightedRoundRobin, LeastLatency, Random, ConsistentHash, PrefixAwareHash, EngineLoad, LeastBusy, LeastCost (case-insensitive; PascalCase, snake_case or kebab-case)"
	tests := []struct {
		name     string
		doc      string
		registry *scheduling.Registry
		want     []string
	}{
		{
			name: "unknown strategy",
			doc:  strategyDoc("- name: p\n  type: strategy-picker\n  parameters: {strategy: bogus}"),
			want: []string{`plugins[1] "p" (strategy-picker): parameters: strategy: unknown strategy "bogus"; ` + valid},
		},
		{
			name: "unknown strategy and a bad threshold",
			doc:  strategyDoc("- name: p\n  type: strategy-picker\n  parameters: {strategy: fastest, scorerThreshold: 3}"),
			want: []string{
				`plugins[1] "p" (strategy-picker): parameters: strategy: unknown strategy "fastest"; ` + valid,
				`plugins[1] "p" (strategy-picker): parameters: scorerThreshold: must be a fraction in 0..1 of the profile's total scorer weight, got 3`,
			},
		},
		{
			name: "invalid strategy parameters, and the picker's own",
			doc:  strategyDoc("- name: p\n  type: strategy-picker\n  parameters: {strategy: ConsistentHash, strategyParameters: {virtualNodes: 0, vnodes: 3}, scorerThreshold: -1}"),
			want: []string{
				`plugins[1] "p" (strategy-picker): parameters: strategyParameters: unknown field "vnodes"`,
				`plugins[1] "p" (strategy-picker): parameters: scorerThreshold: must be a fraction in 0..1 of the profile's total scorer weight, got -1`,
			},
		},
		{
			name: "strategy parameters invalid after decoding",
			doc:  strategyDoc("- name: p\n  type: strategy-picker\n  parameters: {strategy: ConsistentHash, strategyParameters: {virtualNodes: 0}}"),
			want: []string{`plugins[1] "p" (strategy-picker): parameters: strategyParameters: virtualNodes: must be 1..1000, got 0`},
		},
		{
			name: "parameters for a strategy without them",
			doc:  strategyDoc("- name: p\n  type: strategy-picker\n  parameters: {strategy: LeastBusy, strategyParameters: {virtualNodes: 10}}"),
			want: []string{`plugins[1] "p" (strategy-picker): parameters: strategyParameters: unknown field "virtualNodes"`},
		},
		{
			name: "maxNumOfEndpoints belongs to the strategy-picker",
			doc:  strategyDoc("- name: p\n  type: strategy-picker\n  parameters: {strategyParameters: {maxNumOfEndpoints: 2}}"),
			want: []string{`plugins[1] "p" (strategy-picker): parameters: strategyParameters: maxNumOfEndpoints: not allowed here; set maxNumOfEndpoints on the plugin itself, and its strategy orders that many endpoints`},
		},
		{
			name: "strategy parameters not an object",
			doc:  strategyDoc("- name: p\n  type: strategy-picker\n  parameters: {strategyParameters: [1, 2]}"),
			want: []string{`plugins[1] "p" (strategy-picker): parameters: strategyParameters: expected an object (the parameters of the strategy's picker type)`},
		},
		{
			name: "strategy not a string",
			doc:  strategyDoc("- name: p\n  type: strategy-picker\n  parameters: {strategy: 3}"),
			want: []string{`plugins[1] "p" (strategy-picker): parameters: strategy: expected a string, got number`},
		},
		{
			name:     "a strategy this build lacks",
			doc:      strategyDoc("- name: p\n  type: strategy-picker\n  parameters: {strategy: PrefixAwareHash, scorerThreshold: 2}"),
			registry: testRegistry("prefix-aware-hash-picker"),
			want: []string{
				`plugins[1] "p" (strategy-picker): parameters: strategy: PrefixAwareHash needs the plugin type "prefix-aware-hash-picker", which this build of Switchyard does not have`,
				`plugins[1] "p" (strategy-picker): parameters: scorerThreshold: must be a fraction in 0..1 of the profile's total scorer weight, got 2`,
			},
		},
		{
			name: "base strategy parameters, two levels down",
			doc:  strategyDoc("- name: p\n  type: strategy-picker\n  parameters: {strategy: EngineLoad, strategyParameters: {baseStrategy: consistent_hash, baseStrategyParameters: {virtualNodes: 5000}}}"),
			want: []string{`plugins[1] "p" (strategy-picker): parameters: strategyParameters: baseStrategyParameters: virtualNodes: must be 1..1000, got 5000`},
		},
		{
			name: "the engine-load-picker's own error under the strategy-picker",
			doc:  strategyDoc("- name: p\n  type: strategy-picker\n  parameters: {strategy: EngineLoad, strategyParameters: {fail: true}}"),
			want: []string{`plugins[1] "p" (strategy-picker): parameters: strategyParameters: fail: set`},
		},
		{
			name: "EngineLoad cannot be its own base: the plugin says so",
			doc:  strategyDoc("- name: p\n  type: engine-load-picker\n  parameters: {baseStrategy: EngineLoad}"),
			want: []string{`plugins[1] "p" (engine-load-picker): parameters: baseStrategy: EngineLoad cannot be its own base strategy`},
		},
		{
			name: "a plugin named like a strategy instance, after it",
			doc:  strategyDoc("- name: p\n  type: strategy-picker\n- name: p/strategy\n  type: random-picker"),
			want: []string{`plugins[2].name: "p/strategy" is the name of the strategy instance of plugins[1] "p" (strategy-picker); give this plugin another name`},
		},
		{
			name: "a plugin named like a strategy instance, before it",
			doc:  header + "plugins:\n- name: p/strategy\n  type: random-picker\n- name: p\n  type: strategy-picker\nschedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: p\n",
			want: []string{`plugins[1] "p" (strategy-picker): parameters: strategy: its strategy instance is named "p/strategy", which plugins[0] also uses; rename that plugin`},
		},
		{
			name: "profiles do not reference strategy instances",
			doc:  header + "plugins:\n- name: p\n  type: strategy-picker\nschedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: p/strategy\n",
			want: []string{`schedulingProfiles[0].plugins[0].pluginRef: "p/strategy" is the strategy instance of plugins[0] "p" (strategy-picker), which profiles do not reference; reference "p"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadWith(t, tt.doc, config.Options{Registry: tt.registry})
			require.Error(t, err)
			if diff := cmp.Diff(tt.want, errorStrings(t, err)); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

// TestC04_OverrideSetsEveryStrategyPicker: Options.SelectionStrategy (the
// flag, else the environment variable) wins over the strategy parameter
// of every strategy-picker, in any spelling, and says so in a note; an
// unknown name fails the load with the list of valid names.
func TestC04_OverrideSetsEveryStrategyPicker(t *testing.T) {
	doc := header + `plugins:
- type: queue-scorer
- name: p
  type: strategy-picker
  parameters: {strategy: RoundRobin, maxNumOfEndpoints: 2}
- name: q
  type: strategy-picker
  parameters: {strategy: least-busy}
- type: all-profiles-handler
schedulingProfiles:
- name: a
  plugins: [{pluginRef: queue-scorer}, {pluginRef: p}]
- name: b
  plugins: [{pluginRef: q}]
`
	l, err := loadWith(t, doc, config.Options{SelectionStrategy: "least_latency"})
	require.NoError(t, err)
	require.Equal(t, "least-latency-picker", typeOf(l, "p/strategy"))
	require.Equal(t, "least-latency-picker", typeOf(l, "q/strategy"))
	require.Equal(t, 2, l.Plugins["p/strategy"].(interface{ MaxEndpoints() int }).MaxEndpoints())
	require.Equal(t, "LeastLatency", pluginParams(t, l.Config, "p")["strategy"])
	require.Equal(t, "LeastLatency", pluginParams(t, l.Config, "q")["strategy"])
	require.Equal(t, []string{
		`plugins[1] "p" (strategy-picker): strategy LeastLatency, chosen by --selection-strategy or SWITCHYARD_SELECTION_STRATEGY, replaces "RoundRobin"`,
		`plugins[2] "q" (strategy-picker): strategy LeastLatency, chosen by --selection-strategy or SWITCHYARD_SELECTION_STRATEGY, replaces "least-busy"`,
	}, l.Notes)

	// The strategy the file names already: nothing to say.
	l, err = loadWith(t, doc, config.Options{SelectionStrategy: "RoundRobin"})
	require.NoError(t, err)
	require.Len(t, l.Notes, 1)
	require.Equal(t, "round-robin-picker", typeOf(l, "q/strategy"))

	// An override replaces a file's unknown strategy too.
	bad := strategyDoc("- name: p\n  type: strategy-picker\n  parameters: {strategy: nope}")
	_, err = loadWith(t, bad, config.Options{})
	require.ErrorContains(t, err, `unknown strategy "nope"`)
	_, err = loadWith(t, bad, config.Options{SelectionStrategy: "random"})
	require.NoError(t, err)
	// The file's strategyParameters were written for the file's strategy:
	// another strategy does not get them; the same one (in any spelling)
	// does.
	hashed := strategyDoc("- name: p\n  type: strategy-picker\n  parameters: {strategy: ConsistentHash, strategyParameters: {virtualNodes: 9}}")
	l, err = loadWith(t, hashed, config.Options{SelectionStrategy: "round-robin"})
	require.NoError(t, err)
	require.Equal(t, "round-robin-picker", typeOf(l, "p/strategy"))
	require.NotContains(t, pluginParams(t, l.Config, "p"), "strategyParameters")
	require.Equal(t, []string{`plugins[1] "p" (strategy-picker): strategy RoundRobin, chosen by --selection-strategy or SWITCHYARD_SELECTION_STRATEGY, replaces "ConsistentHash"; its strategyParameters are not used`}, l.Notes)
	l, err = loadWith(t, hashed, config.Options{SelectionStrategy: "consistent_hash"})
	require.NoError(t, err)
	require.Equal(t, map[string]any{"virtualNodes": 9.0}, pluginParams(t, l.Config, "p")["strategyParameters"])
	require.Empty(t, l.Notes)

	// An unknown override fails the load at once, listing the names.
	_, err = loadWith(t, doc, config.Options{SelectionStrategy: "bogus"})
	require.Error(t, err)
	require.Equal(t, []string{`selectionStrategy: unknown strategy "bogus"; valid: RoundRobin, WeightedRoundRobin, LeastLatency, Random, ConsistentHash, PrefixAwareHash, EngineLoad, LeastBusy, LeastCost (case-insensitive; PascalCase, snake_case or kebab-case) (the --selection-strategy flag or SWITCHYARD_SELECTION_STRATEGY)`}, errorStrings(t, err))
}

// In a configuration without a strategy-picker, the override replaces each
// profile's picker by a strategy-picker of the chosen strategy with the
// replaced picker's maxNumOfEndpoints; the scorers stay, and keep
// precedence. The note says so.
func TestOverrideReplacesProfilePickers(t *testing.T) {
	l, err := loadWith(t, string(configfiles.Default), config.Options{SelectionStrategy: "LeastBusy"})
	require.NoError(t, err)
	prof := l.Scheduler.Profiles()[0]
	require.Equal(t, scheduling.TypedName{Type: config.StrategyPickerType, Name: "strategy-picker"}, prof.Picker().TypedName())
	require.Equal(t, "least-busy-picker", typeOf(l, "strategy-picker/strategy"))
	var scorers []string
	for _, s := range prof.Scorers() {
		scorers = append(scorers, fmt.Sprintf("%s×%g", s.Scorer.TypedName(), s.Weight))
	}
	require.Equal(t, []string{"queue-scorer×2", "kv-cache-utilization-scorer×2", "prefix-cache-scorer×3"}, scorers)
	_, profiles := summarize(l.Config)
	require.Equal(t, []string{"queue-scorer=2", "kv-cache-utilization-scorer=2", "prefix-cache-scorer=3", "strategy-picker"}, profiles["default"])
	require.Equal(t, map[string]any{"maxNumOfEndpoints": 1.0, "strategy": "LeastBusy", "scorerThreshold": 0.3, "scorerMargin": 0.05}, pluginParams(t, l.Config, "strategy-picker"))
	require.Equal(t, []string{`schedulingProfiles[0] "default": its picker max-score-picker is replaced by the strategy-picker "strategy-picker" with strategy LeastBusy (chosen by --selection-strategy or SWITCHYARD_SELECTION_STRATEGY) and maxNumOfEndpoints 1; the profile's scorers decide first when one endpoint scores clearly highest`}, l.Notes)

	// The effective configuration says the same without the override.
	out, err := config.MarshalYAML(l.Config)
	require.NoError(t, err)
	again, err := loadWith(t, string(out), config.Options{})
	require.NoError(t, err)
	require.Equal(t, "least-busy-picker", typeOf(again, "strategy-picker/strategy"))
	require.Empty(t, again.Notes)

	// maxNumOfEndpoints carries over; a taken name gets a suffix; several
	// profiles get one strategy-picker each.
	doc := header + `plugins:
- type: queue-scorer
- {name: strategy-picker, type: random-picker}
- {name: three, type: max-score-picker, parameters: {maxNumOfEndpoints: 3}}
- type: all-profiles-handler
schedulingProfiles:
- name: a
  plugins: [{pluginRef: queue-scorer}, {pluginRef: three}]
- name: b
  plugins: [{pluginRef: strategy-picker}]
`
	l, err = loadWith(t, doc, config.Options{SelectionStrategy: "random"})
	require.NoError(t, err)
	_, profiles = summarize(l.Config)
	require.Equal(t, map[string][]string{"a": {"queue-scorer=1", "strategy-picker-a"}, "b": {"strategy-picker-b"}}, profiles)
	require.Equal(t, 3.0, pluginParams(t, l.Config, "strategy-picker-a")["maxNumOfEndpoints"])
	require.Equal(t, 1.0, pluginParams(t, l.Config, "strategy-picker-b")["maxNumOfEndpoints"])
	require.Equal(t, "random-picker", typeOf(l, "strategy-picker-a/strategy"))
	require.Len(t, l.Notes, 2)

	one := header + "plugins:\n- {name: strategy-picker, type: random-picker}\n"
	l, err = loadWith(t, one, config.Options{SelectionStrategy: "random"})
	require.NoError(t, err)
	require.Equal(t, "strategy-picker-2", profilePicker(t, l).TypedName().Name)
}

// TestC05_ReloadKeepsOrRebuildsStrategiesWithTheirParent: on reload the
// strategy instance is kept with its state when nothing about it changed,
// and rebuilt (its parent too) when the strategy or its parameters did;
// the replaced instances are closed once the new configuration serves,
// and the new strategy applies from the next request, reading the same
// endpoint data (in-flight counts live in the datastore, not the picker).
func TestC05_ReloadKeepsOrRebuildsStrategiesWithTheirParent(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts := config.Options{Registry: testRegistry(), Context: ctx, Registerer: prometheus.NewRegistry(), Seed: 1}
	doc := func(params string) []byte {
		return []byte(header + "plugins:\n- name: p\n  type: strategy-picker\n  parameters: " + params + "\nschedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: p\n")
	}
	first, err := config.Load(doc("{strategy: ConsistentHash, strategyParameters: {virtualNodes: 10}}"), opts)
	require.NoError(t, err)
	loads := []*st.FakeLoad{st.NewFakeLoad(5, time.Second), st.NewFakeLoad(0, time.Second), st.NewFakeLoad(2, time.Second)}
	eps := st.Endpoints(3, func(i int, b *st.EndpointBuilder) { b.Load(loads[i]) })
	pick := func(l *config.Loaded) string {
		res, err := l.Scheduler.Schedule(ctx, &scheduling.Request{Model: "m", TargetModel: "m"}, eps)
		require.NoError(t, err)
		return res.Targets()[0].Name()
	}
	before := pick(first)
	ringed := first.Plugins["p/strategy"]

	steps := []struct {
		name         string
		params       string
		keepParent   bool
		keepStrategy bool
		wantPick     string // "" to skip
	}{
		{name: "same configuration", params: "{strategy: consistent_hash, strategyParameters: {virtualNodes: 10}}", keepParent: true, keepStrategy: true, wantPick: before},
		{name: "threshold changed", params: "{strategy: ConsistentHash, strategyParameters: {virtualNodes: 10}, scorerThreshold: 0.5}", keepStrategy: true, wantPick: before},
		{name: "virtual nodes changed", params: "{strategy: ConsistentHash, strategyParameters: {virtualNodes: 11}, scorerThreshold: 0.5}"},
		{name: "strategy changed", params: "{strategy: LeastBusy, scorerThreshold: 0.5}", wantPick: "ep-1"},
	}
	prev := first
	for _, step := range steps {
		o := opts
		o.Previous = prev
		next, err := config.Load(doc(step.params), o)
		require.NoError(t, err, step.name)
		require.Equal(t, step.keepParent, next.Plugins["p"] == prev.Plugins["p"], "%s: parent kept", step.name)
		require.Equal(t, step.keepStrategy, next.Plugins["p/strategy"] == prev.Plugins["p/strategy"], "%s: strategy kept", step.name)
		require.Equal(t, step.keepStrategy, slices.Contains(next.Kept, "p/strategy"), step.name)
		if step.wantPick != "" {
			require.Equal(t, step.wantPick, pick(next), step.name)
		}
		prev.Release(next)
		prev = next
	}
	// The serving strategy is least-busy, and reads the in-flight counts
	// that were there before the reloads.
	require.Equal(t, "least-busy-picker", typeOf(prev, "p/strategy"))
	require.NotSame(t, ringed, prev.Plugins["p/strategy"])
	loads[1].InFlightN.Store(9)
	require.Equal(t, "ep-2", pick(prev), "the new strategy reads the live in-flight counts")
	prev.Close()
}

// The loader's no-override path: with no override and no strategy-picker,
// the loader builds exactly what it builds for a configuration (the
// golden TestNoOverrideBehavesAsBefore proves the behaviour); an empty
// override is no override.
func TestNoOverrideNoNotes(t *testing.T) {
	l, err := loadWith(t, string(configfiles.Default), config.Options{SelectionStrategy: ""})
	require.NoError(t, err)
	require.Empty(t, l.Notes)
	require.Equal(t, "max-score-picker", profilePicker(t, l).TypedName().Type)
	for name := range l.Plugins {
		require.NotContains(t, name, "/")
	}
	var cfg map[string]any
	out, err := config.MarshalYAML(l.Config)
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(out, &cfg))
	require.NotContains(t, string(out), "strategy")
}

// closingPicker is a round-robin-picker stand-in that records Close.
type closingPicker struct {
	name   string
	closed []scheduling.CloseInfo
}

func (c *closingPicker) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: "round-robin-picker", Name: c.name}
}
func (c *closingPicker) Pick(_ context.Context, _ *scheduling.Request, scored []scheduling.ScoredEndpoint) *scheduling.ProfileResult {
	return &scheduling.ProfileResult{Targets: []*scheduling.Endpoint{scored[0].Endpoint}}
}
func (c *closingPicker) Close(info scheduling.CloseInfo) { c.closed = append(c.closed, info) }

// Strategy instances follow the plugin lifecycle: a kept one is not
// closed, a replaced one is closed when the new configuration serves, and
// a failed load closes the ones it built.
func TestStrategyInstanceLifecycle(t *testing.T) {
	var built []*closingPicker
	reg := scheduling.NewRegistry()
	in := testRegistry()
	for _, typ := range in.Types() {
		if typ == "round-robin-picker" {
			continue
		}
		r, _ := in.Lookup(typ)
		reg.MustRegister(r)
	}
	reg.MustRegister(scheduling.Registration{Type: "round-robin-picker", Factory: scheduling.Typed(func() struct {
		MaxNumOfEndpoints int `json:"maxNumOfEndpoints"`
	} {
		return struct {
			MaxNumOfEndpoints int `json:"maxNumOfEndpoints"`
		}{1}
	}, func(name string, _ struct {
		MaxNumOfEndpoints int `json:"maxNumOfEndpoints"`
	}, _ scheduling.Handle) (*closingPicker, error) {
		c := &closingPicker{name: name}
		built = append(built, c)
		return c, nil
	})})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts := config.Options{Registry: reg, Context: ctx, Registerer: prometheus.NewRegistry(), Seed: 1}
	doc := func(strategy string) []byte {
		return []byte(strategyDoc("- name: p\n  type: strategy-picker\n  parameters: {strategy: " + strategy + "}"))
	}

	first, err := config.Load(doc("RoundRobin"), opts)
	require.NoError(t, err)
	require.Len(t, built, 1)
	o := opts
	o.Previous = first
	same, err := config.Load(doc("round_robin"), o)
	require.NoError(t, err)
	require.Len(t, built, 2, "a duplicate is built to compare parameters")
	require.Equal(t, []scheduling.CloseInfo{{Successor: true, TypeServes: true}}, built[1].closed, "the duplicate is closed at once")
	first.Release(same)
	require.Empty(t, built[0].closed, "the kept strategy instance is not closed")

	// A failed load closes the strategy instance it built, and not the
	// serving one.
	o.Previous = same
	_, err = config.Load(doc("RoundRobin, scorerThreshold: 5"), o)
	require.Error(t, err)
	require.Len(t, built, 3)
	require.Equal(t, []scheduling.CloseInfo{{Successor: true, TypeServes: true}}, built[2].closed, "a duplicate of the serving instance")
	_, err = config.Load(doc("RoundRobin, maxNumOfEndpoints: 2, scorerThreshold: 5"), o)
	require.Error(t, err)
	require.Len(t, built, 4)
	require.Equal(t, []scheduling.CloseInfo{{Successor: true, TypeServes: true}}, built[3].closed, "a new instance, closed with the failed load (the serving one of its name goes on)")
	require.Empty(t, built[0].closed)

	// Another strategy: the old instance is closed once the new
	// configuration serves, with no successor of its type.
	next, err := config.Load(doc("LeastBusy"), o)
	require.NoError(t, err)
	require.Empty(t, built[0].closed)
	same.Release(next)
	require.Equal(t, []scheduling.CloseInfo{{Successor: false}}, built[0].closed)
	next.Close()
	require.Len(t, built[0].closed, 1, "closed once")
}

// consumingPicker stands in for a strategy that reads per-request data
// (the prefix producer's matches) and names its default producer.
type consumingPicker struct{ stubEngineLoad }

func (c *consumingPicker) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: "least-cost-picker", Name: c.name}
}
func (c *consumingPicker) Consumes() []string { return []string{scheduling.PrefixMatchKey.Name()} }
func (c *consumingPicker) DefaultProducer(string) (string, []byte, bool) {
	return "approx-prefix-cache-producer", nil, true
}

// The producers a strategy put in by the override needs are added, as
// for any configured consumer.
func TestOverrideAddsTheProducersItsStrategyNeeds(t *testing.T) {
	reg := testRegistry("least-cost-picker")
	reg.MustRegister(scheduling.Registration{Type: "least-cost-picker", Factory: scheduling.Typed(func() stubEngineLoadParams {
		return stubEngineLoadParams{MaxNumOfEndpoints: 1, BaseStrategy: strategies.RoundRobin}
	}, func(name string, _ stubEngineLoadParams, _ scheduling.Handle) (*consumingPicker, error) {
		return &consumingPicker{stubEngineLoad{name: name}}, nil
	})})
	doc := header + "plugins:\n- type: queue-scorer\n- type: max-score-picker\n"
	l, err := loadWith(t, doc, config.Options{Registry: reg})
	require.NoError(t, err)
	require.NotContains(t, l.Plugins, "approx-prefix-cache-producer")
	l, err = loadWith(t, doc, config.Options{Registry: reg, SelectionStrategy: "least_cost"})
	require.NoError(t, err)
	require.Equal(t, "least-cost-picker", typeOf(l, "strategy-picker/strategy"))
	require.Contains(t, l.Plugins, "approx-prefix-cache-producer")
}
