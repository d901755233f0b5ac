package usageweight

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/internal/monotime/monotimetest"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

var at = time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)

// TestC40_ParseRateLimitHeaders: an axis counts only with both values and
// limit > 0; the token axis takes the smallest ratio; the unified aliases
// and OpenAI's names are read.
func TestC40_ParseRateLimitHeaders(t *testing.T) {
	for _, tc := range []struct {
		name     string
		h        map[string]string
		ok       bool
		req, tok AxisObservation
	}{
		{name: "none", h: map[string]string{"content-type": "application/json"}},
		{name: "openai", ok: true, h: map[string]string{
			"x-ratelimit-limit-requests": "100", "x-ratelimit-remaining-requests": "5",
			"x-ratelimit-limit-tokens": "10000", "x-ratelimit-remaining-tokens": "9000",
		}, req: AxisObservation{true, 0.05}, tok: AxisObservation{true, 0.9}},
		{name: "anthropic smallest token ratio", ok: true, h: map[string]string{
			"anthropic-ratelimit-requests-limit": "50", "anthropic-ratelimit-requests-remaining": "50",
			"anthropic-ratelimit-tokens-limit": "1000", "anthropic-ratelimit-tokens-remaining": "800",
			"anthropic-ratelimit-input-tokens-limit": "1000", "anthropic-ratelimit-input-tokens-remaining": "300",
			"anthropic-ratelimit-output-tokens-limit": "100", "anthropic-ratelimit-output-tokens-remaining": "90",
		}, req: AxisObservation{true, 1}, tok: AxisObservation{true, 0.3}},
		{name: "unified aliases", ok: true, h: map[string]string{
			"anthropic-ratelimit-unified-requests-limit": "10", "anthropic-ratelimit-unified-requests-remaining": "2",
			"anthropic-ratelimit-unified-tokens-limit": "100", "anthropic-ratelimit-unified-tokens-remaining": "25",
		}, req: AxisObservation{true, 0.2}, tok: AxisObservation{true, 0.25}},
		{name: "remaining without limit unusable", ok: true, h: map[string]string{"x-ratelimit-remaining-requests": "5"}},
		{name: "limit zero unusable", ok: true, h: map[string]string{"x-ratelimit-limit-tokens": "0", "x-ratelimit-remaining-tokens": "0"}},
		{name: "garbage unusable", ok: true, h: map[string]string{"x-ratelimit-limit-tokens": "lots", "x-ratelimit-remaining-tokens": "1"}},
		{name: "negative unusable", ok: true, h: map[string]string{"x-ratelimit-limit-tokens": "10", "x-ratelimit-remaining-tokens": "-1"}},
		{name: "remaining above limit clamps", ok: true, h: map[string]string{"x-ratelimit-limit-requests": "10", "x-ratelimit-remaining-requests": "20"},
			req: AxisObservation{true, 1}},
		{name: "one usable token sub-axis", ok: true, h: map[string]string{
			"anthropic-ratelimit-input-tokens-limit": "100", "anthropic-ratelimit-input-tokens-remaining": "40",
			"anthropic-ratelimit-output-tokens-remaining": "0",
		}, tok: AxisObservation{true, 0.4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, ok := ParseRateLimitHeaders(tc.h, at)
			require.Equal(t, tc.ok, ok)
			assert.Equal(t, tc.req, o.Requests)
			assert.InDelta(t, tc.tok.Ratio, o.Tokens.Ratio, 1e-12)
			assert.Equal(t, tc.tok.Usable, o.Tokens.Usable)
			if ok {
				assert.Equal(t, at, o.At)
				for k := range o.Headers {
					assert.Contains(t, tc.h, k)
				}
			}
		})
	}
	o, _ := ParseRateLimitHeaders(map[string]string{"x-ratelimit-limit-requests": strings.Repeat("9", 200)}, at)
	assert.Len(t, o.Headers["x-ratelimit-limit-requests"], maxHeaderValue, "raw values are cut")
}

func received(s *Scorer, e *scheduling.Endpoint, h map[string]string) {
	s.ResponseReceived(context.Background(), &scheduling.Request{}, &scheduling.Response{StatusCode: 200, Headers: h}, e)
}

func openAI(limit, remaining string) map[string]string {
	return map[string]string{"x-ratelimit-limit-requests": limit, "x-ratelimit-remaining-requests": remaining}
}

// TestC40_ObservationReplacesEstimate: a fresh observation replaces the
// local estimate of its axis and lets undeclared endpoints take part; a
// stale one falls back to the declaration; only with quota-aware on.
func TestC40_ObservationReplacesEstimate(t *testing.T) {
	s, c, reg := newScorer(t, quotaParams()) // TTL = 60s
	declared := ep("declared", 0, 100)
	undeclared := ep("undeclared", 0, 0)
	complete(s, declared, 10) // local: 99/100 left
	received(s, declared, openAI("100", "10"))
	received(s, undeclared, openAI("1000", "500"))
	assert.InDeltaSlice(t, []float64{0.2 * 0.1, 0.2 * 0.5}, score(s, nil, declared, undeclared), 1e-12)

	// The token axis still comes from the declaration.
	both := ep("both", 1000, 100)
	complete(s, both, 900)
	received(s, both, openAI("100", "50"))
	assert.InDelta(t, 0.2*0.1, score(s, nil, both)[0], 1e-12, "the smaller of observed requests and local tokens")

	c.advance(61 * time.Second) // stale: back to the declaration (a new window too)
	assert.InDeltaSlice(t, []float64{0.2, 0}, score(s, nil, declared, undeclared), 1e-12)
	req := &scheduling.Request{}
	score(s, req, declared)
	pre(s, req, declared)
	assert.Equal(t, 1.0, counts(t, reg)[QuotaDecisionsMetric+"/declared/"+QuotaStale])

	// Off: headers are ignored.
	off, _, _ := newScorer(t, DefaultParams())
	received(off, undeclared, openAI("1000", "1"))
	assert.Equal(t, []float64{0}, score(off, nil, undeclared))
	assert.Nil(t, off.lookup(undeclared))
}

// TestC40_AgesAreMonotonic: an observation's age comes from the
// monotonic clock. With real readings, a wall clock stepped an hour
// forward (or back) after the observation neither makes it stale nor
// keeps it fresh beyond its TTL: the scores, the quota reason and the
// admin view follow the monotonic time that passed.
func TestC40_AgesAreMonotonic(t *testing.T) {
	for _, step := range []time.Duration{time.Hour, -time.Hour} {
		s, _, reg := newScorer(t, quotaParams()) // TTL = 60s
		observed := time.Now()
		now := observed
		s.SetClock(func() time.Time { return now })
		a := ep("a", 0, 0) // undeclared: it takes part only while fresh
		received(s, a, openAI("100", "50"))

		now = monotimetest.WallStepped(t, observed.Add(2*time.Second), step)
		assert.InDelta(t, 0.2*0.5, score(s, nil, a)[0], 1e-12, "step %v: 2s old, fresh", step)
		req := &scheduling.Request{}
		score(s, req, a)
		pre(s, req, a)
		assert.Equal(t, 1.0, counts(t, reg)[QuotaDecisionsMetric+"/a/"+QuotaObservedUsed], "step %v", step)
		q := s.EndpointStats(a).Quota
		require.NotNil(t, q)
		assert.InDelta(t, 2.0, q.AgeSeconds, 1e-9, "step %v", step)
		assert.True(t, q.Fresh)

		now = monotimetest.WallStepped(t, observed.Add(61*time.Second), step)
		assert.Equal(t, 0.0, score(s, nil, a)[0], "step %v: 61s old, stale", step)
		assert.False(t, s.EndpointStats(a).Quota.Fresh)
	}
}

// TestC40_SnapshotLifecycle: replaced by every response that arrives (an
// empty one when the headers stop), dropped when the address changes or
// the endpoint leaves; the quota reasons follow.
func TestC40_SnapshotLifecycle(t *testing.T) {
	s, c, _ := newScorer(t, quotaParams())
	a := ep("a", 0, 0)
	reason := func(e *scheduling.Endpoint) string {
		st := s.lookup(e)
		if st == nil {
			return QuotaAbsent
		}
		return s.quotaReason(st, c.now())
	}
	assert.Equal(t, QuotaAbsent, reason(a))
	received(s, a, map[string]string{"content-type": "text/plain"})
	assert.Nil(t, s.lookup(a), "a response without rate-limit headers creates no snapshot")
	received(s, a, openAI("10", "1"))
	assert.Equal(t, QuotaObservedUsed, reason(a))
	received(s, a, openAI("10", "9"))
	assert.InDelta(t, 0.2*0.9, score(s, nil, a)[0], 1e-12, "the latest response replaces the snapshot")
	received(s, a, map[string]string{"x-ratelimit-remaining-requests": "3"})
	assert.Equal(t, QuotaUnusable, reason(a))
	assert.Equal(t, 0.0, score(s, nil, a)[0])
	received(s, a, openAI("10", "9"))
	received(s, a, map[string]string{"content-type": "application/json"})
	assert.InDelta(t, 0.2*0.9, score(s, nil, a)[0], 1e-12, "a response without rate-limit headers leaves the snapshot")
	// The gateway's own reply (a connect failure, a timeout) is not a response of the endpoint.
	received(s, a, map[string]string{"x-switchyard-reason": "upstream_connect_failure", "x-ratelimit-limit-requests": "10", "x-ratelimit-remaining-requests": "0"})
	assert.InDelta(t, 0.2*0.9, score(s, nil, a)[0], 1e-12)
	// A transport error or a client gone away ends the attempt without a
	// response: ResponseComplete alone never touches the snapshot.
	before := s.lookup(a).obs.Load()
	s.ResponseComplete(context.Background(), nil, &scheduling.Response{Disconnected: true}, a)
	s.ResponseComplete(context.Background(), nil, &scheduling.Response{StatusCode: 502}, a)
	assert.Same(t, before, s.lookup(a).obs.Load())
	c.advance(time.Minute + time.Nanosecond)
	assert.Equal(t, QuotaStale, reason(a))

	// The same name at another address starts without a snapshot.
	moved := schedulingtest.Endpoint("a").Port(9).Build()
	assert.Nil(t, s.lookup(moved))
	assert.Equal(t, 0.0, score(s, nil, moved)[0])
	received(s, moved, openAI("10", "5"))
	assert.Nil(t, s.lookup(a), "the state of the old address is replaced")
	s.prune(nil)
	assert.Empty(t, *s.states.Load())
}

// FuzzParseRateLimitHeaders: any header values give ratios in [0, 1],
// usable only with a limit and a remaining value, and bounded raw values.
func FuzzParseRateLimitHeaders(f *testing.F) {
	f.Add("100", "5", "1000", "1")
	f.Add("0", "0", "-1", "1e400")
	f.Add("NaN", "Inf", " 7 ", "0x10")
	f.Fuzz(func(t *testing.T, l1, r1, l2, r2 string) {
		h := map[string]string{
			"x-ratelimit-limit-requests": l1, "x-ratelimit-remaining-requests": r1,
			"anthropic-ratelimit-input-tokens-limit": l2, "anthropic-ratelimit-input-tokens-remaining": r2,
			"anthropic-ratelimit-tokens-limit": r1,
		}
		o, ok := ParseRateLimitHeaders(h, at)
		if !ok {
			t.Fatal("recognised headers not reported")
		}
		for _, a := range []AxisObservation{o.Requests, o.Tokens} {
			if a.Usable && !(a.Ratio >= 0 && a.Ratio <= 1) {
				t.Fatalf("ratio %v", a.Ratio)
			}
			if !a.Usable && a.Ratio != 0 {
				t.Fatalf("unusable axis with ratio %v", a.Ratio)
			}
		}
		if len(o.Headers) != len(h) {
			t.Fatalf("headers %v", o.Headers)
		}
		for _, v := range o.Headers {
			if len(v) > maxHeaderValue {
				t.Fatalf("value of %d bytes kept", len(v))
			}
		}
	})
}

// TestC51_EndpointStats: the admin API's view of an endpoint: the window,
// the declarations, the share left and the quota snapshot.
func TestC51_EndpointStats(t *testing.T) {
	s, c, _ := newScorer(t, quotaParams())
	a := ep("a", 1000, 0)
	complete(s, a, 250)
	c.advance(5 * time.Second)
	received(s, a, map[string]string{"x-ratelimit-limit-requests": "10", "x-ratelimit-remaining-requests": "4", "x-ratelimit-remaining-tokens": "7"})
	c.advance(2 * time.Second)
	st := s.EndpointStats(a)
	require.NotNil(t, st.Remaining)
	assert.InDelta(t, 0.4, *st.Remaining, 1e-12)
	assert.InDelta(t, 0.08, st.Score, 1e-12)
	assert.Equal(t, UsageStats{Scorer: Type, ProviderTPM: 1000, WindowStart: at, WindowSeconds: 60, WindowTokens: 250, WindowRequests: 1,
		Remaining: st.Remaining, Score: st.Score, QuotaAware: true, Quota: &QuotaStats{
			ObservedAt: at.Add(5 * time.Second), AgeSeconds: 2, TTLSeconds: 60, Fresh: true,
			Axes:    map[string]QuotaAxis{AxisRequests: {Ratio: 0.4}},
			Headers: map[string]string{"x-ratelimit-limit-requests": "10", "x-ratelimit-remaining-requests": "4", "x-ratelimit-remaining-tokens": "7"},
		}}, st)
	none := s.EndpointStats(ep("b", 0, 0))
	assert.Nil(t, none.Remaining)
	assert.Nil(t, none.Quota)
}
