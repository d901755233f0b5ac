package tracing_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/switchyard-ai/switchyard/pkg/tracing"
	"github.com/switchyard-ai/switchyard/pkg/tracing/tracingtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A provider exports a request's span and its child to a real OTLP
// collector at Shutdown; a nil Tracer (off) starts nothing.
func TestProviderExports(t *testing.T) {
	coll := tracingtest.Start(t)
	p, err := tracing.New(context.Background(), tracing.Config{Enabled: true, Exporters: []string{tracing.ExporterOTLP},
		Endpoint: coll.Endpoint(), Sampler: "always_on", ServiceName: "svc"}, logr.Discard())
	require.NoError(t, err)
	ctx, root := p.Tracer().StartRequest(context.Background(), tracing.SpanRequest, map[string]string{})
	_, child := tracing.Start(ctx, "child")
	child.End()
	var hdr map[string]string = map[string]string{}
	p.Tracer().Inject(ctx, func(k, v string) { hdr[k] = v })
	root.End()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, p.Shutdown(sctx))
	spans := coll.Spans()
	require.Len(t, spans, 2)
	tree := tracingtest.NewTree(spans)
	r := tree.Named(tracing.SpanRequest)[0]
	c := tree.Named("child")[0]
	require.Equal(t, r.SpanID, c.ParentID)
	require.Equal(t, "svc", r.Resource["service.name"])
	require.Equal(t, "00-"+r.TraceID+"-"+r.SpanID+"-01", hdr["traceparent"])

	var off *tracing.Tracer
	octx, sp := off.StartRequest(context.Background(), tracing.SpanRequest, nil)
	require.False(t, sp.IsRecording())
	require.False(t, tracing.Recording(octx))
	off.Inject(octx, func(string, string) { t.Fatal("off injects nothing") })
	p2, err := tracing.New(context.Background(), tracing.Config{}, logr.Discard())
	require.NoError(t, err)
	require.Nil(t, p2)
	require.Nil(t, p2.Tracer())
	require.NoError(t, p2.Shutdown(context.Background()))
}

// Start with nothing traced allocates nothing: it runs for every plugin.
func TestStartUntracedAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		_, sp := tracing.Start(ctx, "x")
		sp.End()
	})
	require.Zero(t, allocs)
}

// BenchmarkStart is a plugin span: untraced (off or unsampled) against
// sampled and recording.
func BenchmarkStart(b *testing.B) {
	b.Run("untraced", func(b *testing.B) {
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			_, sp := tracing.Start(ctx, "Filter f")
			sp.End()
		}
	})
	b.Run("sampled", func(b *testing.B) {
		coll := tracingtest.Start(b)
		p, err := tracing.New(context.Background(), tracing.Config{Enabled: true, Exporters: []string{tracing.ExporterOTLP},
			Endpoint: coll.Endpoint(), Sampler: "always_on"}, logr.Discard())
		require.NoError(b, err)
		defer func() { _ = p.Shutdown(context.Background()) }()
		ctx, root := p.Tracer().StartRequest(context.Background(), tracing.SpanRequest, map[string]string{})
		defer root.End()
		b.ReportAllocs()
		for b.Loop() {
			_, sp := tracing.Start(ctx, "Filter f")
			sp.End()
		}
	})
}

// New's error paths leave no exporter running: neither when an exporter
// after the first fails nor when the resource does (built first).
func TestNewErrorLeaksNothing(t *testing.T) {
	coll := tracingtest.Start(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent()) // runs before the collector's cleanup
	_, err := tracing.New(context.Background(), tracing.Config{Enabled: true, Exporters: []string{tracing.ExporterOTLP, "bogus"},
		Endpoint: coll.Endpoint(), Sampler: "always_on"}, logr.Discard())
	require.ErrorContains(t, err, `tracing: bogus exporter: unknown exporter "bogus"`)

	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "broken")
	_, err = tracing.New(context.Background(), tracing.Config{Enabled: true, Exporters: []string{tracing.ExporterOTLP},
		Endpoint: coll.Endpoint(), Sampler: "always_on"}, logr.Discard())
	require.ErrorContains(t, err, "tracing: resource:")
}
