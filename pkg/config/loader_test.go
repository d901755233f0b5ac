package config_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	configfiles "github.com/switchyard-ai/switchyard/config"
	"github.com/switchyard-ai/switchyard/pkg/config"
	"github.com/switchyard-ai/switchyard/pkg/plugins"
)

func load(t *testing.T, doc string) (*config.Loaded, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return config.Load([]byte(doc), config.Options{Registry: plugins.InTree(), Context: ctx, Registerer: prometheus.NewRegistry(), Seed: 1})
}

func errorStrings(t *testing.T, err error) []string {
	t.Helper()
	var verr *config.ValidationError
	require.True(t, errors.As(err, &verr), "want *ValidationError, got %v", err)
	out := make([]string, len(verr.Errors))
	for i, e := range verr.Errors {
		out[i] = e.Error()
	}
	return out
}

type pluginSummary struct{ Name, Type string }

func summarize(cfg *config.EndpointPickerConfig) (plugins []pluginSummary, profiles map[string][]string) {
	for _, p := range cfg.Plugins {
		plugins = append(plugins, pluginSummary{p.Name, p.Type})
	}
	profiles = map[string][]string{}
	for _, prof := range cfg.SchedulingProfiles {
		for _, ref := range prof.Plugins {
			s := ref.PluginRef
			if ref.Weight != nil {
				s += "=" + strconv.FormatFloat(*ref.Weight, 'g', -1, 64)
			}
			profiles[prof.Name] = append(profiles[prof.Name], s)
		}
	}
	return plugins, profiles
}

const header = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"

func TestLoadDefaults(t *testing.T) {
	tests := []struct {
		name         string
		doc          string
		wantPlugins  []pluginSummary
		wantProfiles map[string][]string
		wantParser   string
		wantDetector string
		wantSources  int
		wantWarnings []string
	}{
		{
			name: "shipped default",
			doc:  string(configfiles.Default),
			wantPlugins: []pluginSummary{
				{"queue-scorer", "queue-scorer"},
				{"kv-cache-utilization-scorer", "kv-cache-utilization-scorer"},
				{"prefix-cache-scorer", "prefix-cache-scorer"},
				{"max-score-picker", "max-score-picker"},
				{"single-profile-handler", "single-profile-handler"},
				{"metrics-data-source", "metrics-data-source"},
				{"core-metrics-extractor", "core-metrics-extractor"},
				{"approx-prefix-cache-producer", "approx-prefix-cache-producer"},
				{"openai-parser", "openai-parser"},
				{"utilization-detector", "utilization-detector"},
			},
			wantProfiles: map[string][]string{"default": {"queue-scorer=2", "kv-cache-utilization-scorer=2", "prefix-cache-scorer=3", "max-score-picker"}},
			wantParser:   "openai-parser", wantDetector: "utilization-detector", wantSources: 1,
		},
		{
			name: "no profile: a default profile with every filter, scorer and picker, weight 1",
			doc:  header + "plugins:\n- type: queue-scorer\n- name: kv\n  type: kv-cache-utilization-scorer\n",
			wantPlugins: []pluginSummary{
				{"queue-scorer", "queue-scorer"}, {"kv", "kv-cache-utilization-scorer"},
				{"single-profile-handler", "single-profile-handler"}, {"max-score-picker", "max-score-picker"},
				{"openai-parser", "openai-parser"}, {"utilization-detector", "utilization-detector"},
				{"metrics-data-source", "metrics-data-source"}, {"core-metrics-extractor", "core-metrics-extractor"},
			},
			wantProfiles: map[string][]string{"default": {"queue-scorer=1", "kv=1", "max-score-picker"}},
			wantParser:   "openai-parser", wantDetector: "utilization-detector", wantSources: 1,
		},
		{
			name: "llm-d apiVersion, older data key, an existing picker is reused",
			doc: "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: queue-scorer\n- {name: pick, type: random-picker}\n- type: metrics-data-source\n- type: core-metrics-extractor\n" +
				"schedulingProfiles:\n- name: a\n  plugins:\n  - pluginRef: queue-scorer\n    weight: 0.5\n" +
				"data:\n  sources:\n  - pluginRef: metrics-data-source\n    extractors: [{pluginRef: core-metrics-extractor}]\n",
			wantPlugins: []pluginSummary{
				{"queue-scorer", "queue-scorer"}, {"pick", "random-picker"},
				{"metrics-data-source", "metrics-data-source"}, {"core-metrics-extractor", "core-metrics-extractor"},
				{"single-profile-handler", "single-profile-handler"},
				{"openai-parser", "openai-parser"}, {"utilization-detector", "utilization-detector"},
			},
			wantProfiles: map[string][]string{"a": {"queue-scorer=0.5", "pick"}},
			wantParser:   "openai-parser", wantDetector: "utilization-detector", wantSources: 1,
		},
		{
			name: "enableLegacyMetrics: no data layer; v1.3 inline saturation thresholds",
			doc: header + "featureGates: [enableLegacyMetrics]\nplugins:\n- type: queue-scorer\n" +
				"saturationDetector:\n  queueDepthThreshold: 8\n  kvCacheUtilThreshold: 0.9\n  metricsStalenessThreshold: 150ms\n",
			wantPlugins: []pluginSummary{
				{"queue-scorer", "queue-scorer"}, {"single-profile-handler", "single-profile-handler"},
				{"max-score-picker", "max-score-picker"}, {"openai-parser", "openai-parser"},
				{"utilization-detector", "utilization-detector"},
			},
			wantProfiles: map[string][]string{"default": {"queue-scorer=1", "max-score-picker"}},
			wantParser:   "openai-parser", wantDetector: "utilization-detector", wantSources: 0,
			wantWarnings: []string{"saturationDetector: the inline thresholds are GIE v1.3/v1.4 syntax; they now configure a utilization-detector plugin referenced by saturationDetector.pluginRef"},
		},
		{
			name: "a non-scheduling plugin in a profile is kept with a warning (GIE ignores it)",
			doc:  header + "plugins:\n- type: openai-parser\n- type: queue-scorer\nschedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: openai-parser\n  - pluginRef: queue-scorer\nparser:\n  pluginRef: openai-parser\n",
			wantPlugins: []pluginSummary{
				{"openai-parser", "openai-parser"}, {"queue-scorer", "queue-scorer"},
				{"single-profile-handler", "single-profile-handler"}, {"max-score-picker", "max-score-picker"},
				{"utilization-detector", "utilization-detector"},
				{"metrics-data-source", "metrics-data-source"}, {"core-metrics-extractor", "core-metrics-extractor"},
			},
			wantProfiles: map[string][]string{"default": {"openai-parser", "queue-scorer=1", "max-score-picker"}},
			wantParser:   "openai-parser", wantDetector: "utilization-detector", wantSources: 1,
			wantWarnings: []string{`schedulingProfiles[0].plugins[0].pluginRef: plugins[0] "openai-parser" (openai-parser) is not a filter, scorer or picker; it has no effect in a profile`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			loaded, err := load(t, tt.doc)
			require.NoError(t, err)
			gotPlugins, gotProfiles := summarize(loaded.Config)
			if diff := cmp.Diff(tt.wantPlugins, gotPlugins); diff != "" {
				t.Errorf("plugins (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantProfiles, gotProfiles); diff != "" {
				t.Errorf("profiles (-want +got):\n%s", diff)
			}
			require.NotNil(t, loaded.Parser)
			if got := loaded.Parser.TypedName().Name; got != tt.wantParser {
				t.Errorf("parser = %q, want %q", got, tt.wantParser)
			}
			require.NotNil(t, loaded.SaturationDetector)
			if got := loaded.SaturationDetector.TypedName().Name; got != tt.wantDetector {
				t.Errorf("saturation detector = %q, want %q", got, tt.wantDetector)
			}
			if got := len(loaded.DataSources); got != tt.wantSources {
				t.Errorf("data sources = %d, want %d", got, tt.wantSources)
			}
			if diff := cmp.Diff(tt.wantWarnings, loaded.Warnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
			require.NotNil(t, loaded.Scheduler)
		})
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want []string
	}{
		{
			name: "every problem of a broken file, each with its path",
			doc: header + `plugins:
- type: queue-scorer
- name: my-prefix
  type: prefix-cache-scorer
  parameters:
    blockSizeTokens: sixteen
- name: my-queue
  type: queue-scorer
  parameters:
    threshhold: 3
- type: max-score-picker
- type: random-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
    weight: -1
  - pluginRef: foo
  - pluginRef: max-score-picker
  - pluginRef: random-picker
  - pluginRef: my-queue
    weigth: 2
`,
			want: []string{
				`schedulingProfiles[0].plugins[4]: unknown field "weigth" (did you mean "weight"?)`,
				`plugins[1] "my-prefix" (prefix-cache-scorer): parameters: blockSizeTokens: expected an integer, got string`,
				`plugins[2] "my-queue" (queue-scorer): parameters: unknown field "threshhold"`,
				`schedulingProfiles[0].plugins[0].weight: must be >= 0, got -1`,
				`schedulingProfiles[0].plugins[1].pluginRef: "foo" is not defined in plugins`,
				`schedulingProfiles[0].plugins[3].pluginRef: plugins[4] "random-picker" (random-picker) is a second picker in profile "default" (the first is "max-score-picker"); a profile has exactly one picker`,
			},
		},
		{
			name: "unknown plugin type is named with the closest known types",
			doc:  header + "plugins:\n- type: queue-scorr\n- type: mock-metrics-source\n",
			want: []string{
				`plugins[0] "queue-scorr" (queue-scorr): unknown plugin type "queue-scorr": Switchyard does not have it (closest known types: queue-scorer)`,
				`plugins[1] "mock-metrics-source" (mock-metrics-source): unknown plugin type "mock-metrics-source": Switchyard does not have it`,
			},
		},
		{
			name: "header, gates and structure",
			doc:  "apiVersion: v1\nkind: Pod\nfeatureGates: [dataLayer, flowControll]\nplugins:\n- name: x\n- type: queue-scorer\n- type: queue-scorer\nschedulingProfiles: {}\nextra: 1\n",
			want: []string{
				`unknown field "extra"`,
				`schedulingProfiles: expected a list, got an object`,
				`apiVersion: unsupported "v1"; use "inference.networking.x-k8s.io/v1alpha1" or "llm-d.ai/v1alpha1"`,
				`kind: unsupported "Pod"; use "EndpointPickerConfig"`,
				`featureGates[1]: unknown feature gate "flowControll" (did you mean "flowControl"?)`,
				`plugins[0].type: missing; every plugin needs a type`,
				`plugins[2].name: duplicate plugin name "queue-scorer" (also plugins[1]); give each instance its own name`,
			},
		},
		{
			name: "profiles need a handler; references must have the right kind",
			doc: header + "plugins:\n- type: queue-scorer\n- type: max-score-picker\n- type: openai-parser\n" +
				"schedulingProfiles:\n- name: a\n  plugins: [{pluginRef: queue-scorer}]\n- name: a\n  plugins: [{pluginRef: queue-scorer}]\n" +
				"parser: {pluginRef: queue-scorer}\nsaturationDetector: {pluginRef: openai-parser}\ndataLayer:\n  sources: [{pluginRef: max-score-picker, extractors: [{pluginRef: nope}]}]\n",
			want: []string{
				`parser.pluginRef: plugins[0] "queue-scorer" (queue-scorer) is not a parser`,
				`saturationDetector.pluginRef: plugins[2] "openai-parser" (openai-parser) is not a saturation detector`,
				`dataLayer.sources[0].pluginRef: plugins[1] "max-score-picker" (max-score-picker) is not a data source`,
				`dataLayer.sources[0].extractors[0].pluginRef: "nope" is not defined in plugins`,
				`schedulingProfiles[1].name: duplicate profile name "a" (also schedulingProfiles[0])`,
				`schedulingProfiles: 2 profiles need a profile handler plugin, and none is configured`,
			},
		},
		{
			name: "single-profile-handler with two profiles; bad flowControl values under the gate",
			doc: header + "featureGates: [flowControl]\nplugins:\n- type: queue-scorer\n- type: single-profile-handler\n" +
				"schedulingProfiles:\n- name: a\n  plugins: [{pluginRef: queue-scorer}]\n- name: b\n  plugins: [{pluginRef: queue-scorer}]\n" +
				"flowControl:\n  maxBytes: 10Qi\n  defaultRequestTTL: soon\n  priorityBands:\n  - {priority: 1, orderingPolicyRef: fcfs-ordering-policy}\n  - {priority: 1}\n",
			want: []string{
				`flowControl.maxBytes: invalid quantity "10Qi": use a Kubernetes quantity such as 10Gi or 5k`,
				`flowControl.defaultRequestTTL: invalid duration "soon": use e.g. 60s`,
				`flowControl.priorityBands[1].priority: duplicate priority 1 (also priorityBands[0])`,
				`schedulingProfiles: plugins[1] "single-profile-handler" (single-profile-handler) runs exactly one profile, but 2 are configured; use a handler that supports several`,
			},
		},
		{
			name: "not YAML",
			doc:  "plugins: [\n",
			want: nil, // checked by prefix below
		},
		{
			name: "empty",
			doc:  "  \n",
			want: []string{"the configuration is empty"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := load(t, tt.doc)
			require.Error(t, err)
			got := errorStrings(t, err)
			if tt.want == nil {
				require.Len(t, got, 1)
				require.True(t, strings.HasPrefix(got[0], "not valid YAML: "), got[0])
				return
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLoadFileMissing(t *testing.T) {
	_, err := config.LoadFile("testdata/does-not-exist.yaml", config.Options{Registry: plugins.InTree()})
	require.ErrorContains(t, err, "read configuration:")
}
