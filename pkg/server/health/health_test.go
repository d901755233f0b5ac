package health

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/go-logr/logr/testr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve starts a gRPC server with c on 127.0.0.1:0 and returns a client.
func serve(t *testing.T, c *Checker) healthpb.HealthClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := grpc.NewServer()
	Register(s, c)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Serve(lis)
	}()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = conn.Close()
		s.Stop()
		<-done
	})
	return healthpb.NewHealthClient(conn)
}

func check(t *testing.T, cl healthpb.HealthClient, service string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	resp, err := cl.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	require.NoError(t, err, "service %q", service)
	return resp.GetStatus()
}

const (
	serving    = healthpb.HealthCheckResponse_SERVING
	notServing = healthpb.HealthCheckResponse_NOT_SERVING
	unknown    = healthpb.HealthCheckResponse_SERVICE_UNKNOWN
)

func TestCheck(t *testing.T) {
	tests := []struct {
		service                 string
		leaderElection          bool
		beforeReady, afterReady healthpb.HealthCheckResponse_ServingStatus
	}{
		{ServiceLiveness, true, serving, serving},
		{ServiceLiveness, false, serving, serving}, // deviation from GIE: see doc.go
		{ServiceReadiness, true, notServing, serving},
		{ServiceReadiness, false, notServing, serving},
		{ServiceOverall, true, notServing, serving},
		{ServiceOverall, false, notServing, serving},
		{ServiceExtProc, true, notServing, serving},
		{ServiceExtProc, false, notServing, serving},
		{ServiceInferenceExtension, true, notServing, serving},
		{ServiceInferenceExtension, false, notServing, serving},
		{"no.such.Service", true, unknown, unknown},
		{"no.such.Service", false, notServing, serving}, // GIE: name ignored without leader election
	}
	for _, le := range []bool{true, false} {
		var ready atomic.Bool
		cl := serve(t, New(ready.Load, le, WithLogger(testr.NewWithOptions(t, testr.Options{Verbosity: 4}))))
		for _, tt := range tests {
			if tt.leaderElection != le {
				continue
			}
			assert.Equal(t, tt.beforeReady, check(t, cl, tt.service), "service %q leaderElection=%v before ready", tt.service, le)
		}
		ready.Store(true)
		for _, tt := range tests {
			if tt.leaderElection != le {
				continue
			}
			assert.Equal(t, tt.afterReady, check(t, cl, tt.service), "service %q leaderElection=%v after ready", tt.service, le)
		}
		ready.Store(false)
		assert.Equal(t, notServing, check(t, cl, ServiceReadiness), "readiness follows ready() back down")
	}
}

func TestList(t *testing.T) {
	var ready atomic.Bool
	cl := serve(t, New(ready.Load, true))
	list := func() map[string]healthpb.HealthCheckResponse_ServingStatus {
		resp, err := cl.List(t.Context(), &healthpb.HealthListRequest{})
		require.NoError(t, err)
		out := map[string]healthpb.HealthCheckResponse_ServingStatus{}
		for k, v := range resp.GetStatuses() {
			out[k] = v.GetStatus()
		}
		return out
	}
	assert.Equal(t, map[string]healthpb.HealthCheckResponse_ServingStatus{
		"": notServing, "liveness": serving, "readiness": notServing,
		"envoy.service.ext_proc.v3.ExternalProcessor": notServing, "inference-extension": notServing,
	}, list())
	ready.Store(true)
	for name, st := range list() {
		assert.Equal(t, serving, st, name)
	}
}

func TestWatchUnimplemented(t *testing.T) {
	cl := serve(t, New(func() bool { return true }, false))
	stream, err := cl.Watch(t.Context(), &healthpb.HealthCheckRequest{Service: ServiceReadiness})
	require.NoError(t, err)
	_, err = stream.Recv()
	require.Error(t, err)
	assert.Equal(t, codes.Unimplemented, status.Code(err))
}

func TestNilArguments(t *testing.T) {
	c := New(nil, false)
	assert.Equal(t, notServing, c.Status(ServiceReadiness), "nil ready means never ready")
	assert.Equal(t, serving, c.Status(ServiceLiveness))
	assert.NotPanics(t, func() { Register(nil, c); Register(grpc.NewServer(), nil) })
}

// TestExtProcServiceName: the constant matches the generated service
// descriptor.
func TestExtProcServiceName(t *testing.T) {
	assert.Equal(t, extprocv3.ExternalProcessor_ServiceDesc.ServiceName, ServiceExtProc)
}

func BenchmarkCheck(b *testing.B) {
	c := New(func() bool { return true }, true)
	req := &healthpb.HealthCheckRequest{Service: ServiceReadiness}
	b.ReportAllocs()
	for b.Loop() {
		_, _ = c.Check(context.Background(), req)
	}
}
