package usageweight

import (
	"context"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

// clock is a fake clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

func newScorer(t testing.TB, p Params) (*Scorer, *clock, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	h := scheduling.NewHandle(scheduling.HandleOptions{Registerer: reg})
	s, err := New(Type, p, h)
	require.NoError(t, err)
	c := &clock{t: time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)}
	s.SetClock(c.now)
	return s, c, reg
}

func ep(name string, tpm, rpm int) *scheduling.Endpoint {
	b := schedulingtest.Endpoint(name)
	if tpm > 0 {
		b.Attr(ProviderTPMAttribute, tpm)
	}
	if rpm > 0 {
		b.Attr(ProviderRPMAttribute, rpm)
	}
	return b.Build()
}

func score(s *Scorer, req *scheduling.Request, eps ...*scheduling.Endpoint) []float64 {
	out := make([]float64, len(eps))
	s.Score(context.Background(), req, eps, out)
	return out
}

func complete(s *Scorer, e *scheduling.Endpoint, tokens int) {
	s.ResponseComplete(context.Background(), &scheduling.Request{}, &scheduling.Response{StatusCode: 200, Usage: scheduling.Usage{TotalTokens: tokens}}, e)
}

func quotaParams() Params {
	p := DefaultParams()
	p.QuotaAware.Enabled = true
	return p
}

// TestC36_Params: defaults (weight 0.2, 60s, quota-aware off, TTL =
// stalenessInterval) and every invalid value with its field path.
func TestC36_Params(t *testing.T) {
	p := DefaultParams()
	require.NoError(t, p.Validate())
	assert.Equal(t, 0.2, p.Weight)
	assert.Equal(t, time.Minute, p.StalenessInterval.Duration)
	assert.False(t, p.QuotaAware.Enabled)
	assert.Equal(t, time.Minute, p.TTL())

	schedulingtest.RunFactoryCases(t, Registration, append(schedulingtest.DecodeErrorCases(),
		schedulingtest.FactoryCase{Name: "defaults", Params: `{}`},
		schedulingtest.FactoryCase{Name: "all set", Params: `{"weight": 1, "stalenessInterval": "1h", "quotaAware": {"enabled": true, "ttl": "1s"}}`},
		schedulingtest.FactoryCase{Name: "weight 0", Params: `{"weight": 0}`},
		schedulingtest.FactoryCase{Name: "weight above 1", Params: `{"weight": 1.5}`, WantErr: "weight: must be a finite number in 0..1, got 1.5"},
		schedulingtest.FactoryCase{Name: "weight negative", Params: `{"weight": -0.1}`, WantErr: "weight: must be a finite number in 0..1, got -0.1"},
		schedulingtest.FactoryCase{Name: "interval short", Params: `{"stalenessInterval": "500ms"}`, WantErr: "stalenessInterval: must be 1s..1h, got 500ms"},
		schedulingtest.FactoryCase{Name: "interval long", Params: `{"stalenessInterval": "2h"}`, WantErr: "stalenessInterval: must be 1s..1h, got 2h0m0s"},
		schedulingtest.FactoryCase{Name: "interval zero", Params: `{"stalenessInterval": "0s"}`, WantErr: "stalenessInterval: must be 1s..1h, got 0s"},
		schedulingtest.FactoryCase{Name: "interval garbage", Params: `{"stalenessInterval": "soon"}`, WantErr: `stalenessInterval: invalid duration "soon"`},
		schedulingtest.FactoryCase{Name: "interval number", Params: `{"stalenessInterval": 60}`, WantErr: "stalenessInterval"},
		schedulingtest.FactoryCase{Name: "ttl long", Params: `{"quotaAware": {"ttl": "3h"}}`, WantErr: "quotaAware.ttl: must be 1s..1h, got 3h0m0s"},
		schedulingtest.FactoryCase{Name: "unknown quota field", Params: `{"quotaAware": {"enable": true}}`, WantErr: `unknown field "quotaAware.enable"`},
		schedulingtest.FactoryCase{Name: "enabled is not a parameter", Params: `{"enabled": true}`, WantErr: `unknown field "enabled"`},
	))
	for _, w := range []float64{math.NaN(), math.Inf(1)} {
		p := DefaultParams()
		p.Weight = w
		require.ErrorContains(t, p.Validate(), "weight: must be a finite number in 0..1")
	}
}

// TestC37_Scores: weight × remaining, the smaller axis, exactly 0 for
// undeclared and exhausted candidates.
func TestC37_Scores(t *testing.T) {
	s, _, _ := newScorer(t, DefaultParams())
	fresh := ep("fresh", 1000, 0)
	both := ep("both", 1000, 10)
	none := ep("none", 0, 0)
	spent := ep("spent", 100, 0)
	for range 3 {
		complete(s, both, 100) // tokens 700/1000 left, requests 7/10: 0.7 either way
	}
	complete(s, both, 0) // no usage reported: not counted
	complete(s, spent, 150)
	s.ResponseComplete(context.Background(), nil, &scheduling.Response{Disconnected: true, Usage: scheduling.Usage{TotalTokens: 500}}, fresh)
	got := score(s, nil, fresh, both, none, spent)
	assert.InDeltaSlice(t, []float64{0.2, 0.2 * 0.7, 0, 0}, got, 1e-12)
	assert.Equal(t, 0.0, got[2], "undeclared is exactly 0")
	assert.Equal(t, 0.0, got[3], "exhausted is exactly 0, never below")

	// The requests axis nearer exhaustion counts.
	rpmOnly := ep("rpm", 1_000_000, 4)
	complete(s, rpmOnly, 10)
	complete(s, rpmOnly, 10)
	complete(s, rpmOnly, 10)
	assert.InDelta(t, 0.2*0.25, score(s, nil, rpmOnly)[0], 1e-12)
}

// TestC37_StrictDominance: the decision kept for PreRequest is applied
// only with one strictly largest positive contribution.
func TestC37_StrictDominance(t *testing.T) {
	s, _, _ := newScorer(t, DefaultParams())
	a, b, c := ep("a", 1000, 0), ep("b", 1000, 0), ep("c", 0, 0)
	for _, tc := range []struct {
		name string
		eps  []*scheduling.Endpoint
		want string
		top  *scheduling.Endpoint
	}{
		{"none declare", []*scheduling.Endpoint{c, ep("d", 0, 0)}, ReasonNoDeclaration, nil},
		{"equal replicas", []*scheduling.Endpoint{a, b, c}, ReasonNoDifferentiation, nil},
		{"lone declared", []*scheduling.Endpoint{a, c}, ReasonApplied, a},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := &scheduling.Request{}
			score(s, req, tc.eps...)
			d, ok := decisionKey.Get(req)
			require.True(t, ok)
			assert.Equal(t, tc.want, d.reason)
			assert.Equal(t, tc.top, d.top)
		})
	}
	complete(s, a, 10)
	req := &scheduling.Request{}
	score(s, req, a, b)
	d, _ := decisionKey.Get(req)
	assert.Equal(t, decision{reason: ReasonApplied, top: b}, *d, "b has strictly more left")

	ex := ep("ex", 10, 0)
	complete(s, ex, 10)
	req = &scheduling.Request{}
	score(s, req, ex, c)
	d, _ = decisionKey.Get(req)
	assert.Equal(t, ReasonNoDifferentiation, d.reason, "an exhausted declared endpoint ties with an undeclared one")
}

// TestC37_StrictDominanceKey: Score asks the picker for strict dominance
// only when the term differentiates (its largest contribution is above 0
// and strictly ahead); never on a tied top, when no candidate declares or
// every declared one is exhausted.
func TestC37_StrictDominanceKey(t *testing.T) {
	s, _, _ := newScorer(t, DefaultParams())
	ex := ep("ex", 10, 0)
	complete(s, ex, 10)
	for _, tc := range []struct {
		name string
		eps  []*scheduling.Endpoint
		want bool
	}{
		{"none declare", []*scheduling.Endpoint{ep("c", 0, 0), ep("d", 0, 0)}, false},
		{"exhausted and undeclared: all 0", []*scheduling.Endpoint{ex, ep("c", 0, 0)}, false},
		{"equal replicas above 0: tied", []*scheduling.Endpoint{ep("a", 1000, 0), ep("b", 1000, 0)}, false},
		{"one ahead of an exhausted one", []*scheduling.Endpoint{ep("a", 1000, 0), ex}, true},
		{"one declared", []*scheduling.Endpoint{ep("a", 1000, 0), ep("c", 0, 0)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := &scheduling.Request{}
			score(s, req, tc.eps...)
			v, ok := scheduling.StrictDominanceKey.Get(req)
			assert.Equal(t, tc.want, ok && v)
		})
	}
	zero := DefaultParams()
	zero.Weight = 0
	sz, _, _ := newScorer(t, zero)
	req := &scheduling.Request{}
	score(sz, req, ep("a", 1000, 0), ep("b", 10, 0))
	_, ok := scheduling.StrictDominanceKey.Get(req)
	assert.False(t, ok, "weight 0: every contribution is 0")
}

// TestC37_ScoreAllocatesNothing: scoring 1000 endpoints, also recording
// an applied decision and the strict-dominance request, allocates
// nothing once the endpoints' states exist.
func TestC37_ScoreAllocatesNothing(t *testing.T) {
	s, _, _ := newScorer(t, quotaParams())
	eps := schedulingtest.Endpoints(1000, func(i int, e *schedulingtest.EndpointBuilder) {
		e.Attr(ProviderTPMAttribute, 100000)
	})
	for i, e := range eps {
		complete(s, e, i+1) // ep-0 used least: a strict leader
	}
	scores := make([]float64, len(eps))
	req := &scheduling.Request{}
	s.Score(context.Background(), req, eps, scores)
	allocs := testing.AllocsPerRun(100, func() { s.Score(context.Background(), req, eps, scores) })
	assert.Zero(t, allocs)
	d, _ := decisionKey.Get(req)
	assert.Equal(t, decision{reason: ReasonApplied, top: eps[0]}, *d)
}

// TestC38_TumblingWindow: usage is metered per endpoint in windows of
// stalenessInterval that start with the scorer; a new window starts at 0.
func TestC38_TumblingWindow(t *testing.T) {
	p := DefaultParams()
	p.StalenessInterval = Duration{Duration: 10 * time.Second}
	s, c, _ := newScorer(t, p)
	a := ep("a", 1000, 0)
	complete(s, a, 500)
	c.advance(9 * time.Second)
	complete(s, a, 250)
	assert.InDelta(t, 0.2*0.25, score(s, nil, a)[0], 1e-12)
	c.advance(time.Second) // the second window
	assert.InDelta(t, 0.2, score(s, nil, a)[0], 1e-12)
	complete(s, a, 100)
	assert.InDelta(t, 0.2*0.9, score(s, nil, a)[0], 1e-12)
	c.advance(25 * time.Second) // skips a window
	assert.InDelta(t, 0.2, score(s, nil, a)[0], 1e-12)

	// An attempt metered for an older window than the current one is dropped.
	st := s.lookup(a)
	st.add(s.windowIndex(c.now())-1, 999)
	assert.InDelta(t, 0.2, score(s, nil, a)[0], 1e-12)
}

// TestC38_RPMCountsCompletedAttemptsWithUsage: the requests axis counts
// completed attempts that reported usage, not disconnected ones.
func TestC38_RPMCountsCompletedAttemptsWithUsage(t *testing.T) {
	s, _, _ := newScorer(t, DefaultParams())
	a := ep("a", 0, 4)
	complete(s, a, 1)
	s.ResponseComplete(context.Background(), nil, &scheduling.Response{Usage: scheduling.Usage{PromptTokens: 3, CompletionTokens: 4}}, a)
	complete(s, a, 0)
	s.ResponseComplete(context.Background(), nil, &scheduling.Response{Disconnected: true, Usage: scheduling.Usage{TotalTokens: 9}}, a)
	assert.InDelta(t, 0.2*0.5, score(s, nil, a)[0], 1e-12)
	tok, req := s.lookup(a).used(s.windowIndex(s.now()))
	assert.Equal(t, [2]int64{8, 2}, [2]int64{tok, req})
}

func pre(s *Scorer, req *scheduling.Request, chosen *scheduling.Endpoint) {
	s.PreRequest(context.Background(), req, &scheduling.Result{PrimaryProfile: "p", ProfileResults: map[string]*scheduling.ProfileResult{"p": {Targets: []*scheduling.Endpoint{chosen}}}})
}

// TestC38_RetryCountsEachPassOnce: a retry that is scheduled again (a new
// pass) counts once, against its own choice. Defensive half: PreRequest
// running again without a new scheduling pass (the framework never does
// that: it runs PreRequest only after Schedule) counts nothing more, so
// the first attempt's endpoint would not be counted twice nor the other
// endpoint for a pass that did not choose it.
func TestC38_RetryCountsEachPassOnce(t *testing.T) {
	s, _, reg := newScorer(t, quotaParams())
	a, b := ep("a", 1000, 0), ep("b", 1000, 0)
	req := &scheduling.Request{}
	score(s, req, a, b)
	pre(s, req, a)
	pre(s, req, a) // defensive: rerun, same pass
	pre(s, req, b) // defensive: rerun, same pass, another target
	assert.Equal(t, map[string]float64{
		UsageDecisionsMetric + "/a/" + ReasonNoDifferentiation: 1,
		QuotaDecisionsMetric + "/a/" + QuotaAbsent:             1,
	}, counts(t, reg))

	// The retry scheduled again: a pass of its own, counted for b.
	score(s, req, a, b)
	pre(s, req, b)
	assert.Equal(t, map[string]float64{
		UsageDecisionsMetric + "/a/" + ReasonNoDifferentiation: 1,
		UsageDecisionsMetric + "/b/" + ReasonNoDifferentiation: 1,
		QuotaDecisionsMetric + "/a/" + QuotaAbsent:             1,
		QuotaDecisionsMetric + "/b/" + QuotaAbsent:             1,
	}, counts(t, reg))

	// RPM: the request completes once, on the endpoint that served it.
	s.ResponseComplete(context.Background(), req, &scheduling.Response{StatusCode: 200, Usage: scheduling.Usage{TotalTokens: 5}}, b)
	_, reqA := func() (int64, int64) {
		if st := s.lookup(a); st != nil {
			return st.used(s.windowIndex(s.now()))
		}
		return 0, 0
	}()
	_, reqB := s.lookup(b).used(s.windowIndex(s.now()))
	assert.Equal(t, [2]int64{0, 1}, [2]int64{reqA, reqB})
}

// TestC38_DecisionMetrics: one count per pass against the chosen
// endpoint; a pass another term decided against the leader is not
// counted; the label sets are closed and departed endpoints' series go.
func TestC38_DecisionMetrics(t *testing.T) {
	s, _, reg := newScorer(t, quotaParams())
	a, b, c := ep("a", 1000, 0), ep("b", 1000, 0), ep("c", 0, 0)
	run := func(chosen *scheduling.Endpoint, eps ...*scheduling.Endpoint) {
		req := &scheduling.Request{}
		score(s, req, eps...)
		pre(s, req, chosen)
	}
	run(a, a, b) // equal: no_differentiation{a}
	run(c, c)    // no_declaration{c}
	complete(s, a, 100)
	run(b, a, b)                                                                    // b leads and is chosen: applied{b}
	run(a, a, b)                                                                    // b leads, a chosen (another term): not counted
	s.PreRequest(context.Background(), &scheduling.Request{}, &scheduling.Result{}) // scorer did not run: nothing

	assert.Equal(t, map[string]float64{
		UsageDecisionsMetric + "/a/" + ReasonNoDifferentiation: 1,
		UsageDecisionsMetric + "/c/" + ReasonNoDeclaration:     1,
		UsageDecisionsMetric + "/b/" + ReasonApplied:           1,
		QuotaDecisionsMetric + "/a/" + QuotaAbsent:             2,
		QuotaDecisionsMetric + "/b/" + QuotaAbsent:             1,
		QuotaDecisionsMetric + "/c/" + QuotaAbsent:             1,
	}, counts(t, reg))

	fams, err := reg.Gather()
	require.NoError(t, err)
	labels := map[string]map[string]bool{}
	for _, f := range fams {
		labels[f.GetName()] = map[string]bool{}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				labels[f.GetName()][l.GetName()] = true
				if l.GetName() == "reason" {
					want := UsageReasons
					if f.GetName() == QuotaDecisionsMetric {
						want = QuotaReasons
					}
					assert.Contains(t, want, l.GetValue())
				}
			}
		}
	}
	assert.Equal(t, map[string]map[string]bool{
		UsageDecisionsMetric: {"backend": true, "reason": true},
		QuotaDecisionsMetric: {"backend": true, "reason": true},
	}, labels)
	assert.Equal(t, []string{"applied", "no_declaration", "no_differentiation"}, UsageReasons)
	assert.Equal(t, []string{"observed_used", "stale", "absent", "unusable"}, QuotaReasons)

	// a leaves the pool, b changes address: their series and state go.
	s.prune([]*scheduling.Endpoint{schedulingtest.Endpoint("b").Port(9999).Build(), c})
	assert.Equal(t, map[string]float64{
		UsageDecisionsMetric + "/c/" + ReasonNoDeclaration: 1,
		QuotaDecisionsMetric + "/c/" + QuotaAbsent:         1,
	}, counts(t, reg))
	assert.Nil(t, s.lookup(a))
	assert.Len(t, *s.states.Load(), 1)

	s.Close(scheduling.CloseInfo{})
	assert.Empty(t, counts(t, reg))
	run(c, c) // after Close: safe, counts nothing
	assert.Empty(t, counts(t, reg))
}

// TestMetricsLint runs promlint over the scorer's metrics.
func TestMetricsLint(t *testing.T) {
	s, _, reg := newScorer(t, quotaParams())
	a := ep("a", 10, 0)
	req := &scheduling.Request{}
	score(s, req, a)
	pre(s, req, a)
	fams, err := reg.Gather()
	require.NoError(t, err)
	require.Len(t, fams, 2)
	problems, err := promlint.NewWithMetricFamilies(fams).Lint()
	require.NoError(t, err)
	for _, p := range problems {
		t.Errorf("metric %s: %s", p.Metric, p.Text)
	}
}

// TestRunPrunes: Run follows the pool until its context ends.
func TestRunPrunes(t *testing.T) {
	s, _, _ := newScorer(t, DefaultParams())
	a, b := ep("a", 10, 0), ep("b", 10, 0)
	complete(s, a, 1)
	complete(s, b, 1)
	ctx, cancel := context.WithCancel(context.Background())
	env := &changingEnv{eps: []*scheduling.Endpoint{a}, ch: make(chan struct{})}
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx, env) }()
	require.Eventually(t, func() bool { return s.lookup(b) == nil }, 5*time.Second, time.Millisecond)
	assert.NotNil(t, s.lookup(a))
	cancel()
	<-done
}

type changingEnv struct {
	eps []*scheduling.Endpoint
	ch  chan struct{}
}

func (e *changingEnv) Endpoints() []*scheduling.Endpoint { return e.eps }
func (e *changingEnv) Changed() <-chan struct{}          { return e.ch }

func TestUnknownReasonPanics(t *testing.T) {
	assert.Panics(t, func() { indexOf("nope") })
	assert.True(t, strings.HasPrefix(UsageDecisionsMetric, "routing_"))
}

// counts returns every counter of reg as "metric/backend/reason" → value.
func counts(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	fams, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			out[f.GetName()+"/"+label(m, "backend")+"/"+label(m, "reason")] = m.GetCounter().GetValue()
		}
	}
	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// TestC38_SweepSeriesOfEarlierInstances: after a reload replaced the
// instance under another name (its series kept for the type), the new
// instance's pool watch still deletes the series of endpoints that left.
func TestC38_SweepSeriesOfEarlierInstances(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := scheduling.NewHandle(scheduling.HandleOptions{Registerer: reg})
	old, err := New("old", DefaultParams(), h)
	require.NoError(t, err)
	a, b := ep("a", 10, 0), ep("b", 10, 0)
	req := &scheduling.Request{}
	score(old, req, a)
	pre(old, req, a)
	next, err := New("next", DefaultParams(), h)
	require.NoError(t, err)
	old.Close(scheduling.CloseInfo{TypeServes: true})
	require.Len(t, counts(t, reg), 1, "kept for the type")
	next.prune([]*scheduling.Endpoint{b})
	assert.Empty(t, counts(t, reg))
}

// TestC38_RolloverKeepsEveryCount: many attempts metered at the instant a
// window starts are all counted; the rollover of one never wipes another,
// and a reader never sees the old window's counts as the new one's.
func TestC38_RolloverKeepsEveryCount(t *testing.T) {
	const goroutines, perG = 8, 200
	for round := range 50 {
		st := &endpointState{}
		w := int64(100 + round)
		for range 5 {
			st.add(w, 1000) // the old window has counts
		}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for range perG {
					st.add(w+1, 1)
					if tok, req := st.used(w + 1); tok != req {
						t.Errorf("round %d: window %d reads %d tokens for %d requests (old counts read as new)", round, w+1, tok, req)
						return
					}
				}
			}()
		}
		close(start)
		wg.Wait()
		tok, req := st.used(w + 1)
		require.Equal(t, [2]int64{goroutines * perG, goroutines * perG}, [2]int64{tok, req}, "round %d", round)
	}
}

// TestC37_ScoreCreatesNoState: a leader without a state gets a fresh
// applied decision; Score neither creates its state (no lock, no copy of
// the state map) nor loses the decision, and PreRequest, which creates
// the chosen endpoint's state, counts it.
func TestC37_ScoreCreatesNoState(t *testing.T) {
	s, _, reg := newScorer(t, DefaultParams())
	lead, other := ep("lead", 1000, 0), ep("other", 0, 0)
	before := s.states.Load()
	req := &scheduling.Request{}
	score(s, req, lead, other)
	assert.Same(t, before, s.states.Load(), "Score did not replace the state map")
	assert.Nil(t, s.lookup(lead))
	d, ok := decisionKey.Get(req)
	require.True(t, ok)
	assert.Equal(t, ReasonApplied, d.reason)
	assert.Same(t, lead, d.top)
	pre(s, req, lead)
	assert.NotNil(t, s.lookup(lead), "PreRequest creates the chosen endpoint's state")
	assert.Equal(t, 1.0, counts(t, reg)[UsageDecisionsMetric+"/lead/"+ReasonApplied])
}
