package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// Flag errors are usage errors (exit 2) that say what to do.
func TestServeFlagErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no endpoint source", nil, "no endpoint source: give --endpoints-file"},
		{"kubernetes mode", []string{"--pool-name", "p", "--pool-namespace", "default"}, "Kubernetes mode (--pool-name, --endpoint-selector) is not available"},
		{"both configs", []string{"--endpoints-file", "e.yaml", "--config-file", "a", "--config-text", "b"}, "--config-file and --config-text are mutually exclusive"},
		{"bad port", []string{"--endpoints-file", "e.yaml", "--grpc-port", "70000"}, "--grpc-port: must be 0..65535, got 70000"},
		{"bad encoder", []string{"--endpoints-file", "e.yaml", "--zap-encoder", "xml"}, "--zap-encoder: want json or console"},
		{"unknown flag", []string{"--no-such-flag"}, "flag provided but not defined: -no-such-flag"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			args := append([]string{"serve"}, tc.args...)
			require.Equal(t, 2, run(args, &out, &errOut))
			require.Contains(t, errOut.String(), tc.want)
		})
	}
}

// A configuration or endpoints file that cannot load fails start-up with
// exit code 1 and the reason; GIE's chart flags are accepted.
func TestServeStartupErrors(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run([]string{"--endpoints-file", "testdata/no-such-file.yaml", "--grpc-port", "0", "--grpc-health-port", "0", "--metrics-port", "0",
		"--zap-encoder", "json", "--tracing=false", "-v", "1", "--pool-group", "inference.networking.k8s.io",
		"--kv-cache-usage-percentage-metric", "sglang:token_usage"}, &out, &errOut)
	require.Equal(t, 1, code)
	require.Contains(t, errOut.String(), "no-such-file.yaml")
	require.Contains(t, errOut.String(), "Deprecated flag ignored")

	errOut.Reset()
	code = run([]string{"--endpoints-file", "testdata/no-such-file.yaml", "--config-file", "testdata/broken.yaml", "--grpc-port", "0", "--grpc-health-port", "0", "--metrics-port", "0"}, &out, &errOut)
	require.Equal(t, 1, code)
	require.Contains(t, errOut.String(), "unknown plugin type")
}
