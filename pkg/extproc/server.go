package extproc

import (
	"errors"
	"io"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Protocol constants (reference/gie-epp.md §1).
const (
	// DestinationHeader and the envoy.lb metadata key carry the picked
	// endpoints, primary first, comma-separated.
	DestinationHeader = "x-gateway-destination-endpoint"
	// LBNamespace is the dynamic/filter metadata namespace of routing keys.
	LBNamespace = "envoy.lb"
	// SubsetNamespace and SubsetKey carry the gateway's subset hint.
	SubsetNamespace = "envoy.lb.subset_hint"
	SubsetKey       = "x-gateway-destination-endpoint-subset"
	// ServedKey is the endpoint that served, reported by the gateway on the
	// response path under LBNamespace.
	ServedKey = "x-gateway-destination-endpoint-served"
	// Control headers.
	ObjectiveHeader    = "x-gateway-inference-objective"
	FairnessHeader     = "x-gateway-inference-fairness-id"
	ModelRewriteHeader = "x-gateway-model-name-rewrite"
	RequestIDHeader    = "x-request-id"
	// DefaultFairnessID is the flow id of requests without a fairness header.
	DefaultFairnessID = "default-flow"
	// Conformance hooks: the test header restricts candidates; the served
	// endpoint is echoed to the client in the response header.
	TestSelectionHeader = "test-epp-endpoint-selection"
	ConformanceServed   = "x-conformance-test-served-endpoint"
	// BodyChunkLimit is the largest body chunk sent back in one
	// streamed_response (Envoy caps streamed chunks near 64 KiB).
	BodyChunkLimit = 62000
	// DefaultMaxRequestBodyBytes is --max-request-body-bytes' default.
	DefaultMaxRequestBodyBytes = 64 << 20
)

// Runtime is what one configuration contributes to the request path. A
// stream reads it once, when its body is complete, and keeps it to the end,
// so a configuration reload takes over from the next request.
type Runtime struct {
	Scheduler *scheduling.Scheduler
	// Format is the parser plugin's body format ("openai", "passthrough").
	Format string
}

// EndpointView is a published, immutable view of the pool's endpoints
// (datastore.Snapshot implements it).
type EndpointView interface {
	// All returns every endpoint. Read-only.
	All() []*scheduling.Endpoint
	// Ready returns the endpoints requests may go to (fresh metrics). Read-only.
	Ready() []*scheduling.Endpoint
}

// Stats receives per-endpoint request accounting (datastore.EndpointStats
// implements it).
type Stats interface {
	Start(tokens int64)
	FirstToken(ttft time.Duration)
	Finish(tokens int64, e2e time.Duration, ok bool)
}

// Recorder receives the request-path metrics (metrics.Metrics implements
// it).
type Recorder interface {
	RequestReceived(model, target string, priority int)
	RequestError(model, target, errorCode string)
	RequestSize(model, target string, bytes int)
	ResponseSize(model, target string, bytes int)
	RequestDuration(model, target string, d time.Duration)
	Tokens(model, target string, input, output, cached int)
	NormalizedTPOT(model, target string, d time.Duration, outputTokens int)
	TTFT(model, target string, d time.Duration)
	RunningRequests(model string, delta int)
	SchedulerE2E(d time.Duration)
	SchedulerAttempt(success bool, target, endpointName, namespace string, port int)
	Refusal(reason string)
}

// Options configures a Server.
type Options struct {
	// Runtime returns the current configuration; required.
	Runtime func() *Runtime
	// Endpoints returns the current endpoint view; required.
	Endpoints func() EndpointView
	// Stats returns an endpoint's accounting, or nil.
	Stats func(*scheduling.Endpoint) Stats
	// Objective resolves an InferenceObjective name to its priority; nil or
	// not found means priority 0.
	Objective func(name string) (priority int, ok bool)
	// Metrics records request metrics; nil records nothing.
	Metrics Recorder
	// Logger logs decisions: V(2) refusals, V(3) one line per request, V(4)
	// protocol detail.
	Logger logr.Logger
	// MaxRequestBodyBytes bounds the buffered request body (413 above);
	// 0 means DefaultMaxRequestBodyBytes.
	MaxRequestBodyBytes int64
	// MaxBufferedResponseBytes bounds a buffered (non-streamed) response
	// body; larger responses are passed through chunk by chunk without
	// usage. 0 means MaxRequestBodyBytes.
	MaxBufferedResponseBytes int64
	// DisableSubsetFilter ignores the gateway's subset hint
	// (--disable-endpoint-subset-filter).
	DisableSubsetFilter bool
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Server is the ext_proc service. It is safe for concurrent use: every
// stream has its own state.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer
	opts Options
	m    Recorder
	log  logr.Logger
	now  func() time.Time
}

// New returns a Server.
func New(opts Options) (*Server, error) {
	if opts.Runtime == nil || opts.Endpoints == nil {
		return nil, errors.New("extproc: Runtime and Endpoints are required")
	}
	if opts.MaxRequestBodyBytes <= 0 {
		opts.MaxRequestBodyBytes = DefaultMaxRequestBodyBytes
	}
	if opts.MaxBufferedResponseBytes <= 0 {
		opts.MaxBufferedResponseBytes = opts.MaxRequestBodyBytes
	}
	s := &Server{opts: opts, m: opts.Metrics, log: opts.Logger, now: opts.Now}
	if s.m == nil {
		s.m = nopRecorder{}
	}
	if s.log.GetSink() == nil {
		s.log = logr.Discard()
	}
	if s.now == nil {
		s.now = time.Now
	}
	return s, nil
}

// Process implements extprocv3.ExternalProcessorServer: one stream per
// HTTP request.
func (s *Server) Process(srv extprocv3.ExternalProcessor_ProcessServer) error {
	st := newStream(s, srv.Context())
	// Whatever ends the stream, a scheduled request completes exactly once.
	defer st.finish()
	for {
		msg, err := srv.Recv()
		if err == io.EOF || status.Code(err) == codes.Canceled {
			return nil
		}
		if err != nil {
			return status.Errorf(codes.Unknown, "cannot receive stream request: %v", err)
		}
		out, done := st.handle(msg)
		for _, r := range out {
			if err := srv.Send(r); err != nil {
				return status.Errorf(codes.Unknown, "failed to send response to the proxy: %v", err)
			}
		}
		if done {
			return nil
		}
	}
}

// format returns the runtime's body format, defaulting to openai.
func (r *Runtime) format() string {
	if r.Format == "" {
		return "openai"
	}
	return r.Format
}

type nopRecorder struct{}

func (nopRecorder) RequestReceived(string, string, int)                {}
func (nopRecorder) RequestError(string, string, string)                {}
func (nopRecorder) RequestSize(string, string, int)                    {}
func (nopRecorder) ResponseSize(string, string, int)                   {}
func (nopRecorder) RequestDuration(string, string, time.Duration)      {}
func (nopRecorder) Tokens(string, string, int, int, int)               {}
func (nopRecorder) NormalizedTPOT(string, string, time.Duration, int)  {}
func (nopRecorder) TTFT(string, string, time.Duration)                 {}
func (nopRecorder) RunningRequests(string, int)                        {}
func (nopRecorder) SchedulerE2E(time.Duration)                         {}
func (nopRecorder) SchedulerAttempt(bool, string, string, string, int) {}
func (nopRecorder) Refusal(string)                                     {}

var _ extprocv3.ExternalProcessorServer = (*Server)(nil)
