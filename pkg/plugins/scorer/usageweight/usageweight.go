package usageweight

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchyard-ai/switchyard/pkg/internal/monotime"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Type is the plugin type used in configuration.
const Type = "usage-weight-scorer"

// Defaults and bounds of the parameters (C-36, §3.5 #7).
const (
	DefaultWeight            = 0.2
	DefaultStalenessInterval = 60 * time.Second
	MinStalenessInterval     = time.Second
	MaxStalenessInterval     = time.Hour
)

// Metric names (the Continuum Router's).
const (
	UsageDecisionsMetric = "routing_usage_weight_decisions_total"
	QuotaDecisionsMetric = "routing_quota_aware_decisions_total"
)

// Reasons of routing_usage_weight_decisions_total.
const (
	ReasonApplied           = "applied"
	ReasonNoDeclaration     = "no_declaration"
	ReasonNoDifferentiation = "no_differentiation"
)

// Reasons of routing_quota_aware_decisions_total.
const (
	QuotaObservedUsed = "observed_used"
	QuotaStale        = "stale"
	QuotaAbsent       = "absent"
	QuotaUnusable     = "unusable"
)

// UsageReasons and QuotaReasons are the closed label sets.
var (
	UsageReasons = []string{ReasonApplied, ReasonNoDeclaration, ReasonNoDifferentiation}
	QuotaReasons = []string{QuotaObservedUsed, QuotaStale, QuotaAbsent, QuotaUnusable}
)

// Attribute names the datastore publishes the declarations under
// (datastore.ProviderTPMKey and ProviderRPMKey; a test pins the names).
var (
	providerTPMKey = scheduling.NewAttributeKey[int]("switchyard.io/provider-tpm")
	providerRPMKey = scheduling.NewAttributeKey[int]("switchyard.io/provider-rpm")
)

// ProviderTPMAttribute and ProviderRPMAttribute are the endpoint attribute
// names the scorer reads the declarations from.
const (
	ProviderTPMAttribute = "switchyard.io/provider-tpm"
	ProviderRPMAttribute = "switchyard.io/provider-rpm"
)

// Declared reports whether e declares providerTpm or providerRpm.
func Declared(e *scheduling.Endpoint) bool {
	_, t := providerTPMKey.Get(e)
	_, r := providerRPMKey.Get(e)
	return t || r
}

// QuotaAwareParams configures quota-aware observation (C-40).
type QuotaAwareParams struct {
	// Enabled captures provider rate-limit response headers; a fresh
	// observation replaces the local estimate for its axis. Default false.
	Enabled bool `json:"enabled"`
	// TTL is how long an observation counts as fresh; "0s" or absent
	// means stalenessInterval. 1s..1h otherwise.
	TTL Duration `json:"ttl"`
}

// Params configures a usage-weight-scorer.
type Params struct {
	// Weight scales the term: a candidate scores weight × remaining.
	// Finite, 0..1; default 0.2.
	Weight float64 `json:"weight"`
	// StalenessInterval is the length of the tumbling metering window,
	// 1s..1h; default 60s.
	StalenessInterval Duration `json:"stalenessInterval"`
	// QuotaAware is the observation of provider rate-limit headers.
	QuotaAware QuotaAwareParams `json:"quotaAware"`
}

// DefaultParams returns the defaults.
func DefaultParams() Params {
	return Params{Weight: DefaultWeight, StalenessInterval: Duration{Duration: DefaultStalenessInterval}}
}

// Validate reports every invalid parameter with its field path.
func (p *Params) Validate() error {
	var errs []error
	if math.IsNaN(p.Weight) || math.IsInf(p.Weight, 0) || p.Weight < 0 || p.Weight > 1 {
		errs = append(errs, fmt.Errorf("weight: must be a finite number in 0..1, got %v", p.Weight))
	}
	if err := p.StalenessInterval.check(false); err != nil {
		errs = append(errs, fmt.Errorf("stalenessInterval: %w", err))
	}
	if err := p.QuotaAware.TTL.check(true); err != nil {
		errs = append(errs, fmt.Errorf("quotaAware.ttl: %w", err))
	}
	return errors.Join(errs...)
}

// TTL returns the effective observation TTL.
func (p *Params) TTL() time.Duration {
	if p.QuotaAware.TTL.Duration == 0 {
		return p.StalenessInterval.Duration
	}
	return p.QuotaAware.TTL.Duration
}

// Scorer is the usage-weight-scorer: an additive term that prefers the
// candidates with the largest share of their provider quota left. It is
// safe for concurrent use; the request path takes no lock shared by all
// requests (per-endpoint state is reached through an immutable map and
// updated with atomics).
type Scorer struct {
	typedName scheduling.TypedName
	params    Params
	weight    float64
	window    time.Duration
	quota     bool
	ttl       time.Duration
	start     time.Time
	now       func() time.Time
	log       logr.Logger

	mu     sync.Mutex // writers of states
	states atomic.Pointer[map[string]*endpointState]

	usageVec *prometheus.CounterVec
	quotaVec *prometheus.CounterVec
	closed   atomic.Bool
}

// endpointState is the scorer's state of one endpoint, for the life of its
// address: the metering window and the latest observation.
type endpointState struct {
	key, hostPort string
	meter         atomic.Pointer[meter] // nil: nothing metered yet
	obs           atomic.Pointer[Observation]
	decl          atomic.Pointer[declaration]
	applied       atomic.Pointer[decision] // the applied decision for the latest snapshot that led
	series        [len(reasonsAll)]atomic.Pointer[prometheus.Counter]
}

// reasonsAll indexes the series of an endpoint: the usage reasons, then
// the quota reasons.
var reasonsAll = [...]string{ReasonApplied, ReasonNoDeclaration, ReasonNoDifferentiation, QuotaObservedUsed, QuotaStale, QuotaAbsent, QuotaUnusable}

const quotaBase = 3

// declaration caches an endpoint snapshot's declared limits (snapshots
// are immutable, so the attributes are read once per snapshot).
type declaration struct {
	ep       *scheduling.Endpoint
	tpm, rpm int
}

// limits returns e's declared providerTpm and providerRpm (0: none),
// from st's cache when st has seen this snapshot.
func limits(e *scheduling.Endpoint, st *endpointState) (tpm, rpm int) {
	if st != nil {
		if d := st.decl.Load(); d != nil && d.ep == e {
			return d.tpm, d.rpm
		}
	}
	tpm, _ = providerTPMKey.Get(e)
	rpm, _ = providerRPMKey.Get(e)
	if st != nil {
		st.decl.Store(&declaration{ep: e, tpm: tpm, rpm: rpm})
	}
	return tpm, rpm
}

// decision is what Score found, kept on the request for PreRequest.
// Decisions are shared and immutable: the two without a leader are
// package values and an applied one is kept per endpoint snapshot, so
// recording one on a request allocates nothing.
type decision struct {
	reason string
	top    *scheduling.Endpoint
}

var (
	noDeclaration     = &decision{reason: ReasonNoDeclaration}
	noDifferentiation = &decision{reason: ReasonNoDifferentiation}
)

// appliedTo returns the applied decision for e, kept on e's state st so
// that the common pass allocates nothing. When e has no state yet (nil
// st), it returns a fresh decision: one allocation on that rare pass,
// and Score takes no lock (PreRequest and ResponseComplete create the
// state).
func appliedTo(e *scheduling.Endpoint, st *endpointState) *decision {
	if st == nil {
		return &decision{reason: ReasonApplied, top: e}
	}
	if d := st.applied.Load(); d != nil && d.top == e {
		return d
	}
	d := &decision{reason: ReasonApplied, top: e}
	st.applied.Store(d)
	return d
}

// decisionKey holds the decision of the request's latest scheduling pass
// until PreRequest counts it; PreRequest removes it, so a pass is counted
// once however often PreRequest runs for it.
var decisionKey = scheduling.NewStateKey[*decision]("usage-weight-decision")

// New returns a usage-weight-scorer named name.
func New(name string, p Params, h scheduling.Handle) (*Scorer, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if name == "" {
		name = Type
	}
	usage, err := registerOrReuse(h.Registerer(), prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: UsageDecisionsMetric,
		Help: "Scheduling passes of the usage-weight term by outcome: applied (one candidate had strictly the largest weight × remaining quota and was chosen), no_declaration (no candidate declares providerTpm/providerRpm or has a fresh quota observation), no_differentiation (no candidate strictly ahead); backend is the chosen endpoint. Passes another term or the strategy decided against the term's leader are not counted.",
	}, []string{"backend", "reason"}))
	if err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	quota, err := registerOrReuse(h.Registerer(), prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: QuotaDecisionsMetric,
		Help: "Scheduling passes with quota-aware observation on, by what the chosen endpoint's rate-limit snapshot gave: observed_used (fresh, an axis used), stale (older than the TTL: the local estimate was used), absent (no snapshot), unusable (fresh, no axis with both limit and remaining, limit > 0).",
	}, []string{"backend", "reason"}))
	if err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	s := &Scorer{
		typedName: scheduling.TypedName{Type: Type, Name: name},
		params:    p,
		weight:    p.Weight,
		window:    p.StalenessInterval.Duration,
		quota:     p.QuotaAware.Enabled,
		ttl:       p.TTL(),
		now:       time.Now,
		log:       h.Logger().WithValues("plugin", name),
		usageVec:  usage,
		quotaVec:  quota,
	}
	s.start = s.now()
	empty := map[string]*endpointState{}
	s.states.Store(&empty)
	s.log.V(1).Info("Usage-weight scorer", "weight", s.weight, "stalenessInterval", s.window, "quotaAware", s.quota, "ttl", s.ttl)
	return s, nil
}

// TypedName implements scheduling.Plugin.
func (s *Scorer) TypedName() scheduling.TypedName { return s.typedName }

// Category implements scheduling.Scorer.
func (s *Scorer) Category() scheduling.ScorerCategory { return scheduling.Distribution }

// EffectiveParams returns the parameters with defaults applied.
func (s *Scorer) EffectiveParams() any { return s.params }

// Weight returns the term's weight.
func (s *Scorer) Weight() float64 { return s.weight }

// QuotaAware reports whether rate-limit headers are observed.
func (s *Scorer) QuotaAware() bool { return s.quota }

// TTLDuration returns how long an observation counts as fresh.
func (s *Scorer) TTLDuration() time.Duration { return s.ttl }

// SetClock replaces the clock (tests); call before use.
func (s *Scorer) SetClock(now func() time.Time) {
	s.now = now
	s.start = now()
}

// windowIndex is the tumbling window now falls in; windows start when
// the scorer is built (so they restart with the process).
func (s *Scorer) windowIndex(now time.Time) int64 {
	d := now.Sub(s.start)
	if d < 0 {
		return 0
	}
	return int64(d / s.window)
}

// lookup returns e's state, nil when there is none or it belongs to an
// earlier address of the endpoint.
func (s *Scorer) lookup(e *scheduling.Endpoint) *endpointState {
	st := (*s.states.Load())[e.Key()]
	if st == nil || st.hostPort != e.HostPort() {
		return nil
	}
	return st
}

// stateFor returns e's state, creating it (or replacing one of an earlier
// address). The map is copied on write: endpoints are added once each.
func (s *Scorer) stateFor(e *scheduling.Endpoint) *endpointState {
	if st := s.lookup(e); st != nil {
		return st
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed.Load() {
		// A request of the old configuration after Close: keep nothing.
		return &endpointState{key: e.Key(), hostPort: e.HostPort()}
	}
	cur := *s.states.Load()
	if st := cur[e.Key()]; st != nil && st.hostPort == e.HostPort() {
		return st
	}
	next := make(map[string]*endpointState, len(cur)+1)
	for k, v := range cur {
		next[k] = v
	}
	if old := cur[e.Key()]; old != nil {
		s.deleteSeries(old)
	}
	st := &endpointState{key: e.Key(), hostPort: e.HostPort()}
	next[e.Key()] = st
	s.states.Store(&next)
	return st
}

// meter is one window's metered use. It is immutable: add swaps in a
// new one (window and counts in one CAS), so a rollover never wipes an
// add of the new window and a reader never sees old counts as new.
type meter struct {
	win              int64 // index of the window the counts belong to
	tokens, requests int64
}

// used returns the tokens and requests metered in window win.
func (st *endpointState) used(win int64) (tokens, requests int64) {
	m := st.meter.Load()
	if m == nil || m.win != win {
		return 0, 0
	}
	return m.tokens, m.requests
}

// usedSinceObservation returns the tokens and requests metered in window
// win, on each axis st's latest observation reported since that
// observation (quota-aware on and it was made in this window; otherwise
// the whole window's).
func (st *endpointState) usedSinceObservation(win int64, quota bool) (tokens, requests int64) {
	tokens, requests = st.used(win)
	if !quota {
		return tokens, requests
	}
	o := st.obs.Load()
	if o == nil || o.base == nil || o.base.win != win {
		return tokens, requests // no observation in this window
	}
	// Per axis: only an axis the observation reported was reset by it.
	if o.Tokens.Usable {
		tokens = max(tokens-o.base.tokens.Load(), 0)
	}
	if o.Requests.Usable {
		requests = max(requests-o.base.requests.Load(), 0)
	}
	return tokens, requests
}

// add meters one completed attempt in window win; an attempt of a window
// older than the current one is dropped.
func (st *endpointState) add(win, tokens int64) {
	for {
		cur := st.meter.Load()
		next := &meter{win: win, tokens: tokens, requests: 1}
		if cur != nil {
			if cur.win > win {
				return // a later window already started: this attempt is old
			}
			if cur.win == win {
				next.tokens += cur.tokens
				next.requests += cur.requests
			}
		}
		if st.meter.CompareAndSwap(cur, next) {
			return
		}
	}
}

// Remaining is the share of e's quota left and whether e takes part:
// per axis, a fresh observation (quota-aware on) or else the declared
// limit minus the metered use, clamp((limit − used)/limit, 0, 1); the
// smaller axis counts. An endpoint with neither takes no part. With
// quota-aware observation on, the metered use of an axis the endpoint's
// latest observation reported is the use metered since that observation
// (within the current window): the provider's headers had accounted for the earlier
// use, so an endpoint that was not routed since its snapshot went stale
// keeps a full local estimate and ties with a twin observed fresh at
// 1.0, instead of starving behind it until the window rolls.
func (s *Scorer) remaining(e *scheduling.Endpoint, st *endpointState, now int64, win int64) (float64, bool) {
	var reqR, tokR float64
	var hasReq, hasTok bool
	if s.quota && st != nil {
		if o := st.obs.Load(); o != nil && now-o.at <= int64(s.ttl) {
			if o.Requests.Usable {
				reqR, hasReq = o.Requests.Ratio, true
			}
			if o.Tokens.Usable {
				tokR, hasTok = o.Tokens.Ratio, true
			}
		}
	}
	if !hasReq || !hasTok {
		tpm, rpm := limits(e, st)
		var usedTok, usedReq int64
		if st != nil && (tpm > 0 || rpm > 0) {
			usedTok, usedReq = st.usedSinceObservation(win, s.quota)
		}
		if !hasReq && rpm > 0 {
			reqR, hasReq = clamp01(float64(int64(rpm)-usedReq)/float64(rpm)), true
		}
		if !hasTok && tpm > 0 {
			tokR, hasTok = clamp01(float64(int64(tpm)-usedTok)/float64(tpm)), true
		}
	}
	switch {
	case hasReq && hasTok:
		return min(reqR, tokR), true
	case hasReq:
		return reqR, true
	case hasTok:
		return tokR, true
	}
	return 0, false
}

func clamp01(v float64) float64 { return min(max(v, 0), 1) }

// Score implements scheduling.Scorer: weight × remaining for candidates
// that declare a limit or have a fresh observation, exactly 0 for the
// others and for exhausted ones (C-37). The scores are added to the
// profile's other terms. When the term differentiates (its largest
// contribution is above 0 and strictly greater than every other), Score
// sets scheduling.StrictDominanceKey: the strategy-picker then takes the
// candidate whose total is strictly greater than every other, with no
// threshold or margin; a tied term, such as two replicas with equal
// budgets, sets nothing, so the picker's threshold and margin apply to
// the other scorers as without the term. Score takes no lock and
// allocates nothing once the leader has a state (one decision value on
// a pass whose leader has none yet).
func (s *Scorer) Score(_ context.Context, req *scheduling.Request, endpoints []*scheduling.Endpoint, scores []float64) {
	now := s.now()
	win := s.windowIndex(now)
	nowNano := monotime.Nanos(now)
	states := *s.states.Load()
	best, second := -1.0, -1.0
	top := -1
	var topSt *endpointState
	for i, e := range endpoints {
		st := states[e.Key()]
		if st != nil {
			// A state seen with this very snapshot has its address.
			if d := st.decl.Load(); (d == nil || d.ep != e) && st.hostPort != e.HostPort() {
				st = nil
			}
		}
		r, ok := s.remaining(e, st, nowNano, win)
		if !ok {
			continue
		}
		c := s.weight * r
		scores[i] = c
		if c > best {
			second, best, top, topSt = best, c, i, st
		} else if c > second {
			second = c
		}
	}
	if req == nil {
		return
	}
	d := noDeclaration
	switch {
	case top < 0:
	case best > 0 && best > second:
		d = appliedTo(endpoints[top], topSt)
		// Only a term that differentiates asks for strict dominance: a
		// tied term must not take threshold and margin away from the
		// profile's other scorers.
		scheduling.StrictDominanceKey.Set(req, true)
	default:
		d = noDifferentiation
	}
	decisionKey.Set(req, d)
}

// PreRequest implements scheduling.PreRequest: it counts the scheduling
// pass once, against the endpoint the pass chose: it removes the pass's
// decision from the request. A retry is a pass of its own (the framework
// runs PreRequest only after Schedule); should PreRequest ever run again
// without a new pass, it counts nothing more (defensive: the framework
// does not do that), so an endpoint is never counted twice for a pass.
// It counts the pass in routing_usage_weight_decisions_total only when
// the term's outcome decided it (C-38): applied when the scorers decided
// and chose the term's strict leader; no_declaration or
// no_differentiation when the strategy decided and the term had no
// leader. A pass the scorers decided without the term (its leader was not
// chosen, or it had none) or the strategy decided although the term had
// a leader is not counted. Under a picker that records no decision (not
// a strategy-picker), the chosen endpoint is the highest total, so the
// term's leader being chosen counts applied and no leader counts its
// reason. With quota-aware observation on,
// routing_quota_aware_decisions_total counts every pass.
func (s *Scorer) PreRequest(_ context.Context, req *scheduling.Request, result *scheduling.Result) {
	if s.closed.Load() || req == nil {
		return
	}
	targets := result.Targets()
	if len(targets) == 0 {
		return
	}
	d, ok := decisionKey.Get(req)
	if !ok || d == nil {
		// The scorer did not run for this request (another profile), or
		// this pass was counted already.
		return
	}
	decisionKey.Delete(req)
	chosen := targets[0]
	st := s.stateFor(chosen)
	by, recorded := scheduling.DecidedByKey.Get(req)
	switch {
	case d.reason == ReasonApplied:
		if d.top == chosen && (!recorded || by == scheduling.DecidedByScorers) {
			s.inc(st, d.reason)
		}
	case !recorded || by == scheduling.DecidedByStrategy:
		s.inc(st, d.reason)
	}
	if s.quota {
		s.inc(st, s.quotaReason(st, s.now()))
	}
}

func (s *Scorer) quotaReason(st *endpointState, now time.Time) string {
	o := st.obs.Load()
	switch {
	case o == nil:
		return QuotaAbsent
	case monotime.Nanos(now)-o.at > int64(s.ttl):
		return QuotaStale
	case o.Requests.Usable || o.Tokens.Usable:
		return QuotaObservedUsed
	}
	return QuotaUnusable
}

func (s *Scorer) inc(st *endpointState, reason string) {
	if s.closed.Load() {
		return
	}
	i := indexOf(reason)
	c := st.series[i].Load()
	if c == nil {
		vec := s.usageVec
		if i >= quotaBase {
			vec = s.quotaVec
		}
		cc := vec.WithLabelValues(st.key, reason)
		st.series[i].CompareAndSwap(nil, &cc)
		c = st.series[i].Load()
	}
	(*c).Inc()
}

func indexOf(reason string) int {
	for i, r := range reasonsAll {
		if r == reason {
			return i
		}
	}
	panic("usageweight: unknown reason " + reason)
}

// ResponseReceived implements scheduling.ResponseReceived: with
// quota-aware observation on, a response carrying rate-limit headers
// replaces the endpoint's snapshot. Only responses that arrived from the
// endpoint count: the hook never runs for a request that got no response,
// and a reply the gateway generated itself (a connect failure or a
// timeout, marked by its x-switchyard-reason header; Envoy's local replies
// carry no rate-limit headers) is ignored. A response without any
// recognised header leaves the snapshot as it is (it ages out with the
// TTL) and creates none.
func (s *Scorer) ResponseReceived(_ context.Context, req *scheduling.Request, resp *scheduling.Response, target *scheduling.Endpoint) {
	if !s.quota || resp == nil || target == nil || s.closed.Load() {
		return
	}
	if _, local := resp.Headers[gatewayReasonHeader]; local {
		return
	}
	now := s.now()
	o, ok := ParseRateLimitHeaders(resp.Headers, now)
	if !ok {
		return
	}
	st := s.stateFor(target)
	win := s.windowIndex(now)
	b := &obsBase{win: win}
	tok, reqs := st.used(win)
	b.tokens.Store(tok)
	b.requests.Store(reqs)
	o.base = b
	st.obs.Store(&o)
	if req != nil {
		observedKey.Set(req, &o)
	}
}

// obsBase is the use metered in window win when an observation was
// made, plus the use of the attempt whose response carried it (the
// provider's headers count that attempt already).
type obsBase struct {
	win              int64
	tokens, requests atomic.Int64
}

// observedKey holds, on a request, the observation its latest attempt's
// response headers made, so that the attempt's completion is added to
// the observation's baseline rather than counted against it.
var observedKey = scheduling.NewStateKey[*Observation]("usage-weight-observed")

// gatewayReasonHeader marks the replies the gateway generates itself
// (pkg/gateway's ReasonHeader).
const gatewayReasonHeader = "x-switchyard-reason"

// ResponseComplete implements scheduling.ResponseComplete: a completed
// attempt that reported usage is metered (its total tokens, one request)
// in the current window. When the attempt's own response headers made
// the endpoint's current observation, its use is part of that
// observation's baseline (the provider counted it).
func (s *Scorer) ResponseComplete(_ context.Context, req *scheduling.Request, resp *scheduling.Response, target *scheduling.Endpoint) {
	if resp == nil || target == nil || resp.Disconnected || s.closed.Load() {
		return
	}
	u := resp.Usage
	tokens := int64(u.TotalTokens)
	if tokens <= 0 {
		tokens = int64(u.PromptTokens) + int64(u.CompletionTokens)
	}
	if tokens <= 0 {
		return // no usage reported: not counted
	}
	st := s.stateFor(target)
	win := s.windowIndex(s.now())
	st.add(win, tokens)
	if req == nil {
		return
	}
	if o, ok := observedKey.Get(req); ok {
		observedKey.Delete(req)
		// The attempt that made the endpoint's current observation: the
		// provider counted it in the headers already.
		if o != nil && o == st.obs.Load() && o.base != nil && o.base.win == win {
			o.base.tokens.Add(tokens)
			o.base.requests.Add(1)
		}
	}
}

// Run implements scheduling.Runner: it drops the state and series of
// endpoints that left the pool or changed address, so both stay bounded
// by the pool.
func (s *Scorer) Run(ctx context.Context, env scheduling.RunEnv) {
	for {
		changed := env.Changed()
		s.prune(env.Endpoints())
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// prune keeps the state of the endpoints in pool (at their current
// address) only.
func (s *Scorer) prune(pool []*scheduling.Endpoint) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := *s.states.Load()
	live := make(map[string]string, len(pool))
	for _, e := range pool {
		live[e.Key()] = e.HostPort()
	}
	// Series of endpoints that left, also those an earlier instance
	// (replaced by a reload) created and this one never touched.
	sweep(s.usageVec, live)
	sweep(s.quotaVec, live)
	var next map[string]*endpointState
	for k, st := range cur {
		if hp, ok := live[k]; ok && hp == st.hostPort {
			continue
		}
		if next == nil {
			next = make(map[string]*endpointState, len(cur))
			for k2, v := range cur {
				next[k2] = v
			}
		}
		delete(next, k)
		s.deleteSeries(st)
	}
	if next != nil {
		s.states.Store(&next)
	}
}

// sweep deletes vec's series whose backend is not in live.
func sweep(vec *prometheus.CounterVec, live map[string]string) {
	ch := make(chan prometheus.Metric, 64)
	go func() { vec.Collect(ch); close(ch) }()
	var gone [][2]string
	for m := range ch {
		var d dto.Metric
		if m.Write(&d) != nil {
			continue
		}
		var backend, reason string
		for _, l := range d.GetLabel() {
			switch l.GetName() {
			case "backend":
				backend = l.GetValue()
			case "reason":
				reason = l.GetValue()
			}
		}
		if _, ok := live[backend]; !ok {
			gone = append(gone, [2]string{backend, reason})
		}
	}
	for _, g := range gone {
		vec.DeleteLabelValues(g[0], g[1])
	}
}

func (s *Scorer) deleteSeries(st *endpointState) {
	for i, r := range reasonsAll {
		if i < quotaBase {
			s.usageVec.DeleteLabelValues(st.key, r)
		} else {
			s.quotaVec.DeleteLabelValues(st.key, r)
		}
		st.series[i].Store(nil)
	}
}

// Close implements scheduling.Closer: the state is dropped and, unless
// another usage-weight-scorer serves on (the series carry no instance
// label), the series are deleted.
func (s *Scorer) Close(info scheduling.CloseInfo) {
	s.closed.Store(true)
	s.mu.Lock()
	defer s.mu.Unlock()
	if !info.TypeServes {
		for _, st := range *s.states.Load() {
			s.deleteSeries(st)
		}
	}
	empty := map[string]*endpointState{}
	s.states.Store(&empty)
}

// registerOrReuse registers c, or returns the collector already
// registered under the same description.
func registerOrReuse[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}

// Duration is a time.Duration written in JSON as a Go duration string
// such as "60s". A string that does not parse is kept as an error that
// Params.Validate reports with the field's path.
type Duration struct {
	time.Duration
	parseErr error
}

// UnmarshalJSON implements json.Unmarshaler. null leaves the value
// unchanged.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		return nil
	}
	if len(b) == 0 || b[0] != '"' {
		return &json.UnmarshalTypeError{Value: "non-string", Type: reflect.TypeFor[string]()}
	}
	var v string
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	p, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil {
		*d = Duration{parseErr: fmt.Errorf("invalid duration %q: use a Go duration such as \"60s\"", v)}
		return nil
	}
	*d = Duration{Duration: p}
	return nil
}

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.Duration.String()) }

// check reports a parse error or a value outside 1s..1h (0 allowed when
// zeroOK).
func (d Duration) check(zeroOK bool) error {
	if d.parseErr != nil {
		return d.parseErr
	}
	if zeroOK && d.Duration == 0 {
		return nil
	}
	if d.Duration < MinStalenessInterval || d.Duration > MaxStalenessInterval {
		return fmt.Errorf("must be 1s..1h, got %s", d.Duration)
	}
	return nil
}

// Registration registers the usage-weight-scorer type.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Alpha,
	Factory:   scheduling.Typed(DefaultParams, New),
}

var (
	_ scheduling.Scorer           = (*Scorer)(nil)
	_ scheduling.PreRequest       = (*Scorer)(nil)
	_ scheduling.ResponseReceived = (*Scorer)(nil)
	_ scheduling.ResponseComplete = (*Scorer)(nil)
	_ scheduling.Runner           = (*Scorer)(nil)
	_ scheduling.Closer           = (*Scorer)(nil)
	_ json.Unmarshaler            = (*Duration)(nil)
	_ json.Marshaler              = Duration{}
)
