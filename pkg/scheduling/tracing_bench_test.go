package scheduling_test

import (
	"context"
	"testing"

	"github.com/go-logr/logr"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/tracing"
	"github.com/switchyard-ai/switchyard/pkg/tracing/tracingtest"
)

// BenchmarkProfileRunTracing is a profile run (three scorers and a picker
// over 100 endpoints) with tracing off, on but not sampled, and sampled
// (a span per profile and plugin run, exported to an in-process
// collector). Off and unsampled must cost what BenchmarkProfileRun costs.
func BenchmarkProfileRunTracing(b *testing.B) {
	p := benchProfile(b, nil)
	eps := benchEndpoints(100)
	run := func(b *testing.B, ctx context.Context) {
		req := &scheduling.Request{ID: "bench"}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := p.Run(ctx, req, eps); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("off", func(b *testing.B) { run(b, b.Context()) })
	for _, c := range []struct {
		name    string
		sampler string
	}{{"unsampled", "always_off"}, {"sampled", "always_on"}} {
		b.Run(c.name, func(b *testing.B) {
			coll := tracingtest.Start(b)
			prov, err := tracing.New(context.Background(), tracing.Config{Enabled: true, Exporters: []string{tracing.ExporterOTLP},
				Endpoint: coll.Endpoint(), Sampler: c.sampler}, logr.Discard())
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = prov.Shutdown(context.Background()) }()
			ctx, root := prov.Tracer().StartRequest(b.Context(), tracing.SpanRequest, map[string]string{})
			defer root.End()
			run(b, ctx)
		})
	}
}
