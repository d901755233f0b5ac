package tracing

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Defaults, as GIE v1.5.0's EPP has them (pkg/common/observability/tracing)
// where it has them.
const (
	// DefaultEndpoint is the OTLP collector when neither
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT nor OTEL_EXPORTER_OTLP_ENDPOINT is
	// set (GIE's default).
	DefaultEndpoint = "http://localhost:4317"
	// DefaultSampler and DefaultSamplerArg sample a tenth of the traces
	// that start here and follow the caller's decision otherwise (GIE's
	// defaults; the OpenTelemetry specification's ratio is 1.0).
	DefaultSampler    = "parentbased_traceidratio"
	DefaultSamplerArg = 0.1
	// DefaultServiceName is the service.name resource attribute when
	// OTEL_SERVICE_NAME (or service.name in OTEL_RESOURCE_ATTRIBUTES) does
	// not set it: GIE's EPP's, so that trace queries written for GIE find
	// Switchyard's spans (a drop-in replacement).
	DefaultServiceName = "gateway-api-inference-extension/epp"
	// DefaultAttributeValueLengthLimit bounds every string attribute of a
	// span (the SDK's default is unlimited): the model name comes from a
	// request body of up to 64 MiB and sits on several spans in the export
	// queue. OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT overrides it.
	DefaultAttributeValueLengthLimit = 512
)

// Exporter names of OTEL_TRACES_EXPORTER.
const (
	ExporterOTLP    = "otlp"
	ExporterConsole = "console"
	ExporterNone    = "none"
)

// Samplers lists the values OTEL_TRACES_SAMPLER accepts (the
// specification's built-in samplers; GIE accepts only
// parentbased_traceidratio and falls back to it for anything else).
var Samplers = []string{"always_on", "always_off", "traceidratio",
	"parentbased_always_on", "parentbased_always_off", "parentbased_traceidratio"}

// Config is the tracing setup: --tracing and the OpenTelemetry environment
// variables, checked. The zero value is off.
type Config struct {
	// Enabled is --tracing, unless OTEL_SDK_DISABLED=true or
	// OTEL_TRACES_EXPORTER=none turned it off.
	Enabled bool
	// Exporters are the span exporters (OTEL_TRACES_EXPORTER, a
	// comma-separated list): ExporterOTLP (OTLP over gRPC) and
	// ExporterConsole (pretty-printed JSON on stdout, for development).
	Exporters []string
	// Endpoint is the OTLP/gRPC collector: a URL (http:// is plaintext, as
	// GIE always is; https:// uses TLS with the system roots) or a bare
	// host:port (plaintext, unless OTEL_EXPORTER_OTLP_INSECURE or
	// OTEL_EXPORTER_OTLP_CERTIFICATE is set: then the exporter follows
	// them).
	Endpoint string
	// Sampler is one of Samplers; SamplerArg is its ratio in [0, 1] for the
	// traceidratio samplers.
	Sampler    string
	SamplerArg float64
	// ServiceName is the default service.name; OTEL_SERVICE_NAME and
	// OTEL_RESOURCE_ATTRIBUTES, read when the provider is built, override
	// it.
	ServiceName string
	// ServiceVersion is the service.version resource attribute.
	ServiceVersion string
	// MaxQueueSize bounds the spans waiting for export (0: the SDK's
	// default, 2048, or OTEL_BSP_MAX_QUEUE_SIZE); when the queue is full,
	// new spans are dropped, never waited for.
	MaxQueueSize int
	// AttributeValueLengthLimit truncates string attribute values to
	// this many bytes (0: DefaultAttributeValueLengthLimit).
	AttributeValueLengthLimit int
	// IgnoreRemoteSampled makes the parentbased_* samplers decide by
	// their root sampler for a request whose incoming traceparent carries
	// a sampling decision, instead of following it (the trace ID is still
	// continued). Off by default: the gateway's decision is honoured, as
	// the OpenTelemetry specification's parent-based samplers do.
	IgnoreRemoteSampled bool
	// ExportTimeout bounds one OTLP export, retries included (0: the
	// exporter's default, 10 s, or OTEL_EXPORTER_OTLP_TIMEOUT).
	ExportTimeout time.Duration
	// Global also installs the provider as the process's OpenTelemetry
	// global tracer provider, propagator and error handler, so that
	// out-of-tree plugins using otel.Tracer join the request's trace and
	// export errors reach the logger. The program's main sets it; tests
	// leave it off.
	Global bool
}

// FromEnv returns the configuration of --tracing (enabled) and the
// environment, read with lookup (os.LookupEnv). It reads:
//
//   - OTEL_SDK_DISABLED: "true" turns tracing off.
//   - OTEL_TRACES_EXPORTER: otlp (default), console, none, or a
//     comma-separated list of otlp and console. GIE defaults to console
//     and treats anything but otlp as console.
//   - OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, then OTEL_EXPORTER_OTLP_ENDPOINT:
//     the collector, default DefaultEndpoint.
//   - OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, then OTEL_EXPORTER_OTLP_PROTOCOL:
//     only grpc (GIE ignores them and always speaks gRPC).
//   - OTEL_TRACES_SAMPLER: one of Samplers, default DefaultSampler.
//   - OTEL_TRACES_SAMPLER_ARG: the ratio, default DefaultSamplerArg.
//   - OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT: a positive byte count,
//     default DefaultAttributeValueLengthLimit.
//   - SWITCHYARD_TRACING_IGNORE_REMOTE_SAMPLED: "true" sets
//     IgnoreRemoteSampled (a client cannot force sampling with a
//     traceparent whose sampled flag is set).
//   - OTEL_RESOURCE_ATTRIBUTES: checked (comma-separated key=value).
//
// A value it cannot use is an error naming the variable (GIE falls back
// to its defaults silently). With enabled false nothing is read and the
// result is off. The exporter itself reads the other OTEL_EXPORTER_OTLP_*
// variables (headers, timeout, compression, certificates) and the batch
// processor the OTEL_BSP_* ones; the resource reads OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES.
func FromEnv(enabled bool, lookup func(string) (string, bool)) (Config, error) {
	if !enabled {
		return Config{}, nil
	}
	get := func(k string) string {
		v, _ := lookup(k)
		return strings.TrimSpace(v)
	}
	cfg := Config{Enabled: true, ServiceName: DefaultServiceName}
	var errs []error
	if v := get("OTEL_SDK_DISABLED"); v != "" {
		switch strings.ToLower(v) {
		case "true":
			return Config{}, nil
		case "false":
		default:
			errs = append(errs, fmt.Errorf("OTEL_SDK_DISABLED: must be true or false, got %q", v))
		}
	}

	exporters := get("OTEL_TRACES_EXPORTER")
	if exporters == "" {
		exporters = ExporterOTLP
	}
	for _, e := range strings.Split(exporters, ",") {
		switch e = strings.ToLower(strings.TrimSpace(e)); e {
		case ExporterOTLP, ExporterConsole:
			if !slices.Contains(cfg.Exporters, e) {
				cfg.Exporters = append(cfg.Exporters, e)
			}
		case ExporterNone:
		default:
			errs = append(errs, fmt.Errorf("OTEL_TRACES_EXPORTER: unknown exporter %q (want otlp, console or none)", e))
		}
	}

	cfg.Endpoint = DefaultEndpoint
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"} {
		if v := get(k); v != "" {
			if err := checkEndpoint(v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", k, err))
			}
			cfg.Endpoint = v
			break
		}
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if v := get(k); v != "" {
			if v != "grpc" {
				errs = append(errs, fmt.Errorf("%s: only grpc is supported, got %q", k, v))
			}
			break
		}
	}

	cfg.Sampler = strings.ToLower(get("OTEL_TRACES_SAMPLER"))
	if cfg.Sampler == "" {
		cfg.Sampler = DefaultSampler
	} else if !slices.Contains(Samplers, cfg.Sampler) {
		errs = append(errs, fmt.Errorf("OTEL_TRACES_SAMPLER: unknown sampler %q (want one of %s)", cfg.Sampler, strings.Join(Samplers, ", ")))
	}
	cfg.SamplerArg = DefaultSamplerArg
	if v := get("OTEL_TRACES_SAMPLER_ARG"); v != "" && strings.HasSuffix(cfg.Sampler, "traceidratio") {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f >= 0 && f <= 1) {
			errs = append(errs, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG: must be a ratio in [0, 1] for %s, got %q", cfg.Sampler, v))
		} else {
			cfg.SamplerArg = f
		}
	}
	cfg.AttributeValueLengthLimit = DefaultAttributeValueLengthLimit
	if v := get("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			errs = append(errs, fmt.Errorf("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT: must be a positive integer, got %q", v))
		} else {
			cfg.AttributeValueLengthLimit = n
		}
	}
	if v := get("SWITCHYARD_TRACING_IGNORE_REMOTE_SAMPLED"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("SWITCHYARD_TRACING_IGNORE_REMOTE_SAMPLED: must be true or false, got %q", v))
		}
		cfg.IgnoreRemoteSampled = b
	}
	if v := get("OTEL_RESOURCE_ATTRIBUTES"); v != "" {
		for i, kv := range strings.Split(v, ",") {
			if k, _, ok := strings.Cut(kv, "="); !ok || strings.TrimSpace(k) == "" {
				errs = append(errs, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES[%d]: want key=value, got %q", i, kv))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, err
	}
	if len(cfg.Exporters) == 0 { // OTEL_TRACES_EXPORTER=none
		return Config{}, nil
	}
	return cfg, nil
}

// checkEndpoint accepts an http(s) URL with a host, or host:port.
func checkEndpoint(v string) error {
	if strings.Contains(v, "://") {
		u, err := url.Parse(v)
		if err != nil {
			return fmt.Errorf("invalid URL %q: %w", v, err)
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return fmt.Errorf("scheme must be http or https, got %q", v)
		}
		if u.Host == "" {
			return fmt.Errorf("no host in %q", v)
		}
		return nil
	}
	if i := strings.LastIndexByte(v, ':'); i <= 0 || i == len(v)-1 {
		return fmt.Errorf("want a URL (http://host:port) or host:port, got %q", v)
	}
	return nil
}
