package main

import (
	"bytes"
	"flag"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/stretchr/testify/require"
)

// Flag errors are usage errors (exit 2) that say what to do.
func TestServeFlagErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no endpoint source", nil, "no endpoint source: give --endpoints-file FILE (standalone mode), or --pool-name / --endpoint-selector (Kubernetes mode)"},
		{"no API server", []string{"--pool-name", "p", "--pool-namespace", "default"}, "Kubernetes mode needs an API server: give --kubeconfig, set $KUBECONFIG"},
		{"missing kubeconfig", []string{"--pool-name", "p", "--kubeconfig", "testdata/no-such-kubeconfig"}, "--kubeconfig testdata/no-such-kubeconfig:"},
		{"pool and selector", []string{"--pool-name", "p", "--endpoint-selector", "app=x"}, "--pool-name and --endpoint-selector are mutually exclusive"},
		{"file and selector", []string{"--endpoints-file", "e.yaml", "--endpoint-selector", "app=x"}, "--endpoints-file and --endpoint-selector are mutually exclusive"},
		{"leader election without kubernetes", []string{"--endpoints-file", "e.yaml", "--ha-enable-leader-election"}, "--ha-enable-leader-election needs Kubernetes mode"},
		{"kubeconfig without kubernetes", []string{"--endpoints-file", "e.yaml", "--kubeconfig", "k"}, "--kubeconfig needs Kubernetes mode"},
		{"target ports without selector", []string{"--endpoints-file", "e.yaml", "--endpoint-target-ports", "8000"}, "--endpoint-target-ports needs --endpoint-selector"},
		{"bad target port", []string{"--endpoint-selector", "app=x", "--endpoint-target-ports", "80x"}, `invalid value "80x" for flag -endpoint-target-ports: "80x" is not a port number`},
		{"bad selector", []string{"--endpoint-selector", "app in (", "--kubeconfig", "testdata/kubeconfig.yaml"}, "--endpoint-selector:"},
		{"selector without ports", []string{"--endpoint-selector", "app=x", "--kubeconfig", "testdata/kubeconfig.yaml"}, "--endpoint-target-ports: needed with --endpoint-selector"},
		{"port out of range", []string{"--endpoint-selector", "app=x", "--endpoint-target-ports", "8000,70000", "--kubeconfig", "testdata/kubeconfig.yaml"}, "--endpoint-target-ports[1]: 70000 is not a port (1..65535)"},
		{"alpha pool group", []string{"--pool-name", "p", "--pool-group", "inference.networking.x-k8s.io", "--kubeconfig", "testdata/kubeconfig.yaml"}, "migrate the pool"},
		{"lease timing", []string{"--pool-name", "p", "--ha-enable-leader-election", "--ha-lease-duration", "1s", "--kubeconfig", "testdata/kubeconfig.yaml"}, "need renew deadline (10s) < lease duration (1s)"},
		{"both configs", []string{"--endpoints-file", "e.yaml", "--config-file", "a", "--config-text", "b"}, "--config-file and --config-text are mutually exclusive"},
		{"bad port", []string{"--endpoints-file", "e.yaml", "--grpc-port", "70000"}, "--grpc-port: must be 0..65535, got 70000"},
		{"bad encoder", []string{"--endpoints-file", "e.yaml", "--zap-encoder", "xml"}, "--zap-encoder: want json or console"},
		{"unknown flag", []string{"--no-such-flag"}, "flag provided but not defined: -no-such-flag"},
		{"bind address with port", []string{"--endpoints-file", "e.yaml", "--metrics-bind-address", "127.0.0.1:9090"}, `--metrics-bind-address: "127.0.0.1:9090" is not an IP address`},
		{"bind address host name", []string{"--endpoints-file", "e.yaml", "--grpc-bind-address", "example.com"}, `--grpc-bind-address: "example.com" is not an IP address`},
		{"negative decision buffer", []string{"--endpoints-file", "e.yaml", "--decision-buffer-size", "-1"}, "--decision-buffer-size: must be in [0, 65536], got -1"},
		{"decision buffer too large", []string{"--endpoints-file", "e.yaml", "--decision-buffer-size", "65537"}, "--decision-buffer-size: must be in [0, 65536], got 65537"},
		{"decision endpoints zero", []string{"--endpoints-file", "e.yaml", "--decision-max-endpoints", "0"}, "--decision-max-endpoints: must be in [1, 1024], got 0"},
		{"pprof without auth", []string{"--endpoints-file", "e.yaml", "--enable-pprof"}, "--enable-pprof exposes heap, goroutine and CPU profiles and the command line: it needs --metrics-token-file"},
		{"token and API auth", []string{"--pool-name", "p", "--metrics-token-file", "t", "--kubeconfig", "testdata/kubeconfig.yaml"}, "--metrics-token-file and --metrics-endpoint-auth both guard the metrics port"},
		{"zero streams", []string{"--endpoints-file", "e.yaml", "--grpc-max-concurrent-streams", "0"}, "--grpc-max-concurrent-streams: must be 1..4294967295, got 0"},
		{"negative idle", []string{"--endpoints-file", "e.yaml", "--grpc-max-connection-idle", "-1s"}, "--grpc-max-connection-idle: must be >= 0 (0: never), got -1s"},
		{"zero budget", []string{"--endpoints-file", "e.yaml", "--max-buffered-request-bytes", "0"}, "--max-buffered-request-bytes: must be positive, got 0"},
		{"budget below body", []string{"--endpoints-file", "e.yaml", "--max-buffered-request-bytes", "1048576"}, "--max-buffered-request-bytes: 1048576 is less than 4/3 of --max-request-body-bytes (67108864)"},
		{"zero body timeout", []string{"--endpoints-file", "e.yaml", "--request-body-timeout", "0s"}, "--request-body-timeout: must be positive, got 0s"},
		{"zero total streams", []string{"--endpoints-file", "e.yaml", "--grpc-max-streams", "0"}, "--grpc-max-streams: must be positive, got 0"},
		{"grace without age", []string{"--endpoints-file", "e.yaml", "--grpc-max-connection-age-grace", "5s"}, "--grpc-max-connection-age-grace needs --grpc-max-connection-age"},
		{"objective watch without pool", []string{"--endpoints-file", "e.yaml", "--watch-inference-objectives"}, "--watch-inference-objectives needs Kubernetes mode with --pool-name"},
		{"objective watch and file", []string{"--pool-name", "p", "--kubeconfig", "testdata/kubeconfig.yaml", "--watch-inference-objectives", "--objectives-file", "o.yaml"}, "--objectives-file and --watch-inference-objectives are mutually exclusive"},
	}
	// No ambient cluster configuration may leak into the cases.
	t.Setenv("KUBECONFIG", "")
	t.Setenv("HOME", t.TempDir())
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
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

	errOut.Reset()
	code = run([]string{"--endpoints-file", "testdata/endpoints.yaml", "--objectives-file", "testdata/no-such-objectives.yaml", "--grpc-port", "0", "--grpc-health-port", "0", "--metrics-port", "0"}, &out, &errOut)
	require.Equal(t, 1, code)
	require.Contains(t, errOut.String(), "--objectives-file")
}

// The safe defaults: pprof off, no token (so no debug endpoints), every
// interface (a pod is reached on its IP); bind addresses are honoured.
func TestServeFlagDefaults(t *testing.T) {
	parse := func(args ...string) (serveFlags, *flag.FlagSet) {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		var f serveFlags
		f.register(fs)
		require.NoError(t, fs.Parse(args))
		return f, fs
	}
	f, fs := parse("--endpoints-file", "e.yaml")
	cfg, err := f.serverConfig(fs, logr.Discard())
	require.NoError(t, err)
	require.False(t, cfg.EnablePprof)
	require.Empty(t, cfg.MetricsTokenFile)
	require.Equal(t, ":9002", cfg.GRPCAddr)
	require.Equal(t, ":9003", cfg.HealthAddr)
	require.Equal(t, ":9090", cfg.MetricsAddr)
	require.EqualValues(t, 1000, cfg.GRPCMaxConcurrentStreams)
	require.Equal(t, 15*time.Minute, cfg.GRPCMaxConnectionIdle)
	require.Zero(t, cfg.GRPCMaxConnectionAge)
	require.EqualValues(t, 256<<20, cfg.MaxBufferedBytes)
	require.Equal(t, time.Minute, cfg.RequestBodyTimeout)
	require.EqualValues(t, 10000, cfg.MaxStreams)
	require.Equal(t, 2<<20, cfg.GRPCMaxRecvMsgSize)
	require.False(t, cfg.ConformanceTestHeaders, "clients cannot steer routing by default")

	f, fs = parse("--endpoints-file", "e.yaml", "--grpc-bind-address", "127.0.0.2", "--grpc-health-bind-address", "localhost",
		"--metrics-bind-address", "[::1]", "--metrics-token-file", "tok", "--enable-pprof")
	cfg, err = f.serverConfig(fs, logr.Discard())
	require.NoError(t, err)
	require.Equal(t, "127.0.0.2:9002", cfg.GRPCAddr)
	require.Equal(t, "localhost:9003", cfg.HealthAddr)
	require.Equal(t, "[::1]:9090", cfg.MetricsAddr)
	require.True(t, cfg.EnablePprof)
	require.Equal(t, "tok", cfg.MetricsTokenFile)
	require.Empty(t, cfg.AdminTokenFile, "the admin API is off by default")

	f, fs = parse("--endpoints-file", "e.yaml", "--admin-token-file", "admin-tok")
	cfg, err = f.serverConfig(fs, logr.Discard())
	require.NoError(t, err)
	require.Equal(t, "admin-tok", cfg.AdminTokenFile)
}
