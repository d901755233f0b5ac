package extproc_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/stretchr/testify/require"

	configfiles "github.com/switchyard-ai/switchyard/config"
	"github.com/switchyard-ai/switchyard/pkg/decisions"
	"github.com/switchyard-ai/switchyard/pkg/extproc"
	"github.com/switchyard-ai/switchyard/pkg/flowcontrol"
	"github.com/switchyard-ai/switchyard/pkg/multisite/sitestate"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

func threeEndpoints() []*scheduling.Endpoint {
	return []*scheduling.Endpoint{
		endpoint("busy", "127.10.0.1", 8000, scheduling.Metrics{WaitingQueueSize: 9}),
		endpoint("idle", "127.10.0.2", 8000, scheduling.Metrics{WaitingQueueSize: 0}),
		endpoint("some", "127.10.0.3", 8000, scheduling.Metrics{WaitingQueueSize: 4}),
	}
}

const chatBody = `{"model":"m1","messages":[{"role":"user","content":"hi"}]}`

func TestDecisionRecorded(t *testing.T) {
	ring := decisions.New(8)
	h := start(t, queueConfig, threeEndpoints(), func(o *extproc.Options) { o.Decisions.Ring = ring })
	out := h.exchange(t, []*extprocv3.ProcessingRequest{reqHeaders("/v1/chat/completions", "x-request-id", "dec-1"), body(chatBody, true)}, 2)
	dest := out[0].GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders()[0].GetHeader().GetRawValue()
	require.Equal(t, "127.10.0.2:8000", string(dest))
	// Without --emit-endpoint-scores the metadata is the destination only.
	require.NotContains(t, out[0].GetDynamicMetadata().GetFields()[extproc.LBNamespace].GetStructValue().GetFields(), extproc.EndpointScoresKey)

	recs := ring.Snapshot(decisions.Filter{RequestID: "dec-1"})
	require.Len(t, recs, 1)
	r := recs[0]
	require.Equal(t, "m1", r.Model)
	require.Equal(t, "idle", r.Endpoint)
	require.Equal(t, []string{"127.10.0.2:8000"}, r.Targets)
	require.Equal(t, "default", r.PrimaryProfile)
	require.Nil(t, r.Refusal)
	require.Len(t, r.Profiles, 1)
	run := r.Profiles[0]
	require.Equal(t, 3, run.Candidates)
	require.Equal(t, []string{"idle"}, run.Targets)
	require.Equal(t, "queue-scorer", run.Scorers[0].Scorer)
	require.Len(t, run.Endpoints, 3)
	// The record explains the choice: the chosen endpoint has the highest
	// weighted total, which is the sum of its weighted scores.
	require.Equal(t, "idle", run.Endpoints[0].Name)
	for i, e := range run.Endpoints {
		sum := 0.0
		for _, s := range e.Scores {
			sum += s.Weighted
		}
		require.InDelta(t, e.Total, sum, 1e-9, e.Name)
		if i > 0 {
			require.Less(t, e.Total, run.Endpoints[0].Total)
		}
	}
	b, err := json.Marshal(r)
	require.NoError(t, err)
	require.Contains(t, string(b), `"requestId":"dec-1"`)
}

func TestEmitEndpointScores(t *testing.T) {
	h := start(t, queueConfig, threeEndpoints(), func(o *extproc.Options) { o.Decisions.EmitEndpointScores = true })
	out := h.exchange(t, []*extprocv3.ProcessingRequest{reqHeaders("/v1/chat/completions"), body(chatBody, true)}, 2)
	lb := out[0].GetDynamicMetadata().GetFields()[extproc.LBNamespace].GetStructValue().GetFields()
	require.Equal(t, "127.10.0.2:8000", lb[extproc.DestinationHeader].GetStringValue())
	scores := lb[extproc.EndpointScoresKey].GetStructValue().GetFields()
	require.Len(t, scores, 3)
	best := ""
	for addr, v := range scores {
		if best == "" || v.GetNumberValue() > scores[best].GetNumberValue() {
			best = addr
		}
	}
	require.Equal(t, "127.10.0.2:8000", best)
}

// Every scored candidate is emitted, not only the --decision-max-endpoints
// a record lists (llm-d's router emits one entry per scored candidate too).
func TestEmitEndpointScoresAllCandidates(t *testing.T) {
	const n = 12 // > DefaultExplainEndpoints
	var eps []*scheduling.Endpoint
	for i := range n {
		eps = append(eps, endpoint("ep-"+strconv.Itoa(i), "127.10.1."+strconv.Itoa(i+1), 8000, scheduling.Metrics{WaitingQueueSize: i}))
	}
	ring := decisions.New(4)
	h := start(t, queueConfig, eps, func(o *extproc.Options) {
		o.Decisions = extproc.DecisionOptions{Ring: ring, EmitEndpointScores: true, MaxEndpoints: 2}
	})
	out := h.exchange(t, []*extprocv3.ProcessingRequest{reqHeaders("/v1/chat/completions", "x-request-id", "all-1"), body(chatBody, true)}, 2)
	lb := out[0].GetDynamicMetadata().GetFields()[extproc.LBNamespace].GetStructValue().GetFields()
	scores := lb[extproc.EndpointScoresKey].GetStructValue().GetFields()
	require.Len(t, scores, n)
	for i := range n {
		require.Contains(t, scores, "127.10.1."+strconv.Itoa(i+1)+":8000")
	}
	require.Equal(t, "127.10.1.1:8000", lb[extproc.DestinationHeader].GetStringValue())
	// The record stays capped.
	recs := ring.Snapshot(decisions.Filter{RequestID: "all-1"})
	require.Len(t, recs, 1)
	require.Len(t, recs[0].Profiles[0].Endpoints, 2)
	require.Equal(t, n-2, recs[0].Profiles[0].Truncated)
}

// logLine is one captured log line.
type logLine map[string]any

var levelKey = "v"

// captureLogs returns a logger at every verbosity and the lines it got.
func captureLogs() (logr.Logger, func() []logLine) {
	var mu sync.Mutex
	var lines []logLine
	l := funcr.NewJSON(func(obj string) {
		var m logLine
		if err := json.Unmarshal([]byte(obj), &m); err == nil {
			mu.Lock()
			lines = append(lines, m)
			mu.Unlock()
		}
	}, funcr.Options{Verbosity: 10, LogInfoLevel: &levelKey})
	return l, func() []logLine {
		mu.Lock()
		defer mu.Unlock()
		return append([]logLine(nil), lines...)
	}
}

// fullQueue is flow control that refuses everything as queue_full.
type fullQueue struct{}

func (fullQueue) Enqueue(context.Context, *flowcontrol.Item) flowcontrol.Outcome {
	return flowcontrol.RejectedQueueFull
}
func (fullQueue) Started(*flowcontrol.Item) {}
func (fullQueue) Notify()                   {}

// brokenHandler is a profile handler whose results fail with an error
// that is no refusal: the EPP's own fault, a 500.
type brokenHandler struct{}

func (brokenHandler) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: "broken-handler", Name: "broken"}
}
func (brokenHandler) Pick(_ context.Context, _ *scheduling.Request, profiles map[string]*scheduling.Profile, results map[string]*scheduling.ProfileResult) []*scheduling.Profile {
	if len(results) > 0 {
		return nil
	}
	return []*scheduling.Profile{profiles["default"]}
}
func (brokenHandler) ProcessResults(context.Context, *scheduling.Request, map[string]*scheduling.ProfileResult) (*scheduling.Result, error) {
	return nil, errors.New("the handler is broken")
}

// brokenScheduler puts a scheduler over brokenHandler in the harness.
func brokenScheduler(t *testing.T) func(*harness) {
	return func(h *harness) {
		p, err := scheduling.NewProfile("default", nil, nil, h.rt.Load().Scheduler.Profiles()[0].Picker(), nil)
		require.NoError(t, err)
		sched, err := scheduling.NewScheduler(scheduling.SchedulerConfig{ProfileHandler: brokenHandler{}, Profiles: []*scheduling.Profile{p}})
		require.NoError(t, err)
		rt := *h.rt.Load()
		rt.Scheduler = sched
		h.setRuntime(&rt)
	}
}

// realFlow puts a real flowcontrol.Controller over pool in front of the
// harness's scheduler.
func realFlow(t *testing.T, cfg flowcontrol.Config, pool *slotPool) func(*harness) {
	return func(h *harness) {
		c, err := flowcontrol.New(cfg, pool)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { c.Run(ctx); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
		require.Eventually(t, func() bool { return c.Stats().Running }, 5*time.Second, time.Millisecond)
		rt := *h.rt.Load()
		rt.Flow = &gate{c: c}
		h.setRuntime(&rt)
	}
}

// TestRefusalLoggedOnce checks, for several kinds of refusal, that the
// refusal is logged in exactly one line up to V(2) among every line that
// carries the request id, at its verbosity (client- or load-caused at
// V(1), the pool's trouble at V(0)), with request id, model, status and
// reason, and recorded as a decision.
func TestRefusalLoggedOnce(t *testing.T) {
	saturated := []*scheduling.Endpoint{
		modelEndpoint("big-0", "127.10.0.1", "big", 0.99),
		modelEndpoint("mid-0", "127.10.0.3", "mid", 0.995),
	}
	noSite := func(o *extproc.Options) {
		holder := &sitestate.Holder{}
		here, there := site("here", true, ""), site("there", false, "127.0.0.2:9000")
		here.Ready, there.Ready = false, false
		holder.Store(&sitestate.Snapshot{Sites: []sitestate.Site{here, there}, AnyModel: true})
		withSites(t, holder)(o)
	}
	for _, tt := range []struct {
		name   string
		cfg    string
		eps    []*scheduling.Endpoint
		msgs   []*extprocv3.ProcessingRequest
		opts   func(*extproc.Options)
		tweak  func(*harness)
		status int
		reason string
		v      float64
		model  string
		msg    string // "" for "Request refused"
	}{{
		name:   "bad request body",
		msgs:   []*extprocv3.ProcessingRequest{reqHeaders("/v1/chat/completions", "x-request-id", "ref-1"), body(`{"model": 5`, true)},
		status: 400, reason: extproc.ReasonBadRequest, v: 1,
	}, {
		name:   "body too large",
		msgs:   []*extprocv3.ProcessingRequest{reqHeaders("/v1/chat/completions", "x-request-id", "ref-1"), body(chatBody, true)},
		opts:   func(o *extproc.Options) { o.MaxRequestBodyBytes = 10 },
		status: 413, reason: extproc.ReasonBodyTooLarge, v: 1,
	}, {
		name:   "no endpoints",
		msgs:   []*extprocv3.ProcessingRequest{reqHeaders("/v1/chat/completions", "x-request-id", "ref-1"), body(chatBody, true)},
		tweak:  func(h *harness) { h.view.ready = nil },
		status: 503, reason: extproc.ReasonNoEndpoints, v: 0, model: "m1",
	}, {
		// A real flow controller over a pool with no free slot: the
		// request waits its TTL and is turned away by load.
		name:   "flow control at capacity 0",
		msgs:   []*extprocv3.ProcessingRequest{reqHeaders("/v1/chat/completions", "x-request-id", "ref-1"), body(chatBody, true)},
		tweak:  realFlow(t, flowcontrol.Config{DefaultRequestTTL: 50 * time.Millisecond}, &slotPool{endpoints: 1}),
		status: 429, reason: extproc.ReasonTTLExpired, v: 1, model: "m1",
	}, {
		name: "saturated admission",
		msgs: []*extprocv3.ProcessingRequest{reqHeaders("/v1/chat/completions", "x-request-id", "ref-1", "x-gateway-inference-objective", "batch"), body(chatBody, true)},
		opts: func(o *extproc.Options) {
			o.Objective = func(name string) (int, bool) { return -1, name == "batch" }
		},
		tweak:  realFlow(t, flowcontrol.Config{}, &slotPool{endpoints: 1}),
		status: 429, reason: extproc.ReasonShedSaturation, v: 1, model: "m1",
	}, {
		// Every model of the chain is KV-saturated: the chain's own line
		// is at V(4), the refusal is the one line.
		name: "fallback chain exhausted",
		cfg:  fallbackConfig, eps: saturated,
		msgs: []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions", "x-request-id", "ref-1"), body(`{"model":"big","prompt":"hello"}`, true)},
		tweak: func(h *harness) {
			rt := *h.rt.Load()
			rt.FallbackChains = map[string][]string{"big": {"mid"}}
			h.setRuntime(&rt)
		},
		status: 503, reason: "admission_reject", v: 1, model: "big",
	}, {
		name:   "site refusal",
		eps:    threePods(),
		msgs:   []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions", "x-request-id", "ref-1"), body(siteBody, true)},
		opts:   noSite,
		status: 503, reason: "no_healthy_site", v: 1, model: "m",
	}, {
		name:   "protocol error",
		msgs:   []*extprocv3.ProcessingRequest{reqHeaders("/v1/chat/completions", "x-request-id", "ref-1"), reqHeaders("/v1/chat/completions", "x-request-id", "ref-1")},
		status: 400, reason: extproc.ReasonProtocol, v: 1,
	}, {
		// The EPP's own failure: one error line.
		name:   "internal error",
		msgs:   []*extprocv3.ProcessingRequest{reqHeaders("/v1/chat/completions", "x-request-id", "ref-1"), body(chatBody, true)},
		tweak:  brokenScheduler(t),
		status: 500, reason: extproc.ReasonInternal, model: "m1", msg: "Request failed",
	}} {
		t.Run(tt.name, func(t *testing.T) {
			log, lines := captureLogs()
			ring := decisions.New(4)
			cfg, eps := tt.cfg, tt.eps
			if cfg == "" {
				cfg = queueConfig
			}
			if eps == nil {
				eps = threeEndpoints()
			}
			hp := start(t, cfg, eps, func(o *extproc.Options) {
				o.Logger = log
				o.Decisions.Ring = ring
				if tt.opts != nil {
					tt.opts(o)
				}
			})
			if tt.tweak != nil {
				tt.tweak(hp)
			}
			out := hp.exchange(t, tt.msgs, 1)
			require.Equal(t, int32(tt.status), int32(out[len(out)-1].GetImmediateResponse().GetStatus().GetCode()))

			// Every line up to V(2) that carries the request id, whatever
			// its message (an error line has no level: V(0)).
			var mine []logLine
			for _, l := range lines() {
				v, _ := l["v"].(float64)
				if v > 2 {
					continue
				}
				for _, val := range l {
					if str, ok := val.(string); ok && strings.Contains(str, "ref-1") {
						mine = append(mine, l)
						break
					}
				}
			}
			require.Len(t, mine, 1, "lines up to V(2) with the request id: %v", mine)
			l := mine[0]
			require.Equal(t, "ref-1", l["requestID"])
			require.EqualValues(t, tt.status, l["status"])
			require.Equal(t, tt.reason, l["reason"])
			require.Equal(t, tt.model, l["model"])
			wantMsg := tt.msg
			if wantMsg == "" {
				wantMsg = "Request refused"
			}
			require.Equal(t, wantMsg, l["msg"])
			if v, ok := l["v"]; ok {
				require.EqualValues(t, tt.v, v)
			} else {
				require.Zero(t, tt.v)
				require.NotEmpty(t, l["error"], "a line without a level is an error")
			}

			recs := ring.Snapshot(decisions.Filter{RequestID: "ref-1"})
			require.Len(t, recs, 1)
			require.Equal(t, &decisions.Refusal{Status: tt.status, Reason: tt.reason, Message: recs[0].Refusal.Message}, recs[0].Refusal)
			require.NotEmpty(t, recs[0].Refusal.Message)
		})
	}
}

// The pool's trouble (503 no_endpoints) is logged at V(0) once per
// interval; the refusals in between are at V(1), and the next V(0) line
// counts them.
func TestPoolTroubleRefusalRateLimited(t *testing.T) {
	log, lines := captureLogs()
	var mu sync.Mutex
	now := time.Now()
	h := start(t, queueConfig, threeEndpoints(), func(o *extproc.Options) {
		o.Logger = log
		o.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	})
	h.view.ready = nil
	send := func() {
		out := h.exchange(t, []*extprocv3.ProcessingRequest{reqHeaders("/v1/chat/completions"), body(chatBody, true)}, 1)
		require.EqualValues(t, 503, out[0].GetImmediateResponse().GetStatus().GetCode())
	}
	for range 3 {
		send()
	}
	mu.Lock()
	now = now.Add(11 * time.Second)
	mu.Unlock()
	send()
	var levels []float64
	var suppressed []any
	for _, l := range lines() {
		if l["msg"] == "Request refused" {
			v, _ := l["v"].(float64)
			levels = append(levels, v)
			suppressed = append(suppressed, l["suppressed"])
		}
	}
	require.Equal(t, []float64{0, 1, 1, 0}, levels)
	require.Equal(t, []any{float64(0), nil, nil, float64(2)}, suppressed)
}

// BenchmarkRequestPathDecisions is BenchmarkRequestPath with decisions
// off (the default of the library), recorded into a ring, and recorded
// with the scores emitted: what --decision-buffer-size and
// --emit-endpoint-scores cost per request.
func BenchmarkRequestPathDecisions(b *testing.B) {
	for _, c := range []struct {
		name string
		opts extproc.DecisionOptions
	}{
		{"off", extproc.DecisionOptions{}},
		{"recorded", extproc.DecisionOptions{Ring: decisions.New(decisions.DefaultSize)}},
		{"recorded+emitted", extproc.DecisionOptions{Ring: decisions.New(decisions.DefaultSize), EmitEndpointScores: true}},
	} {
		b.Run(c.name, func(b *testing.B) {
			h := start(b, string(configfiles.Default), benchPods(100), func(o *extproc.Options) { o.Decisions = c.opts })
			benchLoop(b, h.client)
		})
	}
}

// With multi-site, the record carries the site stage's decision: a local
// pick with its tier, path and reason and the scheduled profile runs, a
// remote pick with the gateway and no run.
func TestDecisionRecordsTheSiteStage(t *testing.T) {
	holder := &sitestate.Holder{}
	holder.Store(&sitestate.Snapshot{Sites: []sitestate.Site{site("here", true, "")}, AnyModel: true})
	ring := decisions.New(8)
	h := start(t, queueConfig, threePods(), withSites(t, holder), func(o *extproc.Options) { o.Decisions.Ring = ring })
	h.exchange(t, []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions", "x-request-id", "local-1"), body(siteBody, true)}, 2)
	recs := ring.Snapshot(decisions.Filter{RequestID: "local-1"})
	require.Len(t, recs, 1)
	s := recs[0].Site
	require.NotNil(t, s)
	require.True(t, s.Local)
	require.Equal(t, "here", s.Site)
	require.Equal(t, "here-cluster", s.Cluster)
	require.NotEmpty(t, s.Tier)
	require.NotEmpty(t, s.Reason)
	require.Len(t, recs[0].Profiles, 1)
	require.NotEmpty(t, recs[0].Targets)

	local := site("here", true, "")
	local.Ready = false
	holder.Store(&sitestate.Snapshot{Sites: []sitestate.Site{local, site("there", false, "127.0.0.2:9000")}, AnyModel: true})
	h.exchange(t, []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions", "x-request-id", "remote-1"), body(siteBody, true)}, 2)
	recs = ring.Snapshot(decisions.Filter{RequestID: "remote-1"})
	require.Len(t, recs, 1)
	require.Equal(t, &decisions.Site{Site: "there", Cluster: "there-cluster", Gateway: "127.0.0.2:9000",
		Tier: recs[0].Site.Tier, Path: recs[0].Site.Path, Reason: recs[0].Site.Reason}, recs[0].Site)
	require.NotEmpty(t, recs[0].Site.Reason)
	require.Empty(t, recs[0].Profiles)
	require.Empty(t, recs[0].Targets)

	// No site can take the model: the stage refuses, and the record keeps
	// the stage's decision beside the refusal.
	there := site("there", false, "127.0.0.2:9000")
	there.Ready = false
	holder.Store(&sitestate.Snapshot{Sites: []sitestate.Site{local, there}, AnyModel: true})
	out := h.exchange(t, []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions", "x-request-id", "nosite-1"), body(siteBody, true)}, 1)
	require.EqualValues(t, 503, out[len(out)-1].GetImmediateResponse().GetStatus().GetCode())
	recs = ring.Snapshot(decisions.Filter{RequestID: "nosite-1"})
	require.Len(t, recs, 1)
	require.NotNil(t, recs[0].Refusal)
	require.EqualValues(t, 503, recs[0].Refusal.Status)
	require.NotNil(t, recs[0].Site, "a site-stage refusal keeps the site decision")
	require.Equal(t, "no_route", recs[0].Site.Reason)
	require.False(t, recs[0].Site.Local)
	require.Empty(t, recs[0].Profiles)
}

// countingSink is a logr sink at a verbosity that counts WithValues calls
// and the lines written.
type countingSink struct {
	level             int
	withValues, lines *atomic.Int64
}

func (s countingSink) Init(logr.RuntimeInfo)          {}
func (s countingSink) Enabled(level int) bool         { return level <= s.level }
func (s countingSink) Info(int, string, ...any)       { s.lines.Add(1) }
func (s countingSink) Error(error, string, ...any)    { s.lines.Add(1) }
func (s countingSink) WithValues(...any) logr.LogSink { s.withValues.Add(1); return s }
func (s countingSink) WithName(string) logr.LogSink   { return s }

// TestRequestIDAddedOnlyToWrittenLines: a routed request at the default
// verbosity writes no line and pays no WithValues (sinks format values as
// they are added); at V(3) its "Routed" line carries the request ID.
func TestRequestIDAddedOnlyToWrittenLines(t *testing.T) {
	msgs := []*extprocv3.ProcessingRequest{reqHeaders("/v1/chat/completions", "x-request-id", "ref-1"), body(chatBody, true)}
	for _, c := range []struct {
		level      int
		withValues bool
	}{{2, false}, {3, true}} {
		var wv, lines atomic.Int64
		hp := start(t, queueConfig, threeEndpoints(), func(o *extproc.Options) {
			o.Logger = logr.New(countingSink{level: c.level, withValues: &wv, lines: &lines})
		})
		out := hp.exchange(t, msgs, 2)
		require.NotNil(t, out[0].GetRequestHeaders(), "routed")
		if c.withValues {
			require.Positive(t, lines.Load())
			require.Equal(t, int64(1), wv.Load(), "the request ID is added once, for the lines written")
		} else {
			require.Zero(t, lines.Load())
			require.Zero(t, wv.Load(), "no line written, no WithValues")
		}
	}
}
