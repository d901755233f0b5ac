package main

import (
	"flag"
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/tracing"
)

// --tracing is on by default with GIE's collector and sampler; off, the
// environment is not read; a bad variable fails startup with its name.
func TestServeTracingFlag(t *testing.T) {
	for _, k := range []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
		"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG",
		"OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "SWITCHYARD_TRACING_IGNORE_REMOTE_SAMPLED", "OTEL_RESOURCE_ATTRIBUTES"} {
		t.Setenv(k, "")
	}
	cfgOf := func(args ...string) (tracing.Config, error) {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		var f serveFlags
		f.register(fs)
		require.NoError(t, fs.Parse(append([]string{"--endpoints-file", "e.yaml"}, args...)))
		cfg, err := f.serverConfig(fs, logr.Discard())
		return cfg.Tracing, err
	}
	got, err := cfgOf()
	require.NoError(t, err)
	require.True(t, got.Enabled)
	require.True(t, got.Global)
	require.Equal(t, "http://localhost:4317", got.Endpoint)
	require.Equal(t, "parentbased_traceidratio", got.Sampler)
	require.Equal(t, 0.1, got.SamplerArg)
	require.Equal(t, "gateway-api-inference-extension/epp", got.ServiceName, "GIE's service.name")
	require.Equal(t, 512, got.AttributeValueLengthLimit)
	require.False(t, got.IgnoreRemoteSampled)

	t.Setenv("OTEL_TRACES_SAMPLER_ARG", "lots")
	_, err = cfgOf()
	require.ErrorContains(t, err, `--tracing: OTEL_TRACES_SAMPLER_ARG: must be a ratio in [0, 1]`)
	got, err = cfgOf("--tracing=false")
	require.NoError(t, err, "off, the environment is not read")
	require.False(t, got.Enabled)
}
