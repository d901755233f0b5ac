package scheduling

import (
	"context"
	"hash/maphash"
	"math/bits"
	"sync/atomic"
	"time"
)

// Endpoint data the host publishes on every Endpoint for plugins to read.
// The datastore sets these attributes; plugins read them with the keys
// below and must not modify what they point to, except through the
// methods documented as safe (EndpointHealth's setters).

// EndpointLoad is the EPP's own live accounting of the requests it sent to
// an endpoint: the one source of truth for in-flight counts and observed
// latency (the ext_proc server counts a request where it was served, also
// when the gateway fell back to another endpoint of the list). All methods
// are lock-free and safe for concurrent use.
type EndpointLoad interface {
	// InFlight is the number of requests forwarded and not yet complete.
	InFlight() int64
	// InFlightTokens is the estimated tokens of those requests.
	InFlightTokens() int64
	// Served and Errors count completed requests by outcome.
	Served() uint64
	Errors() uint64
	// TTFT is the moving average of the time to first token of streamed
	// responses, 0 before the first sample.
	TTFT() time.Duration
	// E2E is the moving average of the end-to-end latency of successful
	// requests, 0 before the first sample.
	E2E() time.Duration
}

var (
	// LoadKey holds the endpoint's EndpointLoad; the value is the same for
	// the endpoint's life (while its identity stays the same).
	LoadKey = NewAttributeKey[EndpointLoad]("switchyard.io/endpoint-stats")
	// WeightKey holds the endpoint's relative capacity (the endpoints
	// file's weight, or the switchyard.ai/weight pod annotation); 1 when
	// not set.
	WeightKey = NewAttributeKey[int]("switchyard.io/endpoint-weight")
	// ModelsKey holds the models the endpoint declares it serves, with
	// their aliases and prices; absent when it declares none (it then
	// serves every model, as in GIE).
	ModelsKey = NewAttributeKey[*EndpointModels]("switchyard.io/endpoint-models")
	// InternalKey is true for endpoints reserved for internal callers
	// (internal: true); absent or false otherwise.
	InternalKey = NewAttributeKey[bool]("switchyard.io/endpoint-internal")
	// HealthKey holds the endpoint's *EndpointHealth: the active health
	// check's and the circuit breaker's verdicts. The pointer is the same
	// for the endpoint's life.
	HealthKey = NewAttributeKey[*EndpointHealth]("switchyard.io/endpoint-health")
)

// Price is a model's price at an endpoint, in USD per 1M tokens.
type Price struct {
	Input  float64 `json:"input"`
	Output float64 `json:"output"`
}

// ModelEntry is one model an endpoint serves.
type ModelEntry struct {
	// Name is the model name the endpoint serves (what the body's model
	// field is rewritten to when a request names an alias).
	Name string
	// Aliases are other names that resolve to Name at this endpoint.
	Aliases []string
	// Pricing is the endpoint's price for the model; nil when the entry
	// gives none, and then the least-cost picker's catalog price applies.
	Pricing *Price
	// Unpriced says the endpoint has no price for the model even if a
	// catalog has one (the endpoints file's `pricing: null`): a pricing
	// block that declares nothing shadows the catalog, as the guide's
	// metadata block without pricing does.
	Unpriced bool
}

// EndpointModels are the models an endpoint declares. Immutable once
// published.
type EndpointModels struct {
	Entries []ModelEntry
}

// Lookup resolves a requested model name or alias to the entry serving it.
func (m *EndpointModels) Lookup(model string) (*ModelEntry, bool) {
	if m == nil {
		return nil, false
	}
	for i := range m.Entries {
		e := &m.Entries[i]
		if e.Name == model {
			return e, true
		}
	}
	for i := range m.Entries {
		e := &m.Entries[i]
		for _, a := range e.Aliases {
			if a == model {
				return e, true
			}
		}
	}
	return nil, false
}

// ProbeState is an active health check's verdict on an endpoint.
type ProbeState int32

const (
	// ProbeUnknown: not probed yet, or health checks are off. Eligible.
	ProbeUnknown ProbeState = iota
	// ProbeHealthy: passed healthyThreshold probes in a row. Eligible.
	ProbeHealthy
	// ProbeUnhealthy: failed unhealthyThreshold probes in a row. Not
	// eligible until it passes healthyThreshold probes again.
	ProbeUnhealthy
)

// BreakerState is a circuit breaker's state for an endpoint.
type BreakerState int32

const (
	// BreakerClosed: requests flow. Eligible.
	BreakerClosed BreakerState = iota
	// BreakerOpen: too many consecutive failures; not eligible until the
	// open interval ends, then half-open.
	BreakerOpen
	// BreakerHalfOpen: the open interval ended; trial requests decide
	// whether it closes or opens again. Eligible.
	BreakerHalfOpen
)

// Closed set of reasons an endpoint is out of rotation (metric label
// values and /debug/endpoints).
const (
	IneligibleUnhealthy   = "unhealthy"
	IneligibleBreakerOpen = "breaker_open"
)

// EndpointHealth is the eligibility state of one endpoint that background
// checks and response hooks share with the host. Setters are lock-free and
// may be called from the request path; a change calls the host's notify
// function, which republishes the endpoint set (off the request path) so
// that the published snapshot, and its fail-open rule, exclude the
// endpoint.
type EndpointHealth struct {
	probe     atomic.Int32
	breaker   atomic.Int32
	openUntil atomic.Int64 // unix nanoseconds; meaningful while BreakerOpen
	notify    atomic.Pointer[func()]
}

// SetNotify sets the function called after every state change (the host
// does this once; nil clears it).
func (h *EndpointHealth) SetNotify(f func()) {
	if f == nil {
		h.notify.Store(nil)
		return
	}
	h.notify.Store(&f)
}

func (h *EndpointHealth) changed() {
	if f := h.notify.Load(); f != nil {
		(*f)()
	}
}

// Probe returns the active health check's verdict.
func (h *EndpointHealth) Probe() ProbeState { return ProbeState(h.probe.Load()) }

// SetProbe records the health check's verdict and reports whether it
// changed.
func (h *EndpointHealth) SetProbe(s ProbeState) bool {
	if ProbeState(h.probe.Swap(int32(s))) == s {
		return false
	}
	h.changed()
	return true
}

// Breaker returns the breaker's state as of now: an open breaker whose
// interval has ended reads as half-open.
func (h *EndpointHealth) Breaker(now time.Time) BreakerState {
	s := BreakerState(h.breaker.Load())
	if s == BreakerOpen && now.UnixNano() >= h.openUntil.Load() {
		return BreakerHalfOpen
	}
	return s
}

// OpenUntil returns when an open breaker turns half-open (zero unless the
// breaker is open).
func (h *EndpointHealth) OpenUntil() time.Time {
	if BreakerState(h.breaker.Load()) != BreakerOpen {
		return time.Time{}
	}
	return time.Unix(0, h.openUntil.Load())
}

// SetBreaker records the breaker's state (until is when an open breaker
// turns half-open; ignored for other states) and reports whether it
// changed.
func (h *EndpointHealth) SetBreaker(s BreakerState, until time.Time) bool {
	if s == BreakerOpen {
		h.openUntil.Store(until.UnixNano())
	}
	if BreakerState(h.breaker.Swap(int32(s))) == s && s != BreakerOpen {
		return false
	}
	h.changed()
	return true
}

// Eligible reports whether the endpoint may be picked as of now, and why
// not (IneligibleUnhealthy or IneligibleBreakerOpen). A nil EndpointHealth
// is eligible.
func (h *EndpointHealth) Eligible(now time.Time) (ok bool, reason string) {
	if h == nil {
		return true, ""
	}
	if h.Probe() == ProbeUnhealthy {
		return false, IneligibleUnhealthy
	}
	if h.Breaker(now) == BreakerOpen {
		return false, IneligibleBreakerOpen
	}
	return true, ""
}

// keySeed makes KeyHash values differ between processes (they are not
// meant to be stored or sent).
var keySeed = maphash.MakeSeed()

// KeyHash returns a 64-bit hash of the endpoint's Key, computed once.
// Plugins use it to key rings and to tell candidate sets apart cheaply.
func (e *Endpoint) KeyHash() uint64 { return e.keyHash }

// CandidateSetHash returns a hash of a set of endpoints that does not
// depend on their order: equal sets give equal hashes, and a set that
// gains or loses an endpoint gives another one (with the usual 64-bit
// collision odds). It costs one multiply and add per endpoint and
// allocates nothing, so a picker may call it per request to tell whether
// the candidates changed (to rebuild a ring, say).
func CandidateSetHash(eps []*Endpoint) uint64 {
	var sum, x uint64
	for _, e := range eps {
		h := e.keyHash
		sum += h * 0x9e3779b97f4a7c15
		x ^= bits.RotateLeft64(h, 23)
	}
	return sum ^ bits.RotateLeft64(x, 31) ^ uint64(len(eps))
}

// PickInfo is what a profile tells a ProfilePicker about the run.
type PickInfo struct {
	// Profile is the profile's name.
	Profile string
	// TotalWeight is the sum of the profile's scorer weights: the highest
	// weighted score an endpoint can have (0 when the profile has no
	// scorer).
	TotalWeight float64
	// Scorers is the number of scorers that ran.
	Scorers int
	// FallbacksOnly says the primary endpoint is already chosen (the
	// strategy-picker's scorers decided) and the picker is asked only for
	// its order of the fallbacks (maxNumOfEndpoints > 1). Such a call is
	// not a pick: the picker must not record it (advance a rotation,
	// count a decision or a backend, feed a statistic).
	FallbacksOnly bool
}

// ProfilePicker is a Picker that wants to know about the profile it picks
// for (the strategy picker weighs the scorers' decision against the
// profile's total weight). Profiles call PickInProfile instead of Pick.
type ProfilePicker interface {
	Picker
	PickInProfile(ctx context.Context, req *Request, scored []ScoredEndpoint, info PickInfo) *ProfileResult
}

// TopScored reorders scored so that the endpoints tied at the highest
// score come first, in their input order, and returns how many there are
// (0 when scored is empty). The caller chooses among them: the tie-break
// belongs to the picker.
func TopScored(scored []ScoredEndpoint) int {
	if len(scored) == 0 {
		return 0
	}
	best := scored[0].Score
	for _, s := range scored[1:] {
		if s.Score > best {
			best = s.Score
		}
	}
	n := 0
	for i := range scored {
		if scored[i].Score == best {
			scored[n], scored[i] = scored[i], scored[n]
			n++
		}
	}
	// Each tied endpoint moves to the next front slot in input order, so
	// the tied ones keep their relative order (the others may not).
	return n
}

// RunEnv is what the host gives a Runner.
type RunEnv interface {
	// Endpoints returns every endpoint of the pool as last published
	// (all of them, eligible or not). Read-only.
	Endpoints() []*Endpoint
	// Changed returns a channel closed at the next change of the endpoint
	// set; take it before calling Endpoints to miss no change.
	Changed() <-chan struct{}
}

// Runner is implemented by plugins with background work (active health
// checks) and by plugins that read the whole pool (see PoolWatcher). The
// host calls Run once per instance, on a goroutine it owns, after the
// configuration that holds the instance starts serving (never while only
// validating a configuration); ctx ends when the instance is closed or
// the host stops, and Run must return soon after.
type Runner interface {
	Plugin
	Run(ctx context.Context, env RunEnv)
}

// PoolWatcher gives a plugin that only answers requests (an Admitter)
// the whole pool, which its candidates are a part of: embed it, and the
// plugin is a Runner whose Run keeps the host's RunEnv until ctx ends.
// The zero value is ready; it is safe for concurrent use and starts no
// goroutine.
type PoolWatcher struct {
	env atomic.Pointer[runEnvBox]
}

type runEnvBox struct{ env RunEnv }

// RunEnvSetter is implemented by Runners that want the host's RunEnv
// before their configuration serves (Run starts on a goroutine of its
// own and may come after the first requests): the host calls SetRunEnv
// synchronously, before the configuration takes requests, with the env
// it later passes to Run.
type RunEnvSetter interface {
	SetRunEnv(env RunEnv)
}

// SetRunEnv keeps env from before the configuration serves (RunEnvSetter),
// so that the first requests after a reload already judge the pool.
func (w *PoolWatcher) SetRunEnv(env RunEnv) { w.env.Store(&runEnvBox{env: env}) }

// Run keeps env until ctx ends (a scheduling.Runner's Run).
func (w *PoolWatcher) Run(ctx context.Context, env RunEnv) {
	box := &runEnvBox{env: env}
	w.env.Store(box)
	<-ctx.Done()
	w.env.Store(nil)
}

// Pool returns every endpoint of the pool as last published (eligible or
// not) and true, or nil and false while the host does not run the plugin
// (a configuration only validated, the moment before Run, a unit test
// without a host). Read-only; no allocation.
func (w *PoolWatcher) Pool() ([]*Endpoint, bool) {
	box := w.env.Load()
	if box == nil {
		return nil, false
	}
	return box.env.Endpoints(), true
}
