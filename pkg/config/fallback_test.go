package config_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/config"
)

const fallbackBase = `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: max-score-picker
`

func TestFallbackChains_Decode(t *testing.T) {
	l, err := load(t, fallbackBase+`fallbackChains:
  llama-3.1-70b: [llama-3.1-8b, qwen-7b]
  qwen-7b: [llama-3.1-8b]
prefixRouting:
  anthropicCacheControlInjection: true
`)
	require.NoError(t, err)
	require.Equal(t, map[string][]string{"llama-3.1-70b": {"llama-3.1-8b", "qwen-7b"}, "qwen-7b": {"llama-3.1-8b"}}, l.Config.FallbackChains)
	require.True(t, l.Config.PrefixRouting.AnthropicCacheControlInjection)
	out, err := config.MarshalYAML(l.Config)
	require.NoError(t, err)
	require.Contains(t, string(out), "fallbackChains:\n  llama-3.1-70b:\n    - llama-3.1-8b\n    - qwen-7b\n")
	require.Contains(t, string(out), "prefixRouting:\n  anthropicCacheControlInjection: true\n")
	// Round trip: the rendered document loads to the same chains.
	l2, err := load(t, string(out))
	require.NoError(t, err)
	require.Equal(t, l.Config.FallbackChains, l2.Config.FallbackChains)

	l, err = load(t, fallbackBase)
	require.NoError(t, err)
	require.Nil(t, l.Config.FallbackChains)
	require.Nil(t, l.Config.PrefixRouting)
}

func TestFallbackChains_Validation(t *testing.T) {
	for _, tc := range []struct {
		name, doc string
		want      []string
	}{
		{"not an object", `fallbackChains: [a]`, []string{"fallbackChains: expected an object"}},
		{"self", `fallbackChains: {a: [a]}`, []string{`fallbackChains["a"][0]: a model cannot fall back to itself`}},
		{"empty chain", `fallbackChains: {a: []}`, []string{`fallbackChains["a"]: a chain needs at least one fallback model`}},
		{"null chain", `fallbackChains: {a: }`, []string{`fallbackChains["a"]: a chain needs at least one fallback model`}},
		{"empty name", `fallbackChains: {a: [b, ""]}`, []string{`fallbackChains["a"][1]: the model name must be non-empty`}},
		{"spaces", `fallbackChains: {a: [" b"]}`, []string{`fallbackChains["a"][0]: the model name " b" has surrounding spaces`}},
		{"number", `fallbackChains: {a: [3]}`, []string{`fallbackChains["a"][0]: expected a string`}},
		{"twice", `fallbackChains: {a: [b, b]}`, []string{`fallbackChains["a"][1]: "b" is named twice`}},
		{"cycle", `fallbackChains: {a: [b], b: [c], c: [a]}`, []string{
			`fallbackChains["a"]: the chains form a cycle: a -> b -> c -> a`,
			`fallbackChains["b"]: the chains form a cycle: b -> c -> a -> b`,
			`fallbackChains["c"]: the chains form a cycle: c -> a -> b -> c`,
		}},
		{"too long", `fallbackChains: {a: [b1, b2, b3, b4, b5, b6, b7, b8, b9]}`, []string{`fallbackChains["a"]: at most 8 fallback models, got 9`}},
		{"dotted model", `fallbackChains: {"m.1": [m.1]}`, []string{`fallbackChains["m.1"][0]: a model cannot fall back to itself`}},
		{"prefixRouting unknown", `prefixRouting: {anthropicCacheControl: true}`, []string{`prefixRouting: unknown field "anthropicCacheControl"`}},
		{"prefixRouting type", `prefixRouting: {anthropicCacheControlInjection: "yes"}`, []string{`prefixRouting.anthropicCacheControlInjection: expected a boolean, got a string`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(t, fallbackBase+tc.doc+"\n")
			require.Error(t, err)
			got := strings.Join(errorStrings(t, err), "\n")
			for _, w := range tc.want {
				require.Contains(t, got, w)
			}
		})
	}
}
