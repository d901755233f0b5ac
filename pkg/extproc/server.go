package extproc

import (
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/switchyard-ai/switchyard/pkg/multisite/sitestage"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/tracing"
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
	// DefaultMaxBufferedBytes is the default process-wide budget of
	// buffered body bytes (Options.MaxBufferedBytes,
	// --max-buffered-request-bytes): 256 MiB. The heap under a flood of
	// stalled bodies is a few times the budget (see Options.MaxBufferedBytes).
	DefaultMaxBufferedBytes = 256 << 20
	// DefaultRequestBodyTimeout is the default time a request has to
	// arrive in full (Options.RequestBodyTimeout, --request-body-timeout).
	DefaultRequestBodyTimeout = 60 * time.Second
)

// Runtime is what one configuration contributes to the request path. A
// stream reads it once, when its body is complete, and keeps it to the end,
// so a configuration reload takes over from the next request.
type Runtime struct {
	Scheduler *scheduling.Scheduler
	// Format is the parser plugin's body format ("openai", "passthrough").
	Format string
	// FallbackChains are the configuration's fallbackChains: model →
	// the models a retryably refused request is scheduled for next
	// (fallback.go). Read-only.
	FallbackChains map[string][]string
	// AnthropicCacheControlInjection is the configuration's
	// prefixRouting.anthropicCacheControlInjection (C-18,
	// cachecontrol.go).
	AnthropicCacheControlInjection bool
	// Flow, when set (the flowControl feature gate), holds each request
	// while the pool is saturated, before it is scheduled (queue.go).
	Flow FlowController
}

// EndpointView is a published, immutable view of the pool's endpoints
// (datastore.Snapshot implements it).
type EndpointView interface {
	// All returns every endpoint. Read-only.
	All() []*scheduling.Endpoint
	// Routable returns the endpoints requests may go to: eligible (not
	// failed by a health check, circuit breaker not open) and, unless
	// none of those is, with fresh metrics. Empty when nothing is
	// routable. Read-only.
	Routable() []*scheduling.Endpoint
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
	// BufferBudget is called once, by New, with the process-wide budget of
	// buffered body bytes and a function returning the bytes held now. The
	// recorder reads inUse when it is scraped, so the request path never
	// updates a metric per chunk. inUse is safe for concurrent use.
	BufferBudget(limit int64, inUse func() int64)
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
	// Logger logs decisions: each refusal in one line (V(0) for the
	// pool's trouble, rate-limited; V(1) otherwise; an error for a 5xx
	// that is the EPP's fault), V(3) one line per request, V(4) protocol
	// detail.
	Logger logr.Logger
	// MaxRequestBodyBytes bounds the buffered request body (413 above);
	// 0 means DefaultMaxRequestBodyBytes.
	MaxRequestBodyBytes int64
	// MaxBufferedResponseBytes bounds a buffered (non-streamed) response
	// body; larger responses are passed through chunk by chunk without
	// usage. 0 means MaxRequestBodyBytes.
	MaxBufferedResponseBytes int64
	// MaxBufferedBytes is the process-wide budget of body bytes that the
	// streams of this Server hold while they wait for the rest of a body
	// (--max-buffered-request-bytes). Every request body chunk that does not
	// end its body is counted from the moment it is appended until the
	// stream lets the body go (routed, refused or ended), and so is every
	// chunk of a buffered (non-streamed) response before its last one.
	// The chunk that completes a body needs no budget: it is routed (or the
	// response answered) in the same step, without waiting for the client,
	// so a small request is served even while the budget is used up.
	//
	// A request chunk that does not fit in what is left is refused with 503
	// and reason buffer_budget_exhausted (Retry-After: 1); a response chunk
	// that does not fit switches that response to passthrough (no usage is
	// read), as MaxBufferedResponseBytes does. MaxRequestBodyBytes (413) is
	// checked first.
	//
	// Streams that hold more than 256 KiB may fill only three quarters of
	// the budget; the last quarter is kept for streams that hold little
	// (normal requests, done in milliseconds), so a flood of large stalled
	// bodies cannot starve them.
	//
	// The budget counts body bytes; the heap holds somewhat more (slice
	// growth, gRPC message buffers), so size memory limits with a margin.
	// 0 means DefaultMaxBufferedBytes; negative is an error; its large tier
	// (three quarters) must not be below MaxRequestBodyBytes (a body the
	// budget can never hold would be told to retry forever).
	MaxBufferedBytes int64
	// RequestBodyTimeout is how long a stream may take, from its start
	// (the first receive), until its request is complete: end_of_stream on
	// the request headers or body, or the request trailers
	// (--request-body-timeout). When it passes, the stream is answered with
	// 408 and reason body_timeout and ends, also when nothing was received
	// at all. It does not bound the response, which the model server
	// controls. 0 means DefaultRequestBodyTimeout; negative is an error.
	RequestBodyTimeout time.Duration
	// DisableSubsetFilter ignores the gateway's subset hint
	// (--disable-endpoint-subset-filter).
	DisableSubsetFilter bool
	// ConformanceTestHeaders turns on the GIE conformance hooks
	// (--enable-conformance-test-headers): the request header
	// test-epp-endpoint-selection restricts the candidate endpoints (an
	// address matching nothing is a 503), and the response carries
	// x-conformance-test-served-endpoint, the endpoint the gateway reports
	// as served. When false (the default), extproc ignores the selection
	// header, removes it from the request forwarded upstream and sets no
	// served echo; the opt-in header-based-testing-filter plugin still sees
	// it in scheduling.Request.Headers. See "Trusted headers" in the
	// package documentation.
	ConformanceTestHeaders bool
	// FallbackMetrics counts fallback chains taken
	// (NewFallbackMetrics); nil counts nothing.
	FallbackMetrics *FallbackMetrics
	// Sites is the multi-site site stage (issue 13, site.go): with it, a
	// complete request first gets a site; the local site is scheduled
	// here as without it, a remote site's gateway becomes the destination
	// (nothing is scheduled locally), and saturation shedding is left to
	// the stage's shedding rule. nil: single site, as before.
	Sites *sitestage.Stage
	// Decisions records decisions and emits endpoint scores (decisions.go,
	// issue 16); the zero value does neither.
	Decisions DecisionOptions
	// Tracer, when set (--tracing), traces every request (pkg/tracing):
	// the stream's span and its children, and the W3C trace context on
	// the upstream request headers. nil traces nothing, at no cost.
	Tracer *tracing.Tracer
	// Now is the clock of the request metrics; nil means time.Now. The body
	// deadline always runs on the real clock.
	Now func() time.Time
}

// Server is the ext_proc service. It is safe for concurrent use: every
// stream has its own state.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer
	opts    Options
	m       Recorder
	flowRec FlowRecorder // m, when it records flow-control metrics
	log     logr.Logger
	now     func() time.Time
	budget  budget
	// noEndpointsLog rate-limits the V(0) line of 503 no_endpoints.
	noEndpointsLog logLimiter
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
	switch {
	case opts.MaxBufferedBytes < 0:
		return nil, fmt.Errorf("extproc: MaxBufferedBytes must not be negative, got %d", opts.MaxBufferedBytes)
	case opts.MaxBufferedBytes == 0:
		opts.MaxBufferedBytes = DefaultMaxBufferedBytes
	}
	if large := newBudget(opts.MaxBufferedBytes).large; large < opts.MaxRequestBodyBytes {
		return nil, fmt.Errorf("extproc: MaxBufferedBytes (%d) must be at least 4/3 of MaxRequestBodyBytes (%d): a large body may use three quarters of the budget", opts.MaxBufferedBytes, opts.MaxRequestBodyBytes)
	}
	switch {
	case opts.RequestBodyTimeout < 0:
		return nil, fmt.Errorf("extproc: RequestBodyTimeout must not be negative, got %s", opts.RequestBodyTimeout)
	case opts.RequestBodyTimeout == 0:
		opts.RequestBodyTimeout = DefaultRequestBodyTimeout
	}
	s := &Server{opts: opts, m: opts.Metrics, log: opts.Logger, now: opts.Now}
	b := newBudget(opts.MaxBufferedBytes)
	s.budget.limit, s.budget.large = b.limit, b.large
	if s.m == nil {
		s.m = nopRecorder{}
	}
	s.flowRec, _ = s.m.(FlowRecorder)
	s.m.BufferBudget(s.budget.limit, s.budget.inUse)
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
//
// A serving goroutine (serve) receives, handles and sends every message of
// the stream; Process waits for it to end, or for the body deadline
// (RequestBodyTimeout), whichever comes first. That way the deadline can
// end a stream whose client stalls while a message costs no hand-off
// between goroutines: the goroutine that gRPC wakes with a message is the
// one that answers it. The stream's lock (stream.mu) is held for each
// message's handling and sending, never while receiving; when the deadline
// passes before the request was forwarded, Process takes the lock, marks
// the stream over (serve then leaves without touching it again), answers
// 408 and returns, which ends the stream and with it serve's pending
// receive. A panic in the serving goroutine (a plugin bug) is carried to
// Process and raised there, where the gRPC server's interceptors recover
// it as they would a panic of the handler itself. A serving goroutine that
// ends with runtime.Goexit (neither a return nor a panic) fails the stream
// with Internal.
func (s *Server) Process(srv extprocv3.ExternalProcessor_ProcessServer) error {
	st := newStream(s, srv.Context())
	// Whatever ends the stream, a scheduled request completes exactly once
	// and the buffer budget it holds is given back. Process owns the stream
	// when it returns: serve has ended, or has been told to leave it.
	defer st.finish()

	done := make(chan served, 1)
	go st.serve(srv, done)
	deadline := time.NewTimer(s.opts.RequestBodyTimeout)
	defer deadline.Stop()
	select {
	case r := <-done:
		return r.result()
	case <-deadline.C:
	}
	if out, expired := st.expire(); expired {
		return sendAll(srv, out)
	}
	// The request was forwarded in time: the deadline no longer applies.
	return (<-done).result()
}

// served is how serve ended: the handler's error, or a panic.
type served struct {
	err      error
	panicked *streamPanic
}

// result returns the handler's error, or raises the serving goroutine's
// panic in the caller's.
func (r served) result() error {
	if r.panicked != nil {
		panic(r.panicked)
	}
	return r.err
}

// streamPanic is a panic of the serving goroutine, raised again in
// Process with the stack where it happened (the one a recovering
// interceptor prints is Process's own).
type streamPanic struct {
	value any
	stack []byte
}

func (p *streamPanic) Error() string {
	return fmt.Sprintf("%v\n\npanicked in the stream's serving goroutine:\n%s", p.value, p.stack)
}

// Unwrap returns the panic value when it is an error, so interceptors can
// match it with errors.Is and errors.As.
func (p *streamPanic) Unwrap() error {
	err, _ := p.value.(error)
	return err
}

// serve is the stream's serving goroutine: it receives each message,
// handles it and sends the responses, until the stream ends or Process has
// taken the stream over (expire). It never blocks on done: done has room
// for its one result, and serve sends at most one.
//
// A handler that ends the goroutine without returning or panicking
// (runtime.Goexit, as t.FailNow does) still gives Process a result, an
// Internal error, so the stream cannot wait for one forever.
func (st *stream) serve(srv extprocv3.ExternalProcessor_ProcessServer, done chan<- served) {
	result := &served{err: errHandlerExited}
	defer func() {
		if result != nil {
			done <- *result
		}
	}()
	for {
		msg, err := srv.Recv()
		if r, ended := st.step(srv, msg, err); ended {
			result = r
			return
		}
	}
}

// errHandlerExited is the stream's result when its serving goroutine
// exited in the middle of a step.
var errHandlerExited = status.Error(codes.Internal, "the stream's handler exited its goroutine without returning")

// step handles one result of Recv under the stream's lock. It reports
// whether the stream has ended, with the result for Process (nil when
// Process had taken the stream over and is not waiting for one).
func (st *stream) step(srv extprocv3.ExternalProcessor_ProcessServer, msg *extprocv3.ProcessingRequest, recvErr error) (r *served, ended bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.over {
		return nil, true
	}
	returned := false
	defer func() {
		if v := recover(); v != nil {
			st.over = true
			r, ended = &served{panicked: &streamPanic{value: v, stack: debug.Stack()}}, true
		} else if !returned {
			// runtime.Goexit: serve reports errHandlerExited, and the
			// stream is no longer served.
			st.over = true
		}
	}()
	var err error
	if recvErr != nil {
		err = recvError(recvErr)
	} else {
		out, end := st.handle(msg)
		if err = sendAll(srv, out); err == nil && !end {
			returned = true
			return nil, false
		}
	}
	st.over = true
	returned = true
	return &served{err: err}, true
}

// expire answers 408 for a request that is not complete at the body
// deadline and takes the stream over from serve. It returns false when the
// request was forwarded in time or the stream has already ended: then
// serve still owns the stream, or has its result on the way.
func (st *stream) expire() ([]*extprocv3.ProcessingResponse, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.over || st.phase >= phaseForwarded {
		return nil, false
	}
	st.over = true
	out, _ := st.timedOut()
	return out, true
}

// recvError maps a receive error to the handler's result: the end of the
// stream and a cancelled stream end it cleanly.
func recvError(err error) error {
	if err == io.EOF || status.Code(err) == codes.Canceled {
		return nil
	}
	return status.Errorf(codes.Unknown, "cannot receive stream request: %v", err)
}

func sendAll(srv extprocv3.ExternalProcessor_ProcessServer, out []*extprocv3.ProcessingResponse) error {
	for _, r := range out {
		if err := srv.Send(r); err != nil {
			return status.Errorf(codes.Unknown, "failed to send response to the proxy: %v", err)
		}
	}
	return nil
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
func (nopRecorder) BufferBudget(int64, func() int64)                   {}

var _ extprocv3.ExternalProcessorServer = (*Server)(nil)
