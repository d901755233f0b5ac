// Package circuitbreaker implements the circuit-breaker plugin: a
// per-endpoint breaker that opens after consecutiveFailures failed
// requests in a row, keeps the endpoint out of rotation for openDuration,
// then lets at most halfOpenRequests trial requests through at a time;
// successThreshold successes close it, a failure opens it again.
//
// A failure is a response with a 5xx status; a connection failure, which
// the gateway reports by falling back to another endpoint of the list (the
// served endpoint differs from the primary target: the primary failed);
// and, with latencyAsFailure, a success slower than ttftMs (streamed
// responses, time to the first body chunk) or totalMs (buffered
// responses, time to completion). A client that goes away decides
// nothing.
//
// The breaker's state is written to each endpoint's
// scheduling.EndpointHealth (SetBreaker): the datastore excludes an open
// breaker's endpoint from the routable set, the all-stale fail-open
// included, and republishes when the open interval ends. The plugin's
// Filter limits the half-open trials; its hooks (PreRequest,
// ResponseStreaming, ResponseComplete) count the outcomes. It is a
// scheduling.Runner only to learn the pool: when it is removed (Close
// without a successor) it closes every endpoint's breaker, the ones it
// adopted from a predecessor and never saw included.
//
// # Concurrency
//
// Per-endpoint state sits behind a per-endpoint mutex, found through a
// sync.Map keyed by endpoint key; no lock is shared by all requests. The
// Filter costs one atomic load while every breaker is closed (the usual
// case) and returns its input unchanged.
package circuitbreaker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-ai/switchyard/pkg/plugins/health/internal/healthparam"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Type is the plugin type used in configuration.
const Type = "circuit-breaker"

// Bounds of the parameters.
const (
	maxCount        = 1000
	minOpenDuration = 10 * time.Millisecond
	maxOpenDuration = time.Hour
	maxLatencyMs    = 3_600_000
	maxTrials       = 100
)

// reservationTTL bounds how long a trial slot the Filter reserved for a
// request waits for that request's PreRequest. Scheduling takes
// microseconds; a request whose scheduling failed after the Filter (a
// later filter left nothing) never runs PreRequest, and its slot frees
// after this.
const reservationTTL = time.Second

// LatencyAsFailure counts a slow success as a failure (0: off).
type LatencyAsFailure struct {
	// TTFTMs is the longest time to first token, in milliseconds, of a
	// streamed response that counts as a success.
	TTFTMs int64 `json:"ttftMs"`
	// TotalMs is the longest time to completion, in milliseconds, of a
	// buffered (non-streamed) response that counts as a success.
	TotalMs int64 `json:"totalMs"`
}

// Params are the plugin's parameters.
type Params struct {
	// ConsecutiveFailures opens the breaker; default 5 (1..1000).
	ConsecutiveFailures int `json:"consecutiveFailures"`
	// OpenDuration is how long an open breaker keeps the endpoint out
	// before the half-open trials; default 30s (10ms..1h).
	OpenDuration healthparam.Duration `json:"openDuration"`
	// HalfOpenRequests bounds the trial requests in flight at once while
	// half-open; default 1 (1..100).
	HalfOpenRequests int `json:"halfOpenRequests"`
	// SuccessThreshold is how many trial successes close the breaker;
	// default 2 (1..1000).
	SuccessThreshold int `json:"successThreshold"`
	// LatencyAsFailure counts slow successes as failures; off by default.
	LatencyAsFailure LatencyAsFailure `json:"latencyAsFailure"`
}

// DefaultParams returns the defaults. openDuration is 30 s, Envoy's
// outlier-detection base ejection time and the guide's health-check
// interval: an endpoint a breaker opened on is tried again about when a
// health check would have looked at it again.
func DefaultParams() Params {
	return Params{
		ConsecutiveFailures: 5,
		OpenDuration:        healthparam.D(30 * time.Second),
		HalfOpenRequests:    1,
		SuccessThreshold:    2,
	}
}

// Validate reports every invalid parameter, prefixed with its name.
func (p *Params) Validate() error {
	var errs []error
	for _, f := range []struct {
		name   string
		v, max int
	}{
		{"consecutiveFailures", p.ConsecutiveFailures, maxCount},
		{"halfOpenRequests", p.HalfOpenRequests, maxTrials},
		{"successThreshold", p.SuccessThreshold, maxCount},
	} {
		if f.v < 1 || f.v > f.max {
			errs = append(errs, fmt.Errorf("%s: must be 1..%d, got %d", f.name, f.max, f.v))
		}
	}
	if err := p.OpenDuration.Check("openDuration", minOpenDuration, maxOpenDuration); err != nil {
		errs = append(errs, err)
	}
	for _, f := range []struct {
		name string
		v    int64
	}{{"latencyAsFailure.ttftMs", p.LatencyAsFailure.TTFTMs}, {"latencyAsFailure.totalMs", p.LatencyAsFailure.TotalMs}} {
		if f.v < 0 || f.v > maxLatencyMs {
			errs = append(errs, fmt.Errorf("%s: must be 0 (off) or 1..%d, got %d", f.name, maxLatencyMs, f.v))
		}
	}
	return errors.Join(errs...)
}

// Breaker is a circuit-breaker instance.
type Breaker struct {
	typedName scheduling.TypedName
	p         Params
	ttft      time.Duration
	total     time.Duration
	log       logr.Logger
	m         *breakerMetrics
	now       func() time.Time
	reqKey    scheduling.StateKey[*reqState]

	states sync.Map // endpoint key → *state
	// hot holds the states of the endpoints whose breaker is not closed,
	// copied on write (transitions are rare): the Filter reads it with one
	// atomic load, and returns at once while it is empty.
	// It is keyed by Endpoint.KeyHash (no string hashing per candidate).
	hot    atomic.Pointer[map[uint64]*state]
	closed atomic.Bool
	// pool is the host's view of the pool (Run), kept after Run returns:
	// Close resets the breaker states of every endpoint in it, those this
	// instance adopted from a predecessor without ever touching them
	// included.
	pool atomic.Pointer[poolEnv]
}

type poolEnv struct{ env scheduling.RunEnv }

// state is one endpoint's breaker.
type state struct {
	mu     sync.Mutex
	key    string
	hash   uint64 // Endpoint.KeyHash
	health *scheduling.EndpointHealth
	// dropped: Forget removed the state; it is no longer hot.
	dropped bool
	st      scheduling.BreakerState
	// gen changes at every transition: outcomes of requests started in
	// another generation are ignored.
	gen       uint64
	failures  int // consecutive, while closed
	successes int // trial successes, while half-open
	openUntil time.Time
	// slots are the half-open trial slots: 0 free, > 0 reserved by a
	// Filter at that time (unix ns), slotRunning for a trial in flight.
	slots []int64
}

const slotRunning = -1

// reqState is what the breaker remembers of one request.
type reqState struct {
	// primary is the endpoint the request was forwarded to first, at
	// primaryAddr (host:port, as the gateway reports the served one).
	primary     *state
	primaryAddr string
	gen         uint64
	slot        int // the trial slot it runs in, or -1
	token       int64
	start       time.Time
	ttft        time.Duration // 0 until the first chunk of a streamed response
	// reservations are the trial slots the Filter reserved (usually none).
	reservations []reservation
}

type reservation struct {
	s     *state
	slot  int
	token int64
}

// New returns a circuit-breaker.
func New(name string, p Params, h scheduling.Handle) (*Breaker, error) {
	if name == "" {
		name = Type
	}
	m, err := newBreakerMetrics(h.Registerer())
	if err != nil {
		return nil, err
	}
	return &Breaker{
		typedName: scheduling.TypedName{Type: Type, Name: name},
		p:         p,
		ttft:      time.Duration(p.LatencyAsFailure.TTFTMs) * time.Millisecond,
		total:     time.Duration(p.LatencyAsFailure.TotalMs) * time.Millisecond,
		log:       h.Logger().WithValues("plugin", name),
		m:         m,
		now:       time.Now,
		reqKey:    scheduling.NewStateKey[*reqState](Type + "/" + name),
	}, nil
}

// TypedName implements scheduling.Plugin.
func (b *Breaker) TypedName() scheduling.TypedName { return b.typedName }

// stateOf returns the endpoint's breaker, creating it (from the state the
// endpoint's health shows, which a previous instance may have left) when
// needed; nil for an endpoint without health.
func (b *Breaker) stateOf(e *scheduling.Endpoint) *state {
	h, ok := scheduling.HealthKey.Get(e)
	if !ok || h == nil {
		return nil
	}
	key := e.Key()
	if v, ok := b.states.Load(key); ok {
		s := v.(*state)
		if s.health == h {
			return s
		}
		// A new endpoint under the same key (its identity changed).
		b.drop(key, s)
	}
	s := &state{key: key, hash: e.KeyHash(), health: h, slots: make([]int64, b.p.HalfOpenRequests)}
	now := b.now()
	switch h.Breaker(now) {
	case scheduling.BreakerOpen:
		s.st, s.openUntil = scheduling.BreakerOpen, h.OpenUntil()
	case scheduling.BreakerHalfOpen:
		s.st = scheduling.BreakerHalfOpen
	}
	v, loaded := b.states.LoadOrStore(key, s)
	if loaded {
		return v.(*state)
	}
	if s.st != scheduling.BreakerClosed {
		s.mu.Lock()
		b.setHot(s, true)
		s.mu.Unlock()
	}
	return s
}

// setHot adds s to the hot states or removes it (lock-free copy on write).
func (b *Breaker) setHot(s *state, on bool) {
	for {
		old := b.hot.Load()
		var cur map[uint64]*state
		if old != nil {
			cur = *old
		}
		if (cur[s.hash] == s) == on {
			return
		}
		next := make(map[uint64]*state, len(cur)+1)
		for k, v := range cur {
			next[k] = v
		}
		if on {
			next[s.hash] = s
		} else {
			delete(next, s.hash)
		}
		if b.hot.CompareAndSwap(old, &next) {
			return
		}
	}
}

// hotLen returns the number of breakers that are not closed.
func (b *Breaker) hotLen() int {
	if m := b.hot.Load(); m != nil {
		return len(*m)
	}
	return 0
}

func healthOf(e *scheduling.Endpoint) *scheduling.EndpointHealth {
	h, _ := scheduling.HealthKey.Get(e)
	return h
}

// drop removes a state.
func (b *Breaker) drop(key string, s *state) {
	if !b.states.CompareAndDelete(key, s) {
		return
	}
	s.mu.Lock()
	b.setHot(s, false)
	s.dropped = true
	s.mu.Unlock()
}

// Filter implements scheduling.Filter: while half-open, an endpoint stays
// a candidate only if a trial slot is free, which the request reserves
// (released in PreRequest if the request goes elsewhere); an endpoint
// whose breaker is open is removed (the published routable set already
// excludes it, unless the snapshot predates the opening). While every
// breaker is closed it returns endpoints as they are.
func (b *Breaker) Filter(_ context.Context, req *scheduling.Request, endpoints []*scheduling.Endpoint) []*scheduling.Endpoint {
	hot := b.hot.Load()
	if hot == nil || len(*hot) == 0 || b.closed.Load() {
		return endpoints
	}
	m := *hot
	now := b.now()
	var out []*scheduling.Endpoint
	for i, e := range endpoints {
		keep := true
		// A state of an earlier endpoint under the same key (its identity
		// changed) says nothing of this one.
		if s, ok := m[e.KeyHash()]; ok && s.key == e.Key() && healthOf(e) == s.health {
			keep = b.admit(s, req, now)
		}
		switch {
		case !keep && out == nil:
			out = make([]*scheduling.Endpoint, i, len(endpoints))
			copy(out, endpoints[:i])
		case keep && out != nil:
			out = append(out, e)
		}
	}
	if out == nil {
		return endpoints
	}
	return out
}

// admit decides whether the Filter keeps an endpoint, reserving a trial
// slot for req when the breaker is half-open.
func (b *Breaker) admit(s *state, req *scheduling.Request, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	b.advanceLocked(s, now)
	switch s.st {
	case scheduling.BreakerClosed:
		return true
	case scheduling.BreakerOpen:
		return false
	}
	nowNs := now.UnixNano()
	for i, v := range s.slots {
		if v == 0 || (v > 0 && nowNs-v > int64(reservationTTL)) {
			s.slots[i] = nowNs
			if req != nil {
				rs := b.stateFor(req)
				rs.reservations = append(rs.reservations, reservation{s: s, slot: i, token: nowNs})
			}
			return true
		}
	}
	return false
}

// stateFor returns the request's state, creating it.
func (b *Breaker) stateFor(req *scheduling.Request) *reqState {
	if rs, ok := b.reqKey.Get(req); ok {
		return rs
	}
	rs := &reqState{slot: -1}
	b.reqKey.Set(req, rs)
	return rs
}

// advanceLocked turns an open breaker whose interval ended half-open.
func (b *Breaker) advanceLocked(s *state, now time.Time) {
	if s.st == scheduling.BreakerOpen && !now.Before(s.openUntil) {
		b.transitionLocked(s, scheduling.BreakerHalfOpen, now, "")
	}
}

// PreRequest implements scheduling.PreRequest: it remembers the primary
// target with its breaker generation and the start time, confirms the
// trial slot the Filter reserved for it and frees the others.
func (b *Breaker) PreRequest(_ context.Context, req *scheduling.Request, result *scheduling.Result) {
	if req == nil || b.closed.Load() {
		return
	}
	var primary *scheduling.Endpoint
	for _, t := range result.Targets() {
		if t != nil {
			primary = t
			break
		}
	}
	rs, had := b.reqKey.Get(req)
	if !had {
		rs = &reqState{slot: -1}
	}
	var ps *state
	if primary != nil {
		ps = b.stateOf(primary)
	}
	now := b.now()
	// A retry moves the request: give back a slot it ran in.
	if rs.primary != nil && rs.slot >= 0 {
		rs.primary.release(rs.slot, slotRunning)
		rs.slot = -1
	}
	rs.primary, rs.start, rs.ttft = ps, now, 0
	if primary != nil {
		rs.primaryAddr = primary.HostPort()
	}
	for _, r := range rs.reservations {
		if r.s == ps && rs.slot < 0 && r.s.confirm(r.slot, r.token) {
			rs.slot = r.slot
			continue
		}
		r.s.release(r.slot, r.token)
	}
	rs.reservations = nil
	if ps != nil {
		ps.mu.Lock()
		b.advanceLocked(ps, now)
		rs.gen = ps.gen
		ps.mu.Unlock()
	}
	if !had && ps != nil {
		b.reqKey.Set(req, rs)
	}
}

// confirm turns a reservation into a running trial, if it still holds.
func (s *state) confirm(slot int, token int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.slots[slot] != token {
		return false
	}
	s.slots[slot] = slotRunning
	return true
}

// release frees a slot if it still holds what the caller put there.
func (s *state) release(slot int, token int64) {
	s.mu.Lock()
	if slot < len(s.slots) && s.slots[slot] == token {
		s.slots[slot] = 0
	}
	s.mu.Unlock()
}

// ResponseStreaming implements scheduling.ResponseStreaming: it records
// the time to first token of a streamed response.
func (b *Breaker) ResponseStreaming(_ context.Context, req *scheduling.Request, resp *scheduling.Response, chunk []byte, _ *scheduling.Endpoint) {
	if b.ttft == 0 || req == nil || !req.Stream || len(chunk) == 0 {
		return
	}
	if rs, ok := b.reqKey.Get(req); ok && rs.ttft == 0 && rs.primary != nil {
		rs.ttft = max(b.now().Sub(rs.start), 1)
	}
}

// ResponseComplete implements scheduling.ResponseComplete: it frees the
// request's trial slot and counts its outcome against the primary target
// (a fallback means the primary failed) and, when another endpoint
// served, for that endpoint too.
func (b *Breaker) ResponseComplete(_ context.Context, req *scheduling.Request, resp *scheduling.Response, target *scheduling.Endpoint) {
	if req == nil || resp == nil {
		return
	}
	rs, ok := b.reqKey.Get(req)
	if !ok || rs.primary == nil {
		return
	}
	for _, r := range rs.reservations {
		r.s.release(r.slot, r.token)
	}
	rs.reservations = nil
	if rs.slot >= 0 {
		rs.primary.release(rs.slot, slotRunning)
		rs.slot = -1
	}
	p := rs.primary
	rs.primary = nil // once
	if b.closed.Load() || resp.Disconnected {
		return // the client went away: says nothing about the endpoint
	}
	now := b.now()
	if resp.Served != "" && resp.Served != rs.primaryAddr {
		// The gateway fell back: the primary refused or failed the
		// connection; the endpoint that served answered for itself.
		b.outcome(p, rs.gen, "connect failure (the gateway fell back to "+resp.Served+")", now)
		if target == nil || target.HostPort() != resp.Served {
			return // the host did not say which endpoint that is
		}
		if s := b.stateOf(target); s != nil {
			s.mu.Lock()
			gen := s.gen
			closed := s.st == scheduling.BreakerClosed
			s.mu.Unlock()
			if why, counts := b.failure(req, rs, resp, now); closed && counts {
				// Only a closed breaker counts requests it did not see start.
				b.outcome(s, gen, why, now)
			}
		}
		return
	}
	if why, counts := b.failure(req, rs, resp, now); counts {
		b.outcome(p, rs.gen, why, now)
	}
}

// failure returns why a completed response counts as a failure ("" for a
// success), and whether it counts at all: a response without a status
// (the gateway gave none) says nothing. A 4xx is the endpoint answering a
// bad request, which resets the failure count as a success does (as
// Envoy's consecutive-5xx outlier detection counts it).
func (b *Breaker) failure(req *scheduling.Request, rs *reqState, resp *scheduling.Response, now time.Time) (string, bool) {
	switch {
	case resp.StatusCode == 0:
		return "", false
	case resp.StatusCode >= 500:
		return fmt.Sprintf("HTTP %d", resp.StatusCode), true
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		return "", true
	case req.Stream && b.ttft > 0:
		ttft := rs.ttft
		if ttft == 0 {
			ttft = now.Sub(rs.start) // no chunk: the whole response was the wait
		}
		if ttft > b.ttft {
			return fmt.Sprintf("time to first token %s above latencyAsFailure.ttftMs", ttft.Round(time.Millisecond)), true
		}
	case !req.Stream && b.total > 0:
		if d := now.Sub(rs.start); d > b.total {
			return fmt.Sprintf("response time %s above latencyAsFailure.totalMs", d.Round(time.Millisecond)), true
		}
	}
	return "", true
}

// outcome counts one outcome ("" is a success) on an endpoint's breaker,
// if the request started in the breaker's current generation.
func (b *Breaker) outcome(s *state, gen uint64, failure string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dropped || gen != s.gen {
		return
	}
	switch s.st {
	case scheduling.BreakerClosed:
		if failure == "" {
			s.failures = 0
			return
		}
		s.failures++
		if s.failures >= b.p.ConsecutiveFailures {
			b.transitionLocked(s, scheduling.BreakerOpen, now, failure)
		}
	case scheduling.BreakerHalfOpen:
		if failure != "" {
			b.transitionLocked(s, scheduling.BreakerOpen, now, failure)
			return
		}
		s.successes++
		if s.successes >= b.p.SuccessThreshold {
			b.transitionLocked(s, scheduling.BreakerClosed, now, "")
		}
	}
}

// transitionLocked moves a breaker to another state and publishes it.
func (b *Breaker) transitionLocked(s *state, to scheduling.BreakerState, now time.Time, why string) {
	from := s.st
	if s.dropped {
		return
	}
	s.st = to
	s.gen++
	s.failures, s.successes = 0, 0
	clear(s.slots)
	b.setHot(s, to != scheduling.BreakerClosed)
	switch to {
	case scheduling.BreakerOpen:
		s.openUntil = now.Add(b.p.OpenDuration.Duration)
		s.health.SetBreaker(to, s.openUntil)
		b.m.transitions.WithLabelValues("open").Inc()
		b.log.Info("Circuit breaker opened; endpoint out of rotation", "endpoint", s.key, "from", stateName(from),
			"reason", why, "until", s.openUntil)
	case scheduling.BreakerHalfOpen:
		s.health.SetBreaker(to, time.Time{})
		b.m.transitions.WithLabelValues("half_open").Inc()
		b.log.V(1).Info("Circuit breaker half-open; trial requests", "endpoint", s.key, "trials", b.p.HalfOpenRequests)
	case scheduling.BreakerClosed:
		s.health.SetBreaker(to, time.Time{})
		b.m.transitions.WithLabelValues("closed").Inc()
		b.log.Info("Circuit breaker closed; endpoint back in rotation", "endpoint", s.key)
	}
}

func stateName(s scheduling.BreakerState) string {
	switch s {
	case scheduling.BreakerOpen:
		return "open"
	case scheduling.BreakerHalfOpen:
		return "half_open"
	}
	return "closed"
}

// Forget implements the host's endpoint removal: the endpoint's breaker
// is dropped.
func (b *Breaker) Forget(endpointKey string) {
	if v, ok := b.states.Load(endpointKey); ok {
		b.drop(endpointKey, v.(*state))
	}
}

// Run implements scheduling.Runner: the breaker does no background work,
// it keeps the host's view of the pool for Close.
func (b *Breaker) Run(ctx context.Context, env scheduling.RunEnv) {
	b.pool.Store(&poolEnv{env: env})
	<-ctx.Done()
}

// Close implements scheduling.Closer. Unless a circuit-breaker serves on
// (info.TypeServes: an instance of the same name, or of another name, as
// when a reload renames the breaker; any instance adopts the states the
// endpoints' health shows, which all instances share), every breaker this
// instance holds open or half-open is closed,
// so the endpoints come back into rotation: nothing would close them any
// more. That includes the states it adopted and never touched (an
// endpoint whose breaker a predecessor opened gets no request, so this
// instance never looked at it): every endpoint of the pool the host ran
// it with is reset. Requests still running on the old configuration are
// not counted.
func (b *Breaker) Close(info scheduling.CloseInfo) {
	b.closed.Store(true)
	if info.Successor || info.TypeServes {
		return
	}
	b.states.Range(func(k, v any) bool {
		s := v.(*state)
		s.mu.Lock()
		if !s.dropped && s.st != scheduling.BreakerClosed {
			s.st = scheduling.BreakerClosed
			s.gen++
			s.health.SetBreaker(scheduling.BreakerClosed, time.Time{})
		}
		s.mu.Unlock()
		return true
	})
	if pe := b.pool.Load(); pe != nil {
		now := b.now()
		for _, e := range pe.env.Endpoints() {
			if h := healthOf(e); h != nil && h.Breaker(now) != scheduling.BreakerClosed {
				h.SetBreaker(scheduling.BreakerClosed, time.Time{})
				b.log.V(1).Info("Circuit breaker removed; endpoint back in rotation", "endpoint", e.Key())
			}
		}
	}
}

// breakerMetrics are the plugin's collectors, shared by its instances.
type breakerMetrics struct {
	transitions *prometheus.CounterVec
}

func newBreakerMetrics(reg prometheus.Registerer) (*breakerMetrics, error) {
	tr, err := healthparam.RegisterOrReuse(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_circuit_breaker_transitions_total",
		Help: "Circuit-breaker state changes over all endpoints, by the state reached (open, half_open, closed).",
	}, []string{"to"}))
	if err != nil {
		return nil, err
	}
	return &breakerMetrics{transitions: tr}, nil
}

// Registration registers the circuit-breaker type.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Alpha,
	Factory:   scheduling.Typed(DefaultParams, New),
}

var (
	_ scheduling.Filter            = (*Breaker)(nil)
	_ scheduling.PreRequest        = (*Breaker)(nil)
	_ scheduling.ResponseStreaming = (*Breaker)(nil)
	_ scheduling.ResponseComplete  = (*Breaker)(nil)
	_ scheduling.Closer            = (*Breaker)(nil)
	_ scheduling.Runner            = (*Breaker)(nil)
)
