package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of every span Switchyard starts.
const ScopeName = "github.com/switchyard-ai/switchyard"

// Provider is a running tracer provider: its batch span processors export
// on their own goroutines. A nil *Provider is off. Shutdown must be
// called once, by the owner (the server), to flush and stop them.
type Provider struct {
	tp     *sdktrace.TracerProvider
	tracer *Tracer
}

// New builds the provider of cfg; off (cfg.Enabled false) gives nil. It
// connects to nothing: the OTLP exporter dials on its first export, so an
// unreachable collector costs only failed exports, on the exporter's
// goroutine, while spans past the bounded queue are dropped.
func New(ctx context.Context, cfg Config, log logr.Logger) (*Provider, error) {
	if !cfg.Enabled {
		return nil, nil
	}
	if log.GetSink() == nil {
		log = logr.Discard()
	}
	var bspOpts []sdktrace.BatchSpanProcessorOption
	if cfg.MaxQueueSize > 0 {
		bspOpts = append(bspOpts, sdktrace.WithMaxQueueSize(cfg.MaxQueueSize))
	}
	if len(cfg.Exporters) == 0 {
		return nil, errors.New("tracing: no exporter")
	}
	// The resource first: nothing to shut down when it fails.
	name := cfg.ServiceName
	if name == "" {
		name = DefaultServiceName
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", name)}
	if cfg.ServiceVersion != "" {
		attrs = append(attrs, attribute.String("service.version", cfg.ServiceVersion))
	}
	// Later detectors win: the environment overrides the defaults.
	res, err := resource.New(ctx, resource.WithAttributes(attrs...), resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	limits := sdktrace.NewSpanLimits() // the other limits' OTEL_SPAN_* variables
	limits.AttributeValueLengthLimit = cfg.AttributeValueLengthLimit
	if limits.AttributeValueLengthLimit <= 0 {
		limits.AttributeValueLengthLimit = DefaultAttributeValueLengthLimit
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res), sdktrace.WithSpanLimits(limits),
		sdktrace.WithSampler(sampler(cfg.Sampler, cfg.SamplerArg, cfg.IgnoreRemoteSampled))}
	var built []sdktrace.SpanExporter
	for _, name := range cfg.Exporters {
		exp, err := newExporter(ctx, name, cfg.Endpoint, cfg.ExportTimeout)
		if err != nil {
			for _, e := range built { // nothing exported yet: returns at once
				_ = e.Shutdown(ctx)
			}
			return nil, fmt.Errorf("tracing: %s exporter: %w", name, err)
		}
		built = append(built, exp)
	}
	// The batchers last: WithBatcher starts its goroutine at once.
	for _, exp := range built {
		opts = append(opts, sdktrace.WithBatcher(exp, bspOpts...))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	p := &Provider{tp: tp, tracer: &Tracer{t: tp.Tracer(ScopeName), prop: prop}}
	if cfg.Global {
		otel.SetTracerProvider(tp)
		otel.SetTextMapPropagator(prop)
		otel.SetErrorHandler(&errorLog{log: log.WithName("tracing"), every: 5 * time.Minute})
	}
	log.Info("Tracing on", "exporters", strings.Join(cfg.Exporters, ","), "endpoint", cfg.Endpoint,
		"sampler", cfg.Sampler, "samplerArg", cfg.SamplerArg, "ignoreRemoteSampled", cfg.IgnoreRemoteSampled,
		"attributeValueLengthLimit", limits.AttributeValueLengthLimit)
	return p, nil
}

// newExporter builds one span exporter.
func newExporter(ctx context.Context, name, endpoint string, timeout time.Duration) (sdktrace.SpanExporter, error) {
	switch name {
	case ExporterOTLP:
		var opts []otlptracegrpc.Option
		if timeout > 0 {
			opts = append(opts, otlptracegrpc.WithTimeout(timeout))
		}
		if strings.Contains(endpoint, "://") {
			// http:// is plaintext, https:// TLS.
			opts = append(opts, otlptracegrpc.WithEndpointURL(endpoint))
		} else {
			opts = append(opts, otlptracegrpc.WithEndpoint(endpoint))
			if bareIsPlaintext(os.LookupEnv) {
				opts = append(opts, otlptracegrpc.WithInsecure())
			}
		}
		return otlptracegrpc.New(ctx, opts...)
	case ExporterConsole:
		return stdouttrace.New(stdouttrace.WithWriter(os.Stdout), stdouttrace.WithPrettyPrint())
	}
	return nil, fmt.Errorf("unknown exporter %q", name)
}

// bareIsPlaintext reports whether a bare host:port endpoint is dialled
// in plaintext: yes (as GIE) unless OTEL_EXPORTER_OTLP_[TRACES_]INSECURE
// or OTEL_EXPORTER_OTLP_[TRACES_]CERTIFICATE is set, which the exporter
// then honours (INSECURE=false or a CA file: TLS). A URL's scheme decides
// by itself (http:// plaintext, https:// TLS), as the specification says.
func bareIsPlaintext(lookup func(string) (string, bool)) bool {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TRACES_INSECURE", "OTEL_EXPORTER_OTLP_INSECURE",
		"OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "OTEL_EXPORTER_OTLP_CERTIFICATE"} {
		if v, ok := lookup(k); ok && strings.TrimSpace(v) != "" {
			return false
		}
	}
	return true
}

// sampler builds the sampler named as OTEL_TRACES_SAMPLER does; with
// ignoreRemote, a parentbased_* sampler decides by its root sampler under
// a remote (incoming) parent, whatever its sampled flag says.
func sampler(name string, ratio float64, ignoreRemote bool) sdktrace.Sampler {
	parentBased := func(root sdktrace.Sampler) sdktrace.Sampler {
		if !ignoreRemote {
			return sdktrace.ParentBased(root)
		}
		return sdktrace.ParentBased(root, sdktrace.WithRemoteParentSampled(root), sdktrace.WithRemoteParentNotSampled(root))
	}
	switch name {
	case "always_on":
		return sdktrace.AlwaysSample()
	case "always_off":
		return sdktrace.NeverSample()
	case "traceidratio":
		return sdktrace.TraceIDRatioBased(ratio)
	case "parentbased_always_on":
		return parentBased(sdktrace.AlwaysSample())
	case "parentbased_always_off":
		return parentBased(sdktrace.NeverSample())
	default: // parentbased_traceidratio
		return parentBased(sdktrace.TraceIDRatioBased(ratio))
	}
}

// Tracer returns the request path's tracer; nil (off) for a nil Provider.
func (p *Provider) Tracer() *Tracer {
	if p == nil {
		return nil
	}
	return p.tracer
}

// Shutdown exports the spans still queued and stops the exporters,
// within ctx: with an unreachable collector it gives up when ctx ends.
// Spans ended afterwards are dropped.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil {
		return nil
	}
	return p.tp.Shutdown(ctx)
}

// ForceFlush exports the spans queued now (tests).
func (p *Provider) ForceFlush(ctx context.Context) error {
	if p == nil {
		return nil
	}
	return p.tp.ForceFlush(ctx)
}

// Tracer starts the spans of the request path. A nil *Tracer is off: its
// methods do nothing and allocate nothing.
type Tracer struct {
	t    trace.Tracer
	prop propagation.TextMapPropagator
}

// tracerKey carries the *Tracer in a traced request's context, so that
// Start needs no provider lookup (the SDK's takes a lock).
type tracerKey struct{}

// noopSpan is what Start returns when nothing is traced: it records
// nothing, and as a zero-size value it makes no allocation.
var noopSpan trace.Span = noop.Span{}

// StartRequest starts the span of one request, a child of the trace
// context in its headers (traceparent, tracestate, baggage; lower-case
// keys) when they carry one, else a new trace. The returned context
// carries the span and the Tracer for Start.
func (t *Tracer) StartRequest(ctx context.Context, name string, headers map[string]string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if t == nil {
		return ctx, noopSpan
	}
	ctx = t.prop.Extract(ctx, propagation.MapCarrier(headers))
	ctx = context.WithValue(ctx, tracerKey{}, t)
	return t.t.Start(ctx, name, append(opts, trace.WithSpanKind(trace.SpanKindServer))...)
}

// Inject calls set with each trace-context header (traceparent, and
// tracestate and baggage when there are any) of the span in ctx, so that
// the upstream continues the trace. It does nothing when t is off or ctx
// has no valid span.
func (t *Tracer) Inject(ctx context.Context, set func(key, value string)) {
	if t == nil || !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	t.prop.Inject(ctx, setCarrier(set))
}

// setCarrier is a write-only propagation.TextMapCarrier.
type setCarrier func(key, value string)

func (c setCarrier) Get(string) string     { return "" }
func (c setCarrier) Set(key, value string) { c(key, value) }
func (c setCarrier) Keys() []string        { return nil }

// Start starts a child of the span in ctx when that span records (the
// request is traced and sampled). Otherwise it returns ctx unchanged and
// a span that does nothing, without allocating: the request path calls it
// for every plugin run. Build attributes only when span.IsRecording().
func Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, noopSpan
	}
	t, _ := ctx.Value(tracerKey{}).(*Tracer)
	if t == nil {
		return ctx, noopSpan
	}
	return t.t.Start(ctx, name, opts...)
}

// Recording reports whether the span in ctx records: whether Start would
// start a span.
func Recording(ctx context.Context) bool { return trace.SpanFromContext(ctx).IsRecording() }

// errorLog is the OpenTelemetry error handler: export failures (an
// unreachable collector) are logged once, then at most once per every,
// with the number of errors in between.
type errorLog struct {
	log   logr.Logger
	every time.Duration

	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// Handle implements otel.ErrorHandler.
func (h *errorLog) Handle(err error) {
	h.mu.Lock()
	now := time.Now()
	if !h.last.IsZero() && now.Sub(h.last) < h.every {
		h.suppressed++
		h.mu.Unlock()
		return
	}
	n := h.suppressed
	h.last, h.suppressed = now, 0
	h.mu.Unlock()
	h.log.Error(err, "OpenTelemetry error (spans may be lost); repeats are logged at most every "+h.every.String(), "suppressed", n)
}
