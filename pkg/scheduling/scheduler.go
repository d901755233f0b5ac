package scheduling

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-ai/switchyard/pkg/tracing"
)

// SchedulerConfig lists the plugins a Scheduler runs at each extension
// point. The configuration loader fills it.
type SchedulerConfig struct {
	ProfileHandler     ProfileHandler
	Profiles           []*Profile
	Producers          []DataProducer
	Admitters          []Admitter
	SaturationDetector SaturationDetector
	PreRequest         []PreRequest
	ResponseReceived   []ResponseReceived
	ResponseStreaming  []ResponseStreaming
	ResponseComplete   []ResponseComplete
	Metrics            *FrameworkMetrics
}

type timed[T Plugin] struct {
	p   T
	obs prometheus.Observer
}

func timeAll[T Plugin](m *FrameworkMetrics, point string, ps []T) []timed[T] {
	out := make([]timed[T], len(ps))
	for i, p := range ps {
		out[i] = timed[T]{p: p, obs: m.observer(point, p)}
	}
	return out
}

// Scheduler runs one configuration's plugins for each request. It is
// immutable and safe for concurrent use.
type Scheduler struct {
	handler    ProfileHandler
	handlerObs prometheus.Observer
	resultsObs prometheus.Observer
	profiles   map[string]*Profile
	producers  []timed[DataProducer]
	admitters  []timed[Admitter]
	saturation SaturationDetector
	preRequest []timed[PreRequest]
	received   []timed[ResponseReceived]
	streaming  []timed[ResponseStreaming]
	complete   []timed[ResponseComplete]
}

// NewScheduler checks the configuration and orders the data producers by
// their dependencies.
func NewScheduler(cfg SchedulerConfig) (*Scheduler, error) {
	if cfg.ProfileHandler == nil {
		return nil, errors.New("no profile handler")
	}
	if len(cfg.Profiles) == 0 {
		return nil, errors.New("no scheduling profile")
	}
	producers, err := OrderProducers(cfg.Producers)
	if err != nil {
		return nil, err
	}
	m := cfg.Metrics
	s := &Scheduler{
		handler:    cfg.ProfileHandler,
		handlerObs: m.observer(PointProfileHandler, cfg.ProfileHandler),
		resultsObs: m.observer(PointProcessResults, cfg.ProfileHandler),
		profiles:   make(map[string]*Profile, len(cfg.Profiles)),
		producers:  timeAll(m, PointDataProducer, producers),
		admitters:  timeAll(m, PointAdmitter, cfg.Admitters),
		saturation: cfg.SaturationDetector,
		preRequest: timeAll(m, PointPreRequest, cfg.PreRequest),
		received:   timeAll(m, PointResponseReceived, cfg.ResponseReceived),
		streaming:  timeAll(m, PointResponseStreaming, cfg.ResponseStreaming),
		complete:   timeAll(m, PointResponseComplete, cfg.ResponseComplete),
	}
	for _, p := range cfg.Profiles {
		if _, dup := s.profiles[p.Name()]; dup {
			return nil, fmt.Errorf("duplicate profile %q", p.Name())
		}
		s.profiles[p.Name()] = p
	}
	return s, nil
}

// OrderProducers sorts producers so that each runs after the producers of
// the keys it consumes. Among producers whose dependencies are met, the one
// configured first runs first, so independent producers keep their
// configured order. A key produced twice and a dependency cycle are errors.
func OrderProducers(producers []DataProducer) ([]DataProducer, error) {
	producerOf := map[string]int{}
	for i, p := range producers {
		for _, k := range p.Produces() {
			if j, dup := producerOf[k]; dup && j != i {
				return nil, fmt.Errorf("data key %q is produced by both %s and %s; configure one", k, producers[j].TypedName(), p.TypedName())
			}
			producerOf[k] = i
		}
	}
	// deps[i] are the producers i waits for.
	deps := make([]map[int]bool, len(producers))
	for i, p := range producers {
		deps[i] = map[int]bool{}
		for _, k := range p.Consumes() {
			if j, ok := producerOf[k]; ok && j != i {
				deps[i][j] = true
			}
		}
	}
	done := make([]bool, len(producers))
	out := make([]DataProducer, 0, len(producers))
	for len(out) < len(producers) {
		next := -1
		for i := range producers {
			if done[i] {
				continue
			}
			ready := true
			for j := range deps[i] {
				if !done[j] {
					ready = false
					break
				}
			}
			if ready {
				next = i
				break
			}
		}
		if next < 0 {
			return nil, fmt.Errorf("data producers depend on each other in a cycle: %s", describeCycle(producers, deps, done))
		}
		done[next] = true
		out = append(out, producers[next])
	}
	return out, nil
}

// describeCycle follows unmet dependencies from the first waiting producer
// until one repeats, and returns the cycle as "a -> b -> a".
func describeCycle(producers []DataProducer, deps []map[int]bool, done []bool) string {
	cur := -1
	for i := range producers {
		if !done[i] {
			cur = i
			break
		}
	}
	seenAt := map[int]int{}
	var path []int
	for {
		if at, seen := seenAt[cur]; seen {
			path = append(path[at:], cur)
			break
		}
		seenAt[cur] = len(path)
		path = append(path, cur)
		next := -1
		for j := range producers { // lowest index first, for a stable message
			if deps[cur][j] && !done[j] {
				next = j
				break
			}
		}
		cur = next
	}
	names := make([]string, len(path))
	for i, p := range path {
		names[i] = producers[p].TypedName().Name
	}
	return strings.Join(names, " -> ")
}

// Profiles returns the scheduler's profiles sorted by name.
func (s *Scheduler) Profiles() []*Profile {
	out := make([]*Profile, 0, len(s.profiles))
	for _, p := range s.profiles {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out
}

// RefusalError is returned by Process when the request is refused.
type RefusalError struct{ Refusal Refusal }

func (e *RefusalError) Error() string {
	return fmt.Sprintf("request refused (%d %s): %s", e.Refusal.StatusCode, e.Refusal.Reason, e.Refusal.Message)
}

// Process runs the whole scheduling path for one request: data producers,
// admission, the profiles, then the PreRequest hooks. A refusal is returned
// as *RefusalError; a scheduling failure wraps ErrNoEndpoints.
func (s *Scheduler) Process(ctx context.Context, req *Request, candidates []*Endpoint) (*Result, error) {
	ctx, span := startProcess(ctx, req, candidates)
	defer span.End()
	s.Prepare(ctx, req, candidates)
	if r := s.Admit(ctx, req, candidates); r != nil {
		spanRefused(span, r)
		return nil, &RefusalError{Refusal: *r}
	}
	res, err := s.Schedule(ctx, req, candidates)
	if err != nil {
		spanFailed(span, err)
		return nil, err
	}
	s.PreRequest(ctx, req, res)
	spanChose(span, res.Targets())
	return res, nil
}

// Prepare runs the data producers in dependency order.
func (s *Scheduler) Prepare(ctx context.Context, req *Request, candidates []*Endpoint) {
	traced := tracing.Recording(ctx)
	for _, t := range s.producers {
		start := time.Now()
		pctx, span := pluginSpan(traced, ctx, PointDataProducer, t.p)
		t.p.Produce(pctx, req, candidates)
		span.End()
		t.obs.Observe(time.Since(start).Seconds())
	}
}

// Admit applies saturation shedding (a request with a negative priority is
// refused with 429 when the candidates are saturated, unless
// Request.SkipSaturationShedding: multi-site) and then every
// Admitter; the first refusal wins.
func (s *Scheduler) Admit(ctx context.Context, req *Request, candidates []*Endpoint) *Refusal {
	if req.Priority < 0 && !req.SkipSaturationShedding && s.saturation != nil && s.saturation.Saturation(ctx, req, candidates) >= 1.0 {
		return &Refusal{StatusCode: http.StatusTooManyRequests, Reason: "saturated", Message: "system saturated, sheddable request dropped"}
	}
	traced := tracing.Recording(ctx)
	for _, t := range s.admitters {
		start := time.Now()
		actx, span := pluginSpan(traced, ctx, PointAdmitter, t.p)
		r := t.p.Admit(actx, req, candidates)
		t.obs.Observe(time.Since(start).Seconds())
		if r != nil {
			spanRefused(span, r)
			span.End()
			return r
		}
		span.End()
	}
	return nil
}

// Schedule runs the profiles the profile handler picks, round after round,
// and returns the handler's chosen result.
func (s *Scheduler) Schedule(ctx context.Context, req *Request, candidates []*Endpoint) (*Result, error) {
	if len(candidates) == 0 {
		return nil, ErrNoEndpoints
	}
	results := make(map[string]*ProfileResult, len(s.profiles))
	var errs []error
	traced := tracing.Recording(ctx)
	// Each round must run at least one new profile, so there are at most
	// as many rounds as profiles; a handler that keeps asking for profiles
	// that already ran cannot loop forever.
	for round := 0; round <= len(s.profiles); round++ {
		start := time.Now()
		hctx, span := pluginSpan(traced, ctx, PointProfileHandler, s.handler)
		next := s.handler.Pick(hctx, req, s.profiles, results)
		span.End()
		s.handlerObs.Observe(time.Since(start).Seconds())
		ran := 0
		for _, p := range next {
			if _, done := results[p.Name()]; done {
				continue // each profile runs at most once per request
			}
			ran++
			res, err := p.Run(ctx, req, candidates)
			if err != nil {
				errs = append(errs, err)
			}
			results[p.Name()] = res
		}
		if ran == 0 {
			break
		}
	}
	if len(results) == 0 {
		return nil, fmt.Errorf("profile handler %s ran no profile: %w", s.handler.TypedName(), ErrNoEndpoints)
	}
	start := time.Now()
	rctx, span := pluginSpan(traced, ctx, PointProcessResults, s.handler)
	res, err := s.handler.ProcessResults(rctx, req, results)
	span.End()
	s.resultsObs.Observe(time.Since(start).Seconds())
	if err != nil {
		return nil, errors.Join(append([]error{err}, errs...)...)
	}
	if res == nil {
		return nil, errors.Join(append([]error{fmt.Errorf("profile handler %s returned no result: %w", s.handler.TypedName(), ErrNoEndpoints)}, errs...)...)
	}
	if len(res.Targets()) == 0 {
		return nil, errors.Join(append([]error{fmt.Errorf("primary profile %q has no result: %w", res.PrimaryProfile, ErrNoEndpoints)}, errs...)...)
	}
	return res, nil
}

// Request lifecycle states: PreRequest hooks and ResponseComplete hooks
// are ordered without holding a lock while hooks run, so a hook may call
// back into the Scheduler for its own request.
const (
	lifecycleIdle       int32 = iota // not forwarded yet
	lifecyclePreRunning              // PreRequest hooks are running
	lifecyclePreDone                 // forwarded; PreRequest hooks ran
	lifecycleCompleted               // ResponseComplete hooks ran or are running
)

// completion is a ResponseComplete call deferred while PreRequest hooks run.
type completion struct {
	resp   *Response
	target *Endpoint
}

// PreRequest runs the PreRequest hooks. It runs again if the request is
// scheduled again (a retry) before it completes, so hooks can move what
// they counted; it does not run once ResponseComplete has run (the client
// went away first). A ResponseComplete that arrives while the hooks run,
// from a hook or another goroutine, is carried out when they finish.
func (s *Scheduler) PreRequest(ctx context.Context, req *Request, res *Result) {
	if !req.lifecycle.CompareAndSwap(lifecycleIdle, lifecyclePreRunning) &&
		!req.lifecycle.CompareAndSwap(lifecyclePreDone, lifecyclePreRunning) {
		return // completed, or PreRequest already running
	}
	traced := tracing.Recording(ctx)
	for _, t := range s.preRequest {
		start := time.Now()
		pctx, span := pluginSpan(traced, ctx, PointPreRequest, t.p)
		t.p.PreRequest(pctx, req, res)
		span.End()
		t.obs.Observe(time.Since(start).Seconds())
	}
	req.lifecycle.Store(lifecyclePreDone)
	if c := req.pending.Load(); c != nil && req.lifecycle.CompareAndSwap(lifecyclePreDone, lifecycleCompleted) {
		s.runComplete(ctx, req, c.resp, c.target)
	}
}

// ResponseReceived runs the response-header hooks.
func (s *Scheduler) ResponseReceived(ctx context.Context, req *Request, resp *Response, target *Endpoint) {
	traced := tracing.Recording(ctx)
	for _, t := range s.received {
		start := time.Now()
		rctx, span := pluginSpan(traced, ctx, PointResponseReceived, t.p)
		t.p.ResponseReceived(rctx, req, resp, target)
		span.End()
		t.obs.Observe(time.Since(start).Seconds())
	}
}

// ResponseStreaming runs the body-chunk hooks.
func (s *Scheduler) ResponseStreaming(ctx context.Context, req *Request, resp *Response, chunk []byte, target *Endpoint) {
	for _, t := range s.streaming {
		start := time.Now()
		t.p.ResponseStreaming(ctx, req, resp, chunk, target)
		t.obs.Observe(time.Since(start).Seconds())
	}
}

// ResponseComplete runs the completion hooks once per request: callers
// may call it from every exit path (end of stream, disconnect, error) and
// only the first call counts. When PreRequest hooks of the request are
// running, the hooks run as soon as they finish. It reports whether this
// call ran the hooks or had them run.
func (s *Scheduler) ResponseComplete(ctx context.Context, req *Request, resp *Response, target *Endpoint) bool {
	if !req.pending.CompareAndSwap(nil, &completion{resp: resp, target: target}) {
		return false // an earlier call counts
	}
	for {
		switch st := req.lifecycle.Load(); st {
		case lifecycleCompleted:
			return false
		case lifecyclePreRunning:
			// PreRequest sees pending when its hooks finish. If it finished
			// just now, the loop takes the completion itself.
			if req.lifecycle.Load() == lifecyclePreRunning {
				return true
			}
		default:
			if req.lifecycle.CompareAndSwap(st, lifecycleCompleted) {
				s.runComplete(ctx, req, resp, target)
				return true
			}
		}
	}
}

func (s *Scheduler) runComplete(ctx context.Context, req *Request, resp *Response, target *Endpoint) {
	traced := tracing.Recording(ctx)
	for _, t := range s.complete {
		start := time.Now()
		cctx, span := pluginSpan(traced, ctx, PointResponseComplete, t.p)
		t.p.ResponseComplete(cctx, req, resp, target)
		span.End()
		t.obs.Observe(time.Since(start).Seconds())
	}
}
