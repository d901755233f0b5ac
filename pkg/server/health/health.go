package health

import (
	"context"
	"sync/atomic"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// Service names the Checker knows.
const (
	// ServiceLiveness answers SERVING whenever the process answers.
	ServiceLiveness = "liveness"
	// ServiceReadiness answers SERVING iff the EPP is ready.
	ServiceReadiness = "readiness"
	// ServiceOverall is the empty name load balancers use for overall
	// health; it answers like ServiceReadiness.
	ServiceOverall = ""
	// ServiceExtProc is the ext_proc gRPC service name; it answers like
	// ServiceReadiness.
	ServiceExtProc = "envoy.service.ext_proc.v3.ExternalProcessor"
	// ServiceInferenceExtension is the name GIE's single-replica chart
	// probes; it answers like ServiceReadiness.
	ServiceInferenceExtension = "inference-extension"
)

// knownServices is the List order.
var knownServices = []string{ServiceOverall, ServiceLiveness, ServiceReadiness, ServiceExtProc, ServiceInferenceExtension}

// Checker implements grpc_health_v1.HealthServer. It is safe for
// concurrent use.
type Checker struct {
	healthpb.UnimplementedHealthServer

	ready          func() bool
	leaderElection bool
	logger         logr.Logger
	// last is the readiness last reported (0 unknown, 1 not ready, 2
	// ready), to log changes once instead of every probe.
	last atomic.Int32
}

var _ healthpb.HealthServer = (*Checker)(nil)

// Option configures a Checker.
type Option func(*Checker)

// WithLogger sets the logger: V(1) logs readiness changes as probes see
// them, V(4) every check. The default discards.
func WithLogger(l logr.Logger) Option { return func(c *Checker) { c.logger = l } }

// New returns a Checker. ready reports whether the EPP may receive traffic
// (pool synced, and leader when leader election is on); it is called on
// every check and must be cheap and safe for concurrent use. A nil ready
// means never ready. leaderElection selects GIE's two behaviours for
// unknown service names (see the package documentation).
func New(ready func() bool, leaderElection bool, opts ...Option) *Checker {
	if ready == nil {
		ready = func() bool { return false }
	}
	c := &Checker{ready: ready, leaderElection: leaderElection, logger: logr.Discard()}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Register registers c as the health service of s. Nil arguments are
// ignored.
func Register(s *grpc.Server, c *Checker) {
	if s == nil || c == nil {
		return
	}
	healthpb.RegisterHealthServer(s, c)
}

// Status returns the answer for one service name.
func (c *Checker) Status(service string) healthpb.HealthCheckResponse_ServingStatus {
	switch service {
	case ServiceLiveness:
		return healthpb.HealthCheckResponse_SERVING
	case ServiceReadiness, ServiceOverall, ServiceExtProc, ServiceInferenceExtension:
		return c.readiness()
	default:
		if c.leaderElection {
			return healthpb.HealthCheckResponse_SERVICE_UNKNOWN
		}
		// GIE with leader election off ignores the service name.
		return c.readiness()
	}
}

func (c *Checker) readiness() healthpb.HealthCheckResponse_ServingStatus {
	ready := c.ready()
	now := int32(1)
	if ready {
		now = 2
	}
	if prev := c.last.Swap(now); prev != now {
		c.logger.V(1).Info("readiness changed", "ready", ready, "leaderElection", c.leaderElection)
	}
	if ready {
		return healthpb.HealthCheckResponse_SERVING
	}
	return healthpb.HealthCheckResponse_NOT_SERVING
}

// Check implements grpc_health_v1.HealthServer. Unknown services get a
// SERVICE_UNKNOWN status, not an error (as GIE).
func (c *Checker) Check(_ context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	st := c.Status(req.GetService())
	if l := c.logger.V(4); l.Enabled() {
		l.Info("health check", "service", req.GetService(), "status", st.String())
	}
	return &healthpb.HealthCheckResponse{Status: st}, nil
}

// List implements grpc_health_v1.HealthServer: the status of every known
// service name.
func (c *Checker) List(context.Context, *healthpb.HealthListRequest) (*healthpb.HealthListResponse, error) {
	out := make(map[string]*healthpb.HealthCheckResponse, len(knownServices))
	for _, s := range knownServices {
		out[s] = &healthpb.HealthCheckResponse{Status: c.Status(s)}
	}
	return &healthpb.HealthListResponse{Statuses: out}, nil
}

// Watch implements grpc_health_v1.HealthServer. It is not implemented (as
// in GIE); clients poll Check instead.
func (c *Checker) Watch(*healthpb.HealthCheckRequest, grpc.ServerStreamingServer[healthpb.HealthCheckResponse]) error {
	return status.Error(codes.Unimplemented, "health: Watch is not implemented, poll Check")
}
