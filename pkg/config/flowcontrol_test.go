package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/config"
	"github.com/switchyard-ai/switchyard/pkg/plugins/flowcontrol/edf"
	fcroundrobin "github.com/switchyard-ai/switchyard/pkg/plugins/flowcontrol/roundrobin"
)

const fcHeader = header + "featureGates: [flowControl]\nplugins:\n- type: max-score-picker\n"

func TestFlowControlConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want []string
	}{
		{
			name: "values",
			doc: fcHeader + "flowControl:\n  maxBytes: -1\n  maxRequests: 1e30\n  defaultRequestTTL: -1s\n  noEndpointRequestTTL: later\n" +
				"  defaultPriorityBand: {maxBytes: 10Qi}\n  defaultNegativePriorityBand: {maxRequests: \"-3\"}\n" +
				"  priorityBands:\n  - {priority: 1}\n  - {priority: 1}\n",
			want: []string{
				`flowControl.maxBytes: must be >= 0, got -1`,
				`flowControl.maxRequests: 1e+30 is too large (at most 9223372036854775807)`,
				`flowControl.defaultRequestTTL: must be >= 0, got -1s`,
				`flowControl.noEndpointRequestTTL: invalid duration "later": use e.g. 60s`,
				`flowControl.defaultPriorityBand.maxBytes: invalid quantity "10Qi": use a Kubernetes quantity such as 10Gi or 5k`,
				`flowControl.defaultNegativePriorityBand.maxRequests: must be >= 0, got -3`,
				`flowControl.priorityBands[1].priority: duplicate priority 1 (also priorityBands[0])`,
			},
		},
		{
			name: "policy references",
			doc: fcHeader + "- {name: rr, type: round-robin-fairness-policy}\n" +
				"flowControl:\n  usageLimitPolicyPluginRef: rr\n  defaultPriorityBand: {fairnessPolicyRef: max-score-picker, orderingPolicyRef: rr}\n" +
				"  priorityBands:\n  - {priority: 2, fairnessPolicyRef: r, orderingPolicyRef: edf-ordering-policy}\n",
			want: []string{
				`flowControl.defaultPriorityBand.fairnessPolicyRef: plugins[0] "max-score-picker" (max-score-picker) is not a fairness policy (such as global-strict-fairness-policy or round-robin-fairness-policy)`,
				`flowControl.defaultPriorityBand.orderingPolicyRef: plugins[1] "rr" (round-robin-fairness-policy) is not an ordering policy (such as fcfs-ordering-policy, edf-ordering-policy or slo-deadline-ordering-policy)`,
				`flowControl.priorityBands[0].fairnessPolicyRef: "r" is not defined (did you mean "rr"?)`,
				`flowControl.priorityBands[0].orderingPolicyRef: "edf-ordering-policy" is not defined in plugins`,
				`flowControl.usageLimitPolicyPluginRef: plugins[1] "rr" (round-robin-fairness-policy) is not a usage-limit policy (such as static-usage-limit-policy)`,
			},
		},
		{
			name: "policy parameters are strict",
			doc: fcHeader + "- {type: static-usage-limit-policy, parameters: {threshold: 0}}\n- {type: slo-deadline-ordering-policy, parameters: {headers: [X-SLO]}}\n" +
				"- {name: s2, type: slo-deadline-ordering-policy, parameters: {extra: 1}}\n" +
				"- {name: e, type: edf-ordering-policy, parameters: {x: 1}}\n",
		},
		{
			name: "a default policy name taken by another type",
			doc:  header + "featureGates: [flowControl]\nplugins:\n- {name: fcfs-ordering-policy, type: max-score-picker}\n",
			want: []string{
				`flowControl.defaultPriorityBand.orderingPolicyRef: plugins[0] "fcfs-ordering-policy" (max-score-picker) is not an ordering policy (such as fcfs-ordering-policy, edf-ordering-policy or slo-deadline-ordering-policy)`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := load(t, tt.doc)
			require.Error(t, err)
			got := errorStrings(t, err)
			if tt.want == nil {
				// Parameter errors come from the plugins' own decoding:
				// check each names its instance and field.
				joined := strings.Join(got, "\n")
				require.Contains(t, joined, "threshold: must be in (0, 100], got 0")
				require.Contains(t, joined, `headers[0]: "X-SLO" is not a lower-case header name`)
				require.Contains(t, joined, `unknown field "extra"`)
				require.Contains(t, joined, `unknown field "x"`)
				return
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFlowControlDefaults checks the defaults of a gate without a section
// (GIE's system defaults) and that they show in the effective
// configuration.
func TestFlowControlDefaults(t *testing.T) {
	l, err := load(t, fcHeader)
	require.NoError(t, err)
	fc := l.FlowControl
	require.NotNil(t, fc)
	require.Zero(t, fc.MaxBytes)
	require.Zero(t, fc.MaxRequests)
	require.Zero(t, fc.DefaultRequestTTL)
	require.Zero(t, fc.NoEndpointRequestTTL)
	require.Nil(t, fc.DefaultNegativeBand, "sheddable requests are refused when saturated unless a negative band is configured")
	require.Equal(t, uint64(config.DefaultPriorityBandMaxBytes), fc.DefaultBand.MaxBytes)
	require.Equal(t, config.MaxPriorityBands, fc.MaxBands)
	out, err := config.MarshalYAML(l.Config)
	require.NoError(t, err)
	for _, want := range []string{
		"flowControl:\n  defaultRequestTTL: 0s\n  noEndpointRequestTTL: 0s\n  defaultPriorityBand:\n    priority: 0\n    maxBytes: 1G\n    fairnessPolicyRef: global-strict-fairness-policy\n    orderingPolicyRef: fcfs-ordering-policy\n  usageLimitPolicyPluginRef: static-usage-limit-policy\n",
		"  - name: static-usage-limit-policy\n    type: static-usage-limit-policy\n    parameters:\n      threshold: 1\n",
		"  - name: fcfs-ordering-policy\n    type: fcfs-ordering-policy\n",
	} {
		require.Contains(t, string(out), want)
	}
}

func TestFlowControlSettings(t *testing.T) {
	l, err := load(t, fcHeader+"- {name: rr, type: round-robin-fairness-policy}\n- {name: e, type: edf-ordering-policy}\n"+
		"flowControl:\n  maxBytes: 1Mi\n  maxRequests: 1k\n  defaultRequestTTL: 30s\n  noEndpointRequestTTL: 10m\n"+
		"  defaultNegativePriorityBand: {maxRequests: 5, maxBytes: \"0\"}\n"+
		"  priorityBands:\n  - {priority: -1, maxRequests: 7, fairnessPolicyRef: rr, orderingPolicyRef: e}\n  - {priority: 10, maxBytes: 2k}\n")
	require.NoError(t, err)
	fc := l.FlowControl
	require.Equal(t, uint64(1<<20), fc.MaxBytes)
	require.Equal(t, uint64(1000), fc.MaxRequests)
	require.Equal(t, 30*time.Second, fc.DefaultRequestTTL)
	require.Equal(t, 10*time.Minute, fc.NoEndpointRequestTTL)
	require.NotNil(t, fc.DefaultNegativeBand)
	require.Equal(t, uint64(5), fc.DefaultNegativeBand.MaxRequests)
	require.Equal(t, uint64(config.DefaultPriorityBandMaxBytes), fc.DefaultNegativeBand.MaxBytes, "0 means GIE's default, as in GIE")
	require.Len(t, fc.Bands, 2)
	require.Equal(t, -1, fc.Bands[0].Priority)
	require.Equal(t, uint64(7), fc.Bands[0].MaxRequests)
	require.IsType(t, &fcroundrobin.Policy{}, fc.Bands[0].Fairness)
	require.IsType(t, &edf.Policy{}, fc.Bands[0].Ordering)
	require.Equal(t, uint64(2000), fc.Bands[1].MaxBytes)
}

// TestFlowControlWithoutGate: as GIE, the section is ignored without the
// gate (after its syntax is checked), and no policy is instantiated.
func TestFlowControlWithoutGate(t *testing.T) {
	l, err := load(t, header+"plugins:\n- type: max-score-picker\nflowControl:\n  maxBytes: 1Gi\n  priorityBands:\n  - {priority: 1, fairnessPolicyRef: nowhere}\n")
	require.NoError(t, err)
	require.Nil(t, l.FlowControl)
	require.NotContains(t, l.Plugins, "fcfs-ordering-policy")
	require.Contains(t, l.Warnings, "flowControl: ignored because the flowControl feature gate is off (as in GIE)")
}
