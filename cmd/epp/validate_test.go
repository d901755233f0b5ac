package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/config"
)

const defaultConfig = "../../config/default.yaml"

func runEPP(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout string // exact; "-" means empty
		// wantStdoutPrefix, when set, must start stdout.
		wantStdoutPrefix string
		wantStderr       string // substring
	}{
		{name: "default is valid", args: []string{"validate", defaultConfig}, wantCode: 0, wantStdout: defaultConfig + ": OK\n"},
		{
			name: "broken file lists every error with its path", args: []string{"validate", "testdata/broken.yaml"}, wantCode: 1,
			wantStdout: `testdata/broken.yaml: 8 error(s):
  schedulingProfiles[0]: unknown field "typo"
  plugins[0] "queue-scorer" (queue-scorer): parameters: unknown field "threshhold"
  plugins[1] "kv-cache-utilisation-scorer" (kv-cache-utilisation-scorer): unknown plugin type "kv-cache-utilisation-scorer": Switchyard does not have it (closest known types: kv-cache-utilization-scorer)
  plugins[2] "picker-a" (max-score-picker): parameters: maxNumOfEndpoints: expected an integer, got string
  schedulingProfiles[0].plugins[0].weight: must be >= 0, got -2
  schedulingProfiles[0].plugins[1].pluginRef: "prefix" is not defined in plugins
  schedulingProfiles[0].plugins[3].pluginRef: plugins[4] "weighted-random-picker" (weighted-random-picker) is a second picker in profile "default" (the first is "picker-b"); a profile has exactly one picker
  schedulingProfiles[0].plugins[4].pluginRef: "pickr-b" is not defined (did you mean "picker-b"?)
`,
		},
		{
			name: "one bad file fails the run, the good one still says OK", args: []string{"validate", defaultConfig, "testdata/broken.yaml"}, wantCode: 1,
			wantStdoutPrefix: defaultConfig + ": OK\ntestdata/broken.yaml: 8 error(s):\n",
		},
		{name: "flags may follow the files", args: []string{"validate", defaultConfig, "-o", "yaml"}, wantCode: 0, wantStdoutPrefix: "# " + defaultConfig + "\napiVersion: "},
		{
			name: "with -o, errors go to stderr and stdout holds only configurations", args: []string{"validate", "-o", "yaml", "testdata/broken.yaml"}, wantCode: 1,
			wantStdout: "-", wantStderr: "testdata/broken.yaml: 8 error(s):",
		},
		{name: "missing file", args: []string{"validate", "testdata/nope.yaml"}, wantCode: 1, wantStdout: "testdata/nope.yaml: read configuration: open testdata/nope.yaml: no such file or directory\n"},
		{name: "no file is a usage error", args: []string{"validate"}, wantCode: 2, wantStderr: "no file given"},
		{name: "bad output format", args: []string{"validate", "-o", "toml", defaultConfig}, wantCode: 2, wantStderr: `-o must be yaml or json, got "toml"`},
		{name: "unknown flag", args: []string{"validate", "-x", defaultConfig}, wantCode: 2, wantStderr: "flag provided but not defined: -x"},
		{name: "unknown command", args: []string{"serve-me"}, wantCode: 2, wantStderr: `unknown command "serve-me"`},
		{name: "no command", args: nil, wantCode: 2, wantStderr: "Usage:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runEPP(tt.args...)
			require.Equal(t, tt.wantCode, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
			if tt.wantStdout == "-" {
				require.Empty(t, stdout)
			} else if tt.wantStdout != "" {
				if diff := cmp.Diff(tt.wantStdout, stdout); diff != "" {
					t.Errorf("stdout (-want +got):\n%s", diff)
				}
			}
			require.True(t, strings.HasPrefix(stdout, tt.wantStdoutPrefix), "stdout:\n%s", stdout)
			require.Contains(t, stderr, tt.wantStderr)
		})
	}
}

// TestValidateEffectiveConfigRoundTrips checks that -o yaml prints every
// default filled in, and that the printed configuration is itself valid and
// prints the same again.
func TestValidateEffectiveConfigRoundTrips(t *testing.T) {
	code, first, stderr := runEPP("validate", "-o", "yaml", defaultConfig)
	require.Equal(t, 0, code, stderr)
	for _, want := range []string{
		"type: approx-prefix-cache-producer", // auto-created for the prefix scorer
		"type: utilization-detector",         // default saturation detector
		"type: openai-parser",                // default parser
		"lruCapacityPerServer: 31250",        // a plugin default
		"queueDepthThreshold: 5",
	} {
		require.Contains(t, first, want)
	}
	path := filepath.Join(t.TempDir(), "effective.yaml")
	body := first[strings.Index(first, "\n")+1:] // drop the "# file: OK" line
	// Keys come in schema order, as people write the file.
	require.True(t, strings.HasPrefix(body, "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n"), body)
	require.NoError(t, os.WriteFile(path, []byte(body), 0o644))
	code, second, stderr := runEPP("validate", "-o", "yaml", path)
	require.Equal(t, 0, code, stderr)
	second = second[strings.Index(second, "\n")+1:]
	if diff := cmp.Diff(body, second); diff != "" {
		t.Errorf("effective configuration is not stable (-first +second):\n%s", diff)
	}
	code, js, _ := runEPP("validate", "-o", "json", defaultConfig)
	require.Equal(t, 0, code)
	var one config.EndpointPickerConfig
	require.NoError(t, json.Unmarshal([]byte(js), &one))
	require.Equal(t, "EndpointPickerConfig", one.Kind)
	// Several files: one JSON object keyed by file name.
	code, js, _ = runEPP("validate", "-o", "json", defaultConfig, path)
	require.Equal(t, 0, code)
	var several map[string]config.EndpointPickerConfig
	require.NoError(t, json.Unmarshal([]byte(js), &several))
	require.Len(t, several, 2)
	require.Contains(t, several, path)
}

// `epp validate` applies the loader's bounds, with the same messages as
// start-up and reload.
func TestValidateRefusesOversizedConfigs(t *testing.T) {
	dir := t.TempDir()
	const header = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"
	big := header + "# " + strings.Repeat("x", config.DefaultMaxConfigBytes) + "\n"
	bigFile := filepath.Join(dir, "big.yaml")
	require.NoError(t, os.WriteFile(bigFile, []byte(big), 0o600))
	var many strings.Builder
	many.WriteString(header + "plugins:\n")
	for i := range config.DefaultMaxPlugins + 1 {
		fmt.Fprintf(&many, "- {type: queue-scorer, name: q%d}\n", i)
	}
	manyFile := filepath.Join(dir, "many.yaml")
	require.NoError(t, os.WriteFile(manyFile, []byte(many.String()), 0o600))

	code, stdout, _ := runEPP("validate", bigFile, manyFile, defaultConfig)
	require.Equal(t, 1, code)
	want := fmt.Sprintf("%s: 1 error(s):\n  the document is %d bytes, more than the limit of 1048576 bytes\n", bigFile, len(big)) +
		manyFile + ": 1 error(s):\n  plugins: 513 instances exceed the limit of 512\n" +
		defaultConfig + ": OK\n"
	if diff := cmp.Diff(want, stdout); diff != "" {
		t.Errorf("stdout (-want +got):\n%s", diff)
	}
}

// The selection strategies' warnings from the guide (issue 10 item 7):
// PrefixAwareHash with prefix routing disabled, EngineLoad without engine
// metrics, LeastCost with fewer than two priced replicas (C-26).
func TestValidateStrategyWarnings(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	const header = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"
	prefixOff := write("prefix-off.yaml", header+`plugins:
- type: prefix-aware-hash-picker
  parameters: {enabled: false}
schedulingProfiles:
- name: default
  plugins: [{pluginRef: prefix-aware-hash-picker}]
`)
	engineNoMetrics := write("engine.yaml", header+`plugins:
- type: engine-load-picker
schedulingProfiles:
- name: default
  plugins: [{pluginRef: engine-load-picker}]
dataLayer:
  sources: []
`)
	leastCost := write("cost.yaml", header+`plugins:
- type: least-cost-picker
schedulingProfiles:
- name: default
  plugins: [{pluginRef: least-cost-picker}]
`)
	endpoints := write("endpoints.yaml", `endpoints:
- {name: a, address: 127.10.0.1, port: 8000, models: [{name: m, pricing: {input: 1, output: 2}}]}
- {name: b, address: 127.10.0.2, port: 8000, models: [{name: m}]}
`)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"prefix routing disabled", []string{"validate", prefixOff}, `prefix-aware-hash-picker "prefix-aware-hash-picker": prefix routing is disabled`},
		{"engine load without metrics", []string{"validate", engineNoMetrics}, `engine-load-picker "engine-load-picker" reads waiting_requests and kv_cache_usage from scraped engine metrics, but the configuration scrapes none`},
		{"least cost with one priced replica", []string{"validate", "--endpoints-file", endpoints, leastCost}, `least-cost-picker: model "m" is served by 2 endpoints but only 1 are priced`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runEPP(tc.args...)
			require.Equal(t, 0, code, stderr)
			require.Contains(t, stdout, ": OK")
			require.Contains(t, stderr, "warning: ")
			require.Contains(t, stderr, tc.want)
		})
	}
	// Without the endpoints file there is nothing to check prices against.
	_, _, stderr := runEPP("validate", leastCost)
	require.NotContains(t, stderr, "priced")
}

// TestValidateScrapeInterval: engine-load-picker's scrapeInterval
// defaults to the interval the server scrapes at (--refresh-metrics-interval,
// which epp validate takes as epp serve does), and a configured value that
// differs from it is a warning.
func TestValidateScrapeInterval(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	const header = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"
	set := write("set.yaml", header+`plugins:
- type: engine-load-picker
  parameters: {scrapeInterval: 100ms}
schedulingProfiles:
- name: default
  plugins: [{pluginRef: engine-load-picker}]
`)
	unset := write("unset.yaml", header+`plugins:
- type: engine-load-picker
schedulingProfiles:
- name: default
  plugins: [{pluginRef: engine-load-picker}]
`)
	const warning = `plugins[0] "engine-load-picker" (engine-load-picker): scrapeInterval 100ms differs from the EPP's metrics scrape interval 50ms (--refresh-metrics-interval): metrics count as fresh for 3 × 100ms = 300ms, not 3 scrapes`
	code, _, stderr := runEPP("validate", set)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stderr, "warning: "+warning)
	code, _, stderr = runEPP("validate", "--refresh-metrics-interval", "100ms", set)
	require.Equal(t, 0, code, stderr)
	require.NotContains(t, stderr, "scrapeInterval", "the same interval as the server's")
	code, _, stderr = runEPP("validate", unset)
	require.Equal(t, 0, code, stderr)
	require.NotContains(t, stderr, "scrapeInterval", "left out: it follows the server's")
	code, stdout, stderr := runEPP("validate", "-o", "json", "--refresh-metrics-interval", "200ms", unset)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, `"scrapeInterval": "200ms"`, "the default derives from the server's interval")
	code, _, stderr = runEPP("validate", "--refresh-metrics-interval", "0s", unset)
	require.Equal(t, 2, code)
	require.Contains(t, stderr, "--refresh-metrics-interval must be positive")
}

// C-06: a configuration is checked before it is applied: `epp validate`
// loads it with the server's own loader, registry and bounds, so a file it
// accepts is one the server (start-up or hot reload) accepts, and one it
// refuses is refused by the server too, with the same field paths.
func TestC06_ValidateChecksBeforeApplying(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	require.NoError(t, os.WriteFile(good, []byte(`apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: strategy-picker
  parameters: {strategy: prefix_aware_hash, strategyParameters: {loadFactorEpsilon: 0.5}}
schedulingProfiles:
- name: default
  plugins: [{pluginRef: strategy-picker}]
`), 0o600))
	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte(`apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: strategy-picker
  parameters: {strategy: PrefixAwareHash, strategyParameters: {virtualNodes: 0}}
schedulingProfiles:
- name: default
  plugins: [{pluginRef: strategy-picker}]
`), 0o600))
	code, stdout, _ := runEPP("validate", good)
	require.Equal(t, 0, code)
	require.Equal(t, good+": OK\n", stdout)
	code, stdout, _ = runEPP("validate", bad)
	require.Equal(t, 1, code)
	require.Contains(t, stdout, `plugins[0] "strategy-picker" (strategy-picker): parameters: strategyParameters: virtualNodes: must be 1..1000, got 0`)
	// The server refuses the same file at start-up, with the same message.
	var out, errOut bytes.Buffer
	code = run([]string{"--endpoints-file", "testdata/no-such-file.yaml", "--config-file", bad, "--grpc-port", "0", "--grpc-health-port", "0", "--metrics-port", "0"}, &out, &errOut)
	require.Equal(t, 1, code)
	require.Contains(t, errOut.String(), "virtualNodes: must be 1..1000, got 0")
}
