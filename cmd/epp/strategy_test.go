package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/switchyard-ai/switchyard/pkg/scheduling/strategies"
)

const validNames = "valid: RoundRobin, WeightedRoundRobin, LeastLatency, Random, ConsistentHash, PrefixAwareHash, EngineLoad, LeastBusy, LeastCost"

// strategyConfig writes a configuration whose profile's picker is the
// strategy-picker "p", with the given parameters (YAML flow map, or "").
func strategyConfig(t *testing.T, params string) string {
	t.Helper()
	doc := "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: queue-scorer\n- name: p\n  type: strategy-picker\n"
	if params != "" {
		doc += "  parameters: " + params + "\n"
	}
	doc += "schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: queue-scorer\n  - pluginRef: p\n"
	path := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(path, []byte(doc), 0o600))
	return path
}

// effective runs `epp validate -o yaml` and returns the effective
// configuration's plugins by name (their parameters) and the stderr.
func effective(t *testing.T, args ...string) (map[string]map[string]any, string) {
	t.Helper()
	code, stdout, stderr := runEPP(append([]string{"validate", "-o", "yaml"}, args...)...)
	require.Equal(t, 0, code, stderr)
	var cfg struct {
		Plugins []struct {
			Name       string         `json:"name"`
			Parameters map[string]any `json:"parameters"`
		} `json:"plugins"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(stdout), &cfg))
	out := map[string]map[string]any{}
	for _, p := range cfg.Plugins {
		out[p.Name] = p.Parameters
	}
	return out, stderr
}

// TestC04_SelectionStrategyPrecedence: --selection-strategy beats
// SWITCHYARD_SELECTION_STRATEGY, which beats the configuration's strategy
// parameter, which beats the default RoundRobin; names are case-insensitive
// in PascalCase, snake_case or kebab-case. Checked through `epp validate`,
// which loads as the server does.
func TestC04_SelectionStrategyPrecedence(t *testing.T) {
	noStrategy := strategyConfig(t, "")
	fileSays := strategyConfig(t, "{strategy: least_busy}")
	tests := []struct {
		name, file, env string
		flag            []string
		want            string
	}{
		{name: "default", file: noStrategy, want: "RoundRobin"},
		{name: "file", file: fileSays, want: "LeastBusy"},
		{name: "env beats file", file: fileSays, env: "RANDOM", want: "Random"},
		{name: "env without a file strategy", file: noStrategy, env: "weighted-round-robin", want: "WeightedRoundRobin"},
		{name: "flag beats env and file", file: fileSays, env: "random", flag: []string{"--selection-strategy", "consistent_hash"}, want: "ConsistentHash"},
		{name: "flag beats file", file: fileSays, flag: []string{"--selection-strategy=LeastLatency"}, want: "LeastLatency"},
		{name: "empty env is no override", file: fileSays, env: " ", want: "LeastBusy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(strategies.EnvVar, tt.env)
			plugins, stderr := effective(t, append(tt.flag, tt.file)...)
			require.Equal(t, tt.want, plugins["p"]["strategy"], stderr)
			if tt.want != "LeastBusy" && tt.file == fileSays {
				require.Contains(t, stderr, "note: "+`plugins[1] "p" (strategy-picker): strategy `+tt.want)
			}
		})
	}

	// A GIE configuration (no strategy-picker): the flag puts a
	// strategy-picker in place of the profile's picker, and says so.
	t.Setenv(strategies.EnvVar, "")
	plugins, stderr := effective(t, "--selection-strategy", "least-busy", defaultConfig)
	require.Equal(t, "LeastBusy", plugins["strategy-picker"]["strategy"])
	require.Contains(t, stderr, `note: schedulingProfiles[0] "default": its picker max-score-picker is replaced by the strategy-picker "strategy-picker" with strategy LeastBusy`)
	plugins, stderr = effective(t, defaultConfig)
	require.NotContains(t, plugins, "strategy-picker")
	require.NotContains(t, stderr, "note:")
}

// An invalid name in the flag or the environment stops `epp serve`,
// `epp demo` and `epp validate` before anything starts, with a non-zero
// exit code and the list of valid names.
func TestC04_InvalidSelectionStrategyFailsStartup(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	tests := []struct {
		name, env string
		args      []string
		want      string
	}{
		{name: "serve flag", args: []string{"serve", "--endpoints-file", "e.yaml", "--selection-strategy", "bogus"}, want: `epp serve: --selection-strategy: unknown strategy "bogus"; ` + validNames},
		{name: "serve env", env: "fastest", args: []string{"serve", "--endpoints-file", "e.yaml"}, want: `epp serve: SWITCHYARD_SELECTION_STRATEGY: unknown strategy "fastest"; ` + validNames},
		{name: "flags only (GIE's manifests)", env: "bogus", args: []string{"--endpoints-file", "e.yaml", "--grpc-port", "0"}, want: `SWITCHYARD_SELECTION_STRATEGY: unknown strategy "bogus"`},
		{name: "demo flag", args: []string{"demo", "--selection-strategy", "least busy"}, want: `epp demo: --selection-strategy: unknown strategy "least busy"; ` + validNames},
		{name: "demo env", env: "nope", args: []string{"demo"}, want: `epp demo: SWITCHYARD_SELECTION_STRATEGY: unknown strategy "nope"; ` + validNames},
		{name: "validate flag", args: []string{"validate", "--selection-strategy", "x", defaultConfig}, want: `epp validate: --selection-strategy: unknown strategy "x"; ` + validNames},
		{name: "validate env", env: "x", args: []string{"validate", defaultConfig}, want: `epp validate: SWITCHYARD_SELECTION_STRATEGY: unknown strategy "x"; ` + validNames},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(strategies.EnvVar, tt.env)
			code, stdout, stderr := runEPP(tt.args...)
			require.NotZero(t, code)
			require.Equal(t, 2, code, "a usage error")
			require.Contains(t, stderr, tt.want, "stdout:\n%s", stdout)
		})
	}
	// The flag wins: the variable is not read.
	t.Setenv(strategies.EnvVar, "bogus")
	code, _, stderr := runEPP("serve", "--endpoints-file", "e.yaml", "--selection-strategy", "round_robin", "--grpc-port", "-1")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "--grpc-port: must be 0..65535, got -1")
	require.NotContains(t, stderr, "unknown strategy")
}

// The resolved strategy reaches the server's configuration (and so every
// load and reload), canonical.
func TestServeSelectionStrategy(t *testing.T) {
	config := func(args ...string) string {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		var f serveFlags
		f.register(fs)
		require.NoError(t, fs.Parse(append([]string{"--endpoints-file", "e.yaml"}, args...)))
		cfg, err := f.serverConfig(fs, logr.Discard())
		require.NoError(t, err)
		return cfg.SelectionStrategy
	}
	t.Setenv(strategies.EnvVar, "")
	require.Equal(t, "", config())
	require.Equal(t, "LeastBusy", config("--selection-strategy", "least-busy"))
	t.Setenv(strategies.EnvVar, "engine_load")
	require.Equal(t, "EngineLoad", config())
	require.Equal(t, "Random", config("--selection-strategy", "random"))
	require.True(t, strings.Contains(selectionStrategyUsage, strategies.EnvVar))
}
