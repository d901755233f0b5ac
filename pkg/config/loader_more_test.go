package config_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/config"
)

// TestLoadEdgeCases covers inputs a review found mishandled: null sections,
// duplicate keys, several documents, non-finite numbers, flow control
// without its gate, and which parameters an auto-created producer gets.
func TestLoadEdgeCases(t *testing.T) {
	tests := []struct {
		name         string
		doc          string
		wantErrs     []string
		wantWarnings []string
		check        func(t *testing.T, l *config.Loaded)
	}{
		{
			name: "a null dataLayer is the same as none: the default metrics source",
			doc:  header + "plugins:\n- type: queue-scorer\ndataLayer:\n",
			check: func(t *testing.T, l *config.Loaded) {
				require.Len(t, l.DataSources, 1)
				require.Equal(t, "metrics-data-source", l.DataSources[0].Source.TypedName().Name)
			},
		},
		{
			name:         "an empty dataLayer disables metrics, with a warning",
			doc:          header + "plugins:\n- type: queue-scorer\ndataLayer:\n  sources: []\n",
			wantWarnings: []string{"dataLayer: no sources, so no model-server metrics are collected: scorers and detectors that read queue, KV cache or LoRA metrics see none (omit dataLayer to get the default metrics source)"},
		},
		{
			name:     "a key given twice is an error",
			doc:      header + "plugins:\n- type: queue-scorer\nplugins:\n- type: kv-cache-utilization-scorer\n",
			wantErrs: []string{`not valid YAML: line 5: mapping key "plugins" already defined at line 3`},
		},
		{
			name:     "several documents in one file",
			doc:      header + "plugins:\n- type: queue-scorer\n---\n" + header + "plugins:\n- type: bogus\n",
			wantErrs: []string{"the file holds 2 YAML documents; an EndpointPickerConfig file holds exactly one"},
		},
		{
			name:     "a NaN weight",
			doc:      header + "plugins:\n- type: queue-scorer\nschedulingProfiles:\n- name: p\n  plugins:\n  - {pluginRef: queue-scorer, weight: .nan}\n",
			wantErrs: []string{"not valid YAML: a number is .nan or .inf; every number must be finite"},
		},
		{
			name: "flowControl without its gate is checked for syntax only, as GIE ignores it",
			doc: header + "plugins:\n- type: queue-scorer\nflowControl:\n  maxBytes: 1Gi\n  usageLimitPolicyPluginRef: static-usage-limit-policy\n" +
				"  priorityBands:\n  - {priority: 1, orderingPolicyRef: fcfs-ordering-policy, fairnessPolicyRef: round-robin-fairness-policy}\n",
			wantWarnings: []string{"flowControl: ignored because the flowControl feature gate is off (as in GIE)"},
		},
		{
			name: "two prefix scorers: the producer takes the last one's parameters, as in GIE",
			doc: header + "plugins:\n- {name: p1, type: prefix-cache-scorer, parameters: {blockSizeTokens: 8}}\n- {name: p2, type: prefix-cache-scorer, parameters: {blockSizeTokens: 32}}\n" +
				"schedulingProfiles:\n- name: default\n  plugins: [{pluginRef: p1}, {pluginRef: p2}]\n",
			wantWarnings: []string{`plugins[0] "p1" (prefix-cache-scorer): its parameters for the approx-prefix-cache-producer it needs are ignored: plugins[1] "p2" (prefix-cache-scorer) was configured later and its parameters are used`},
			check: func(t *testing.T, l *config.Loaded) {
				for _, p := range l.Config.Plugins {
					if p.Type == "approx-prefix-cache-producer" {
						require.Contains(t, string(p.Parameters), `"blockSizeTokens":32`)
						return
					}
				}
				t.Fatal("no producer was added")
			},
		},
		{
			name:     "a configured producer that fails gives one error, not a follow-on for its consumer",
			doc:      header + "plugins:\n- type: approx-prefix-cache-producer\n  parameters: {lruCapacityPerServer: 0}\n- type: prefix-cache-scorer\n",
			wantErrs: []string{`plugins[0] "approx-prefix-cache-producer" (approx-prefix-cache-producer): parameters: lruCapacityPerServer: must be > 0, got 0`},
		},
		{
			name:     "a file with only comments is empty",
			doc:      "# nothing here\n",
			wantErrs: []string{"the configuration is empty"},
		},
		{
			name: "a consumer of a failed producer-owner gets no follow-on error",
			doc: header + "plugins:\n- type: prefix-cache-affinity-filter\n- {type: prefix-cache-scorer, parameters: {lruCapacityPerServer: -1}}\n" +
				"schedulingProfiles:\n- name: default\n  plugins: [{pluginRef: prefix-cache-affinity-filter}, {pluginRef: prefix-cache-scorer}]\n",
			wantErrs: []string{`plugins[1] "prefix-cache-scorer" (prefix-cache-scorer): parameters: lruCapacityPerServer: must be > 0, got -1`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			loaded, err := load(t, tt.doc)
			if tt.wantErrs != nil {
				require.Error(t, err)
				if diff := cmp.Diff(tt.wantErrs, errorStrings(t, err)); diff != "" {
					t.Errorf("errors (-want +got):\n%s", diff)
				}
				return
			}
			require.NoError(t, err)
			if diff := cmp.Diff(tt.wantWarnings, loaded.Warnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
			if tt.check != nil {
				tt.check(t, loaded)
			}
		})
	}
}

// TestDecoderKnowsEveryField keeps the decoder's key lists in step with the
// Go types: every json field of the schema must load without an
// "unknown field" error.
func TestDecoderKnowsEveryField(t *testing.T) {
	var walk func(path string, typ reflect.Type)
	var keys []string
	walk = func(path string, typ reflect.Type) {
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct {
			return
		}
		for i := range typ.NumField() {
			f := typ.Field(i)
			name := strings.Split(f.Tag.Get("json"), ",")[0]
			if name == "" || name == "-" {
				continue
			}
			keys = append(keys, path+name)
			if f.Type.String() != "json.RawMessage" {
				walk(path+name+".", f.Type)
			}
		}
	}
	walk("", reflect.TypeOf(config.EndpointPickerConfig{}))
	require.Greater(t, len(keys), 25)
	// A document that sets every field once, built from the paths.
	doc := header + `featureGates: [dataLayer]
plugins:
- name: q
  type: queue-scorer
  parameters: {}
- type: metrics-data-source
- type: core-metrics-extractor
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: q
    weight: 1
saturationDetector:
  pluginRef: ""
  queueDepthThreshold: 5
  kvCacheUtilThreshold: 0.8
  metricsStalenessThreshold: 200ms
dataLayer:
  sources:
  - pluginRef: metrics-data-source
    extractors:
    - pluginRef: core-metrics-extractor
parser:
  pluginRef: openai-parser
flowControl:
  maxBytes: 1Gi
  maxRequests: 100
  defaultRequestTTL: 30s
  noEndpointRequestTTL: 1m
  defaultPriorityBand: {priority: 0, maxBytes: 1Gi, maxRequests: 10, fairnessPolicyRef: "", orderingPolicyRef: ""}
  defaultNegativePriorityBand: {priority: 0, maxBytes: 1Gi, maxRequests: 10, fairnessPolicyRef: "", orderingPolicyRef: ""}
  priorityBands: [{priority: 1, maxBytes: 1Gi, maxRequests: 10, fairnessPolicyRef: "", orderingPolicyRef: ""}]
  usageLimitPolicyPluginRef: ""
fallbackChains: {a: [b]}
prefixRouting:
  anthropicCacheControlInjection: true
availability: {shedding: false, smoothing: 0.3, ceilingHalfLifeMs: 600000, ceilingFloor: 8, exploreFloor: 0.25, fullAfterMs: 5000, roomAfterMs: 2000, queueFull: 1, freshnessWindowMs: 6000}
`
	for _, k := range keys {
		last := k[strings.LastIndex(k, ".")+1:]
		require.Contains(t, doc, last+":", "the test document lacks %s; add it", k)
	}
	_, err := load(t, doc)
	if err != nil {
		require.NotContains(t, err.Error(), "unknown field")
	}
}
