package server

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/go-logr/logr/funcr"
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

// With no collector listening, the shutdown does not wait for it when
// nothing is queued, and when spans are queued it gives up after
// TracingShutdownTimeout and says so in the log.
func TestTracingShutdownUnreachableCollector(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := "http://" + lis.Addr().String()
	require.NoError(t, lis.Close())               // nothing listens there any more
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "600000") // only the shutdown exports

	runServer := func(t *testing.T, traced bool) (stopTook time.Duration, logs string) {
		var mu sync.Mutex
		var buf strings.Builder
		cfg := Config{EndpointsFile: sims(t, 1), Tracing: tracing.Config{Enabled: true,
			Exporters: []string{tracing.ExporterOTLP}, Endpoint: dead, Sampler: "always_on",
			// Longer than the shutdown's wait, short enough for the test.
			ExportTimeout: TracingShutdownTimeout + 2*time.Second}}
		cfg.GRPCAddr, cfg.HealthAddr, cfg.MetricsAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
		cfg.ShutdownGrace = 5 * time.Second
		cfg.Logger = funcr.New(func(prefix, args string) {
			mu.Lock()
			defer mu.Unlock()
			buf.WriteString(prefix + " " + args + "\n")
		}, funcr.Options{})
		s, err := New(cfg)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		if traced {
			client := extprocv3.NewExternalProcessorClient(dial(t, s.GRPCAddr(), false))
			stream, err := client.Process(context.Background())
			require.NoError(t, err)
			require.NoError(t, stream.Send(headers(false, ":path", "/v1/completions", ":method", "POST")))
			require.NoError(t, stream.Send(reqBody(`{"model":"m","prompt":"hello"}`)))
			_, err = stream.Recv()
			require.NoError(t, err)
			require.NoError(t, stream.CloseSend())
			for err == nil {
				_, err = stream.Recv()
			}
			require.ErrorIs(t, err, io.EOF)
		} else {
			// Serving: the gRPC port answers.
			dial(t, s.GRPCAddr(), false)
		}
		t0 := time.Now()
		cancel()
		require.NoError(t, <-done)
		mu.Lock()
		defer mu.Unlock()
		return time.Since(t0), buf.String()
	}

	t.Run("nothing queued", func(t *testing.T) {
		took, logs := runServer(t, false)
		require.Less(t, took, TracingShutdownTimeout/2, "the shutdown does not wait for an unreachable collector with nothing to flush")
		require.NotContains(t, logs, "were not exported")
	})
	t.Run("spans queued", func(t *testing.T) {
		took, logs := runServer(t, true)
		require.GreaterOrEqual(t, took, TracingShutdownTimeout-time.Second/2, "the queued spans are tried until the timeout")
		require.Less(t, took, TracingShutdownTimeout+5*time.Second, "bounded by TracingShutdownTimeout")
		require.Contains(t, logs, "Tracing: spans still queued at shutdown were not exported")
		// The export Shutdown gave up on ends by its own timeout (goleak
		// checks the package at its end).
		require.Eventually(t, func() bool { return !tracingtest.ExporterRunning() }, 30*time.Second, 50*time.Millisecond)
	})
}
