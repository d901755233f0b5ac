package tracing

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
)

func TestFromEnv(t *testing.T) {
	def := Config{Enabled: true, Exporters: []string{ExporterOTLP}, Endpoint: DefaultEndpoint,
		Sampler: DefaultSampler, SamplerArg: DefaultSamplerArg, ServiceName: DefaultServiceName,
		AttributeValueLengthLimit: DefaultAttributeValueLengthLimit}
	with := func(f func(*Config)) Config {
		c := def
		c.Exporters = append([]string(nil), def.Exporters...)
		f(&c)
		return c
	}
	for _, tt := range []struct {
		name    string
		enabled bool
		env     map[string]string
		want    Config
		wantErr []string
	}{
		{name: "flag off reads nothing", enabled: false, env: map[string]string{"OTEL_TRACES_SAMPLER": "bogus"}, want: Config{}},
		{name: "defaults (otlp exporter, where GIE's is console)", enabled: true, want: def},
		{name: "attribute length limit", enabled: true, env: map[string]string{"OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT": "64"},
			want: with(func(c *Config) { c.AttributeValueLengthLimit = 64 })},
		{name: "ignore remote sampled", enabled: true, env: map[string]string{"SWITCHYARD_TRACING_IGNORE_REMOTE_SAMPLED": "true"},
			want: with(func(c *Config) { c.IgnoreRemoteSampled = true })},
		{name: "resource attributes", enabled: true, env: map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "a=b,service.name=x"}, want: def},
		{name: "bad attribute length limit", enabled: true, env: map[string]string{"OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT": "-1"},
			wantErr: []string{`OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT: must be a positive integer, got "-1"`}},
		{name: "bad ignore remote sampled", enabled: true, env: map[string]string{"SWITCHYARD_TRACING_IGNORE_REMOTE_SAMPLED": "yes please"},
			wantErr: []string{`SWITCHYARD_TRACING_IGNORE_REMOTE_SAMPLED: must be true or false, got "yes please"`}},
		{name: "bad resource attributes", enabled: true, env: map[string]string{"OTEL_RESOURCE_ATTRIBUTES": "a=b,broken"},
			wantErr: []string{`OTEL_RESOURCE_ATTRIBUTES[1]: want key=value, got "broken"`}},
		{name: "sdk disabled", enabled: true, env: map[string]string{"OTEL_SDK_DISABLED": "true"}, want: Config{}},
		{name: "exporter none", enabled: true, env: map[string]string{"OTEL_TRACES_EXPORTER": "none"}, want: Config{}},
		{name: "console and otlp", enabled: true, env: map[string]string{"OTEL_TRACES_EXPORTER": "console, otlp,console"},
			want: with(func(c *Config) { c.Exporters = []string{ExporterConsole, ExporterOTLP} })},
		{name: "traces endpoint wins", enabled: true, env: map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4317", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://b:4317"},
			want: with(func(c *Config) { c.Endpoint = "https://b:4317" })},
		{name: "bare host:port", enabled: true, env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4317"},
			want: with(func(c *Config) { c.Endpoint = "collector:4317" })},
		{name: "sampler and ratio", enabled: true, env: map[string]string{"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25"},
			want: with(func(c *Config) { c.Sampler, c.SamplerArg = "traceidratio", 0.25 })},
		{name: "arg ignored by always_on", enabled: true, env: map[string]string{"OTEL_TRACES_SAMPLER": "always_on", "OTEL_TRACES_SAMPLER_ARG": "x"},
			want: with(func(c *Config) { c.Sampler = "always_on" })},
		{name: "grpc protocol", enabled: true, env: map[string]string{"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, want: def},
		{name: "bad sampler arg", enabled: true, env: map[string]string{"OTEL_TRACES_SAMPLER_ARG": "ten"},
			wantErr: []string{`OTEL_TRACES_SAMPLER_ARG: must be a ratio in [0, 1] for parentbased_traceidratio, got "ten"`}},
		{name: "ratio above 1", enabled: true, env: map[string]string{"OTEL_TRACES_SAMPLER_ARG": "1.5"},
			wantErr: []string{`OTEL_TRACES_SAMPLER_ARG: must be a ratio in [0, 1]`}},
		{name: "every error at once", enabled: true, env: map[string]string{
			"OTEL_TRACES_SAMPLER": "jaeger_remote", "OTEL_TRACES_EXPORTER": "zipkin", "OTEL_EXPORTER_OTLP_ENDPOINT": "ftp://x",
			"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_SDK_DISABLED": "maybe"},
			wantErr: []string{`OTEL_TRACES_SAMPLER: unknown sampler "jaeger_remote"`, `OTEL_TRACES_EXPORTER: unknown exporter "zipkin"`,
				`OTEL_EXPORTER_OTLP_ENDPOINT: scheme must be http or https`, `OTEL_EXPORTER_OTLP_PROTOCOL: only grpc is supported, got "http/protobuf"`,
				`OTEL_SDK_DISABLED: must be true or false`}},
		{name: "endpoint without port", enabled: true, env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector"},
			wantErr: []string{`OTEL_EXPORTER_OTLP_ENDPOINT: want a URL (http://host:port) or host:port, got "collector"`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			lookup := func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok }
			got, err := FromEnv(tt.enabled, lookup)
			if len(tt.wantErr) > 0 {
				require.Error(t, err)
				for _, w := range tt.wantErr {
					require.Contains(t, err.Error(), w)
				}
				return
			}
			require.NoError(t, err)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("FromEnv (-want +got):\n%s", diff)
			}
		})
	}
}

// Every OTEL_TRACES_SAMPLER name maps to its sampler, and
// IgnoreRemoteSampled replaces only the remote parent's samplers.
func TestSampler(t *testing.T) {
	const trusted = ",remoteParentSampled:AlwaysOnSampler,remoteParentNotSampled:AlwaysOffSampler,localParentSampled:AlwaysOnSampler,localParentNotSampled:AlwaysOffSampler}"
	for _, tt := range []struct {
		name         string
		ignoreRemote bool
		want         string
	}{
		{"always_on", false, "AlwaysOnSampler"},
		{"always_off", false, "AlwaysOffSampler"},
		{"traceidratio", false, "TraceIDRatioBased{0.25}"},
		{"parentbased_always_on", false, "ParentBased{root:AlwaysOnSampler" + trusted},
		{"parentbased_always_off", false, "ParentBased{root:AlwaysOffSampler" + trusted},
		{"parentbased_traceidratio", false, "ParentBased{root:TraceIDRatioBased{0.25}" + trusted},
		{"always_on", true, "AlwaysOnSampler"},
		{"parentbased_traceidratio", true, "ParentBased{root:TraceIDRatioBased{0.25},remoteParentSampled:TraceIDRatioBased{0.25}," +
			"remoteParentNotSampled:TraceIDRatioBased{0.25},localParentSampled:AlwaysOnSampler,localParentNotSampled:AlwaysOffSampler}"},
		{"parentbased_always_off", true, "ParentBased{root:AlwaysOffSampler,remoteParentSampled:AlwaysOffSampler," +
			"remoteParentNotSampled:AlwaysOffSampler,localParentSampled:AlwaysOnSampler,localParentNotSampled:AlwaysOffSampler}"},
	} {
		t.Run(fmt.Sprintf("%s/ignoreRemote=%v", tt.name, tt.ignoreRemote), func(t *testing.T) {
			require.Equal(t, tt.want, sampler(tt.name, 0.25, tt.ignoreRemote).Description())
		})
	}
	require.Len(t, Samplers, 6)
}

// A bare host:port is plaintext unless the TLS variables say otherwise
// (then the exporter reads them).
func TestBareIsPlaintext(t *testing.T) {
	for _, tt := range []struct {
		env  map[string]string
		want bool
	}{
		{nil, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_INSECURE": ""}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_INSECURE": "false"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_INSECURE": "true"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": "/ca.pem"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE": "/ca.pem"}, false},
	} {
		t.Run(fmt.Sprint(tt.env), func(t *testing.T) {
			lookup := func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok }
			require.Equal(t, tt.want, bareIsPlaintext(lookup))
		})
	}
}
