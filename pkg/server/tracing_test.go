package server

import (
	"context"
	"io"
	"strings"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/tracing"
	"github.com/switchyard-ai/switchyard/pkg/tracing/tracingtest"
)

// The server owns the tracer provider: a request's spans, still queued
// when the server stops (the batch timer has not fired), are flushed to
// the collector before Run returns, and the upstream request carries the
// request span's traceparent.
func TestTracingFlushedAtShutdown(t *testing.T) {
	// The batch processor's timer would export after 10 minutes: only the
	// shutdown's flush can deliver the spans during this test.
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "600000")
	coll := tracingtest.Start(t)
	s, stop := run(t, Config{EndpointsFile: sims(t, 2), Tracing: tracing.Config{Enabled: true,
		Exporters: []string{tracing.ExporterOTLP}, Endpoint: coll.Endpoint(), Sampler: "always_on"}})
	client := extprocv3.NewExternalProcessorClient(dial(t, s.GRPCAddr(), false))
	stream, err := client.Process(context.Background())
	require.NoError(t, err)
	require.NoError(t, stream.Send(headers(false, ":path", "/v1/completions", ":method", "POST", "x-request-id", "r1")))
	require.NoError(t, stream.Send(reqBody(`{"model":"m","prompt":"hello"}`)))
	first, err := stream.Recv()
	require.NoError(t, err)
	var tp string
	for _, h := range first.GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
		if h.GetHeader().GetKey() == "traceparent" {
			tp = string(h.GetHeader().GetRawValue())
		}
	}
	_, err = stream.Recv()
	require.NoError(t, err)
	require.NoError(t, stream.CloseSend())
	_, err = stream.Recv()
	require.ErrorIs(t, err, io.EOF)
	require.Empty(t, coll.Spans(), "nothing is exported before the shutdown")

	stop() // Run returns after the flush
	tree := tracingtest.NewTree(coll.Spans())
	roots := tree.Named(tracing.SpanRequest)
	require.Len(t, roots, 1)
	root := roots[0]
	require.Equal(t, "00-"+root.TraceID+"-"+root.SpanID+"-01", tp)
	require.Equal(t, "r1", root.Attributes[tracing.AttrRequestID])
	require.True(t, strings.HasPrefix(root.Attributes[tracing.AttrEndpoint], "127.0.0.1:"), root.Attributes)
	require.NotEmpty(t, root.Resource["service.version"])
	require.Len(t, tree.Named(tracing.SpanSchedule), 1)
}
