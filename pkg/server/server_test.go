package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/switchyard-ai/switchyard/pkg/modelsim"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// sims starts n modelsim servers on loopback and returns an endpoints file
// listing them.
func sims(t *testing.T, n int) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("endpoints:\n")
	for i := range n {
		cfg := modelsim.DefaultConfig()
		cfg.TimeScale = 0
		sim, err := modelsim.New(cfg, modelsim.WithID(fmt.Sprintf("sim-%d", i)))
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		require.NoError(t, sim.Start(ctx))
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		hs := &http.Server{Handler: sim.Handler(), ReadHeaderTimeout: time.Second}
		go func() { _ = hs.Serve(lis) }()
		t.Cleanup(func() {
			_ = sim.Close()
			cancel()
			_ = hs.Close()
		})
		fmt.Fprintf(&b, "- name: sim-%d\n  address: 127.0.0.1\n  port: %d\n", i, lis.Addr().(*net.TCPAddr).Port)
	}
	path := filepath.Join(t.TempDir(), "endpoints.yaml")
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o600))
	return path
}

// run starts a Server and returns it with a stop function that waits for
// Run to return.
func run(t *testing.T, cfg Config) (*Server, func()) {
	t.Helper()
	cfg.GRPCAddr, cfg.HealthAddr, cfg.MetricsAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.Logger = testr.NewWithOptions(t, testr.Options{Verbosity: 1})
	cfg.ShutdownGrace = 5 * time.Second
	s, err := New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		require.NoError(t, <-done)
	}
	t.Cleanup(stop)
	return s, stop
}

func dial(t *testing.T, addr string, secure bool) *grpc.ClientConn {
	t.Helper()
	creds := insecure.NewCredentials()
	if secure {
		creds = credentials.NewTLS(&tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the EPP's self-signed certificate
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func headers(eos bool, kv ...string) *extprocv3.ProcessingRequest {
	hm := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hm, EndOfStream: eos}}}
}

func reqBody(b string) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: []byte(b), EndOfStream: true}}}
}

// route sends a request's headers and body and returns the destination.
func route(t *testing.T, stream extprocv3.ExternalProcessor_ProcessClient) string {
	t.Helper()
	require.NoError(t, stream.Send(headers(false, ":path", "/v1/completions", ":method", "POST", "x-request-id", "r1")))
	require.NoError(t, stream.Send(reqBody(`{"model":"m","prompt":"hello"}`)))
	first, err := stream.Recv()
	require.NoError(t, err)
	_, err = stream.Recv()
	require.NoError(t, err)
	return first.GetDynamicMetadata().GetFields()["envoy.lb"].GetStructValue().GetFields()["x-gateway-destination-endpoint"].GetStringValue()
}

func TestServesTLSWithHealth(t *testing.T) {
	s, _ := run(t, Config{SecureServing: true, EndpointsFile: sims(t, 2)})
	hc := healthpb.NewHealthClient(dial(t, s.HealthAddr(), false))
	require.Eventually(t, func() bool {
		r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "envoy.service.ext_proc.v3.ExternalProcessor"})
		return err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING
	}, 5*time.Second, 10*time.Millisecond)

	client := extprocv3.NewExternalProcessorClient(dial(t, s.GRPCAddr(), true))
	stream, err := client.Process(context.Background())
	require.NoError(t, err)
	dest := route(t, stream)
	require.True(t, strings.HasPrefix(dest, "127.0.0.1:"), dest)
	require.NoError(t, stream.CloseSend())

	// Plain-text clients cannot talk to a TLS server.
	plain := extprocv3.NewExternalProcessorClient(dial(t, s.GRPCAddr(), false))
	ps, err := plain.Process(context.Background())
	if err == nil {
		_, err = ps.Recv()
	}
	require.Error(t, err)
}

func counterValue(t *testing.T, s *Server, name, label, value string) float64 {
	t.Helper()
	fams, err := s.Registry().Gather()
	require.NoError(t, err)
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if hasLabel(m, label, value) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

const queueOnly = `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: prefix-cache-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
  - pluginRef: prefix-cache-scorer
  - pluginRef: max-score-picker
`

// writeAtomic replaces a file as editors and ConfigMap updates do.
func writeAtomic(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, []byte(content), 0o600))
	require.NoError(t, os.Rename(tmp, path))
}

const queueAndKV = `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: prefix-cache-scorer
- type: kv-cache-utilization-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
    weight: 2
  - pluginRef: prefix-cache-scorer
  - pluginRef: kv-cache-utilization-scorer
  - pluginRef: max-score-picker
`

func TestHotReload(t *testing.T) {
	cfgFile := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(cfgFile, []byte(queueOnly), 0o600))
	s, _ := run(t, Config{EndpointsFile: sims(t, 2), ConfigFile: cfgFile})
	first := s.gen.Load()
	prefix := first.loaded.Plugins["approx-prefix-cache-producer"]
	require.NotNil(t, prefix)

	// A valid change (a weight, a new scorer) takes over from the next
	// request; unchanged plugins keep their instances, and so their state.
	writeAtomic(t, cfgFile, queueAndKV)
	require.Eventually(t, func() bool { return counterValue(t, s, "switchyard_config_reloads_total", "result", "success") == 1 }, 5*time.Second, 10*time.Millisecond)
	second := s.gen.Load()
	require.NotSame(t, first, second)
	require.Contains(t, second.loaded.Plugins, "kv-cache-utilization-scorer")
	require.Same(t, prefix, second.loaded.Plugins["approx-prefix-cache-producer"], "the prefix index survives the reload")
	require.Same(t, first.loaded.Plugins["queue-scorer"], second.loaded.Plugins["queue-scorer"])

	// An invalid file is refused: a failure is counted and the last good
	// configuration stays.
	writeAtomic(t, cfgFile, strings.Replace(queueAndKV, "- type: max-score-picker", "- type: max-score-pickr", 1))
	require.Eventually(t, func() bool { return counterValue(t, s, "switchyard_config_reloads_total", "result", "failure") == 1 }, 5*time.Second, 10*time.Millisecond)
	require.Same(t, second, s.gen.Load())

	// The server still routes.
	client := extprocv3.NewExternalProcessorClient(dial(t, s.GRPCAddr(), false))
	stream, err := client.Process(context.Background())
	require.NoError(t, err)
	require.NotEmpty(t, route(t, stream))
	require.NoError(t, stream.CloseSend())
}

// Shutdown turns readiness off and lets open streams finish before Run
// returns.
func TestGracefulShutdownDrainsOpenStreams(t *testing.T) {
	s, stop := run(t, Config{EndpointsFile: sims(t, 1)})
	hc := healthpb.NewHealthClient(dial(t, s.HealthAddr(), false))
	require.Eventually(t, func() bool {
		r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "readiness"})
		return err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING
	}, 5*time.Second, 10*time.Millisecond)

	client := extprocv3.NewExternalProcessorClient(dial(t, s.GRPCAddr(), false))
	stream, err := client.Process(context.Background())
	require.NoError(t, err)
	route(t, stream)

	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	require.Eventually(t, func() bool { return !s.ready() }, 5*time.Second, 5*time.Millisecond, "readiness turns off while draining")
	select {
	case <-stopped:
		t.Fatal("Run returned while a stream was open")
	case <-time.After(100 * time.Millisecond):
	}
	// The open stream finishes its response.
	require.NoError(t, stream.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{{Key: ":status", RawValue: []byte("200")}}}, EndOfStream: true},
	}}))
	_, err = stream.Recv()
	require.NoError(t, err)
	require.NoError(t, stream.CloseSend())
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after the last stream ended")
	}
}

// A panicking stream handler (a plugin bug) fails its own stream with
// Internal; the process keeps serving.
func TestRecoverStream(t *testing.T) {
	s := &Server{log: testr.New(t)}
	err := s.recoverStream(nil, nil, &grpc.StreamServerInfo{FullMethod: "/x/y"}, func(any, grpc.ServerStream) error { panic("boom") })
	require.Equal(t, codes.Internal, status.Code(err))
	require.NoError(t, s.recoverStream(nil, nil, &grpc.StreamServerInfo{}, func(any, grpc.ServerStream) error { return nil }))
}

// Extra gatherers (controller-runtime's registry in Kubernetes mode) are
// served beside the server's own; families both carry (Go and process
// collectors) are served once, with no gathering error.
func TestMetricsMergesGatherers(t *testing.T) {
	extra := prometheus.NewRegistry()
	extra.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	extraCounter := prometheus.NewCounter(prometheus.CounterOpts{Name: "controller_runtime_test_total", Help: "test"})
	extra.MustRegister(extraCounter)
	extraCounter.Inc()
	s, _ := run(t, Config{EndpointsFile: sims(t, 1), Gatherers: []prometheus.Gatherer{extra}})
	get := func() string {
		resp, err := http.Get("http://" + s.MetricsAddr() + "/metrics")
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return string(b)
	}
	for range 3 {
		body := get()
		require.Contains(t, body, "controller_runtime_test_total 1")
		require.Equal(t, 1, strings.Count(body, "# TYPE go_goroutines gauge"))
		require.Contains(t, body, `promhttp_metric_handler_errors_total{cause="gathering"} 0`)
	}
}
