package sessionaffinity

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

func TestFactory(t *testing.T) {
	tests := []struct {
		name     string
		raw      string
		wantErrs []string
		check    func(t *testing.T, s *Scorer)
	}{
		{
			name: "defaults",
			raw:  "",
			check: func(t *testing.T, s *Scorer) {
				if s.sessionID || s.header != "x-session-token" || s.profileName != "" || s.store != nil {
					t.Errorf("got sessionID=%v header=%q profile=%q", s.sessionID, s.header, s.profileName)
				}
			},
		},
		{
			name: "encoded with flat header and profile",
			raw:  `{"headerName": "X-Session-Token-Prefill", "profileName": "prefill"}`,
			check: func(t *testing.T, s *Scorer) {
				if s.header != "x-session-token-prefill" || s.profileName != "prefill" {
					t.Errorf("got header=%q profile=%q", s.header, s.profileName)
				}
			},
		},
		{
			name: "encoded with llm-d nested header",
			raw:  `{"profileName": "prefill", "encodedEndpointHeaderConfig": {"header": "x-session-token-prefill"}}`,
			check: func(t *testing.T, s *Scorer) {
				if s.header != "x-session-token-prefill" {
					t.Errorf("got header=%q", s.header)
				}
			},
		},
		{
			name: "session_id defaults",
			raw:  `{"strategy": "session_id"}`,
			check: func(t *testing.T, s *Scorer) {
				if !s.sessionID || len(s.sources) != 1 || s.sources[0].header != "x-session-id" {
					t.Errorf("got sessionID=%v sources=%+v", s.sessionID, s.sources)
				}
				if s.store.ttl != 300*time.Second || s.store.sweep != 10*time.Second {
					t.Errorf("got ttl=%v sweep=%v", s.store.ttl, s.store.sweep)
				}
			},
		},
		{
			name: "session_id flat",
			raw:  `{"strategy": "session_id", "headerName": "X-Conversation", "evictionTtlSeconds": 60, "evictionSweepSeconds": 0.5}`,
			check: func(t *testing.T, s *Scorer) {
				if len(s.sources) != 1 || s.sources[0].header != "x-conversation" {
					t.Errorf("got sources=%+v", s.sources)
				}
				if s.store.ttl != time.Minute || s.store.sweep != 500*time.Millisecond {
					t.Errorf("got ttl=%v sweep=%v", s.store.ttl, s.store.sweep)
				}
			},
		},
		{
			name: "session_id llm-d nested",
			raw: `{"strategy": "session_id", "evictionTtlSeconds": 60, "sessionIdConfig": {
				"sources": [{"header": "x-session-id"}, {"attribute": "agent-identity"}],
				"evictionTtlSeconds": 120, "evictionSweepSeconds": 5}}`,
			check: func(t *testing.T, s *Scorer) {
				if len(s.sources) != 2 || s.sources[0].header != "x-session-id" || !s.sources[1].isAttr ||
					s.sources[1].attr.Name() != "agent-identity" {
					t.Errorf("got sources=%+v", s.sources)
				}
				if s.store.ttl != 2*time.Minute || s.store.sweep != 5*time.Second {
					t.Errorf("got ttl=%v sweep=%v", s.store.ttl, s.store.sweep)
				}
			},
		},
		{
			name: "zero ttl never expires, huge ttl is capped",
			raw:  `{"strategy": "session_id", "evictionTtlSeconds": 0, "evictionSweepSeconds": 1e300}`,
			check: func(t *testing.T, s *Scorer) {
				if s.store.ttl != 0 || s.store.sweep != maxDuration {
					t.Errorf("got ttl=%v sweep=%v", s.store.ttl, s.store.sweep)
				}
			},
		},
		{
			name: "session_id config ignored by encoded strategy",
			raw:  `{"sessionIdConfig": {"sources": [{"header": "x-a"}]}, "headerName": "x-b"}`,
			check: func(t *testing.T, s *Scorer) {
				if s.sessionID || s.header != "x-b" {
					t.Errorf("got sessionID=%v header=%q", s.sessionID, s.header)
				}
			},
		},
		{
			name: "every invalid field is reported",
			raw: `{"strategy": "cookie", "headerName": "bad header", "evictionTtlSeconds": -1, "evictionSweepSeconds": 0,
				"encodedEndpointHeaderConfig": {"header": "x:y"},
				"sessionIdConfig": {"sources": [{}, {"header": "a", "attribute": "b"}, {"header": "é"}],
					"evictionTtlSeconds": -2, "evictionSweepSeconds": -3}}`,
			wantErrs: []string{
				`strategy: must be "encoded_endpoint_header" or "session_id", got "cookie"`,
				`headerName: "bad header" is not a valid HTTP header name`,
				"evictionTtlSeconds: must be a finite number >= 0, got -1",
				"evictionSweepSeconds: must be a finite number > 0, got 0",
				`encodedEndpointHeaderConfig.header: "x:y" is not a valid HTTP header name`,
				`encodedEndpointHeaderConfig.header: "x:y" conflicts with headerName`,
				"sessionIdConfig.sources[0]: set exactly one of header and attribute",
				"sessionIdConfig.sources[1]: set exactly one of header and attribute",
				`sessionIdConfig.sources[2].header: "é" is not a valid HTTP header name`,
				"sessionIdConfig.evictionTtlSeconds: must be a finite number >= 0, got -2",
				"sessionIdConfig.evictionSweepSeconds: must be a finite number > 0, got -3",
			},
		},
		{
			name:     "headerName conflicts with sources",
			raw:      `{"strategy": "session_id", "headerName": "x-a", "sessionIdConfig": {"sources": [{"header": "x-b"}]}}`,
			wantErrs: []string{"sessionIdConfig.sources: cannot be combined with headerName"},
		},
		{name: "unknown key", raw: `{"algorithm": "session_id"}`, wantErrs: []string{"algorithm"}},
		{name: "unknown nested key", raw: `{"sessionIdConfig": {"ttl": 1}}`, wantErrs: []string{"ttl"}},
		{name: "wrong type", raw: `{"evictionTtlSeconds": "300s"}`, wantErrs: []string{"evictionTtlSeconds: expected a number"}},
		{name: "wrong nested type", raw: `{"sessionIdConfig": {"sources": {"header": "x"}}}`, wantErrs: []string{"expected a list"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Registration.Factory("affinity", json.RawMessage(tt.raw), schedulingtest.NewHandle(t))
			if len(tt.wantErrs) > 0 {
				if err == nil {
					t.Fatalf("no error, want %q", tt.wantErrs)
				}
				if got := len(scheduling.Errors(err)); len(tt.wantErrs) > 1 && got != len(tt.wantErrs) {
					t.Errorf("%d errors reported, want %d: %v", got, len(tt.wantErrs), err)
				}
				for _, w := range tt.wantErrs {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not contain %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			s := p.(*Scorer)
			if got := s.TypedName(); got != (scheduling.TypedName{Type: Type, Name: "affinity"}) {
				t.Errorf("TypedName() = %v", got)
			}
			if s.Category() != scheduling.Affinity {
				t.Errorf("Category() = %v", s.Category())
			}
			tt.check(t, s)
		})
	}
}

func newScorer(t testing.TB, raw string) *Scorer {
	t.Helper()
	p, err := Registration.Factory(Type, json.RawMessage(raw), schedulingtest.NewHandle(t))
	if err != nil {
		t.Fatal(err)
	}
	return p.(*Scorer)
}

func token(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

func podEndpoints() []*scheduling.Endpoint {
	return []*scheduling.Endpoint{
		schedulingtest.Endpoint("pod-a").Namespace("default").Address("127.0.0.2").Build(),
		schedulingtest.Endpoint("pod-b").Namespace("default").Address("127.0.0.3").Build(),
		schedulingtest.Endpoint("pod-a").Namespace("other").Address("127.0.0.4").Build(),
		schedulingtest.Endpoint("pod-c").Address("127.0.0.5").Build(), // standalone: no namespace
	}
}

func TestScoreEncodedEndpointHeader(t *testing.T) {
	long := strings.Repeat("n", 300) + "/" + strings.Repeat("p", 300)
	tests := []struct {
		name    string
		headers map[string]string
		want    []float64
	}{
		{name: "no header", headers: nil, want: []float64{0, 0, 0, 0}},
		{name: "session endpoint", headers: map[string]string{"x-session-token": token("default/pod-b")}, want: []float64{0, 1, 0, 0}},
		{name: "namespace must match", headers: map[string]string{"x-session-token": token("other/pod-a")}, want: []float64{0, 0, 1, 0}},
		{name: "empty namespace", headers: map[string]string{"x-session-token": token("/pod-c")}, want: []float64{0, 0, 0, 1}},
		{name: "name without namespace does not match", headers: map[string]string{"x-session-token": token("pod-a")}, want: []float64{0, 0, 0, 0}},
		{name: "unknown endpoint", headers: map[string]string{"x-session-token": token("default/gone")}, want: []float64{0, 0, 0, 0}},
		{name: "invalid base64", headers: map[string]string{"x-session-token": "%%%not-base64"}, want: []float64{0, 0, 0, 0}},
		{name: "long token", headers: map[string]string{"x-session-token": token(long)}, want: []float64{0, 0, 0, 0}},
		{name: "too long token", headers: map[string]string{"x-session-token": strings.Repeat("QUFB", 2000)}, want: []float64{0, 0, 0, 0}},
		{name: "other header ignored", headers: map[string]string{"x-session-id": token("default/pod-a")}, want: []float64{0, 0, 0, 0}},
	}
	s := newScorer(t, "")
	eps := podEndpoints()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			scores := []float64{0.5, 0.5, 0.5, 0.5} // stale values are overwritten
			s.Score(t.Context(), &scheduling.Request{Headers: tt.headers}, eps, scores)
			for i := range tt.want {
				if scores[i] != tt.want[i] {
					t.Errorf("score[%d] (%s) = %v, want %v", i, eps[i].Key(), scores[i], tt.want[i])
				}
			}
		})
	}
	t.Run("nil request", func(t *testing.T) {
		scores := make([]float64, len(eps))
		s.Score(t.Context(), nil, eps, scores)
		for i, v := range scores {
			if v != 0 {
				t.Errorf("score[%d] = %v, want 0", i, v)
			}
		}
	})
}

func resultFor(primary string, profiles map[string]*scheduling.Endpoint) *scheduling.Result {
	r := &scheduling.Result{PrimaryProfile: primary, ProfileResults: map[string]*scheduling.ProfileResult{}}
	for name, e := range profiles {
		r.ProfileResults[name] = &scheduling.ProfileResult{Targets: []*scheduling.Endpoint{e}}
	}
	return r
}

func TestResponseReceived(t *testing.T) {
	eps := podEndpoints()
	decode, prefill := eps[0], eps[1]
	result := resultFor("decode", map[string]*scheduling.Endpoint{"decode": decode, "prefill": prefill})
	tests := []struct {
		name       string
		raw        string
		preRequest bool
		target     *scheduling.Endpoint
		headers    map[string]string
		want       map[string]string
	}{
		{name: "served target", raw: "", target: decode, want: map[string]string{"x-session-token": token("default/pod-a")}},
		{name: "creates the header map", raw: "", target: decode, headers: nil, want: map[string]string{"x-session-token": token("default/pod-a")}},
		{name: "keeps other headers", raw: "", target: eps[3], headers: map[string]string{"content-type": "text/event-stream"},
			want: map[string]string{"content-type": "text/event-stream", "x-session-token": token("/pod-c")}},
		{name: "primary from PreRequest without target", raw: "", preRequest: true, want: map[string]string{"x-session-token": token("default/pod-a")}},
		{name: "no target known", raw: "", want: map[string]string{}},
		{name: "prefill profile", raw: `{"profileName": "prefill", "headerName": "x-session-token-prefill"}`, preRequest: true, target: decode,
			want: map[string]string{"x-session-token-prefill": token("default/pod-b")}},
		{name: "profile that did not run", raw: `{"profileName": "encode"}`, preRequest: true, target: decode, want: map[string]string{}},
		{name: "session_id writes nothing", raw: `{"strategy": "session_id"}`, preRequest: true, target: decode, want: map[string]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newScorer(t, tt.raw)
			req := &scheduling.Request{Headers: map[string]string{"x-session-id": "abc"}}
			if tt.preRequest {
				s.PreRequest(t.Context(), req, result)
			}
			resp := &scheduling.Response{Headers: tt.headers}
			s.ResponseReceived(t.Context(), req, resp, tt.target)
			if len(resp.Headers) != len(tt.want) {
				t.Errorf("headers = %v, want %v", resp.Headers, tt.want)
			}
			for k, v := range tt.want {
				if resp.Headers[k] != v {
					t.Errorf("header %s = %q, want %q", k, resp.Headers[k], v)
				}
			}
		})
	}
	t.Run("nil response", func(t *testing.T) {
		newScorer(t, "").ResponseReceived(t.Context(), &scheduling.Request{}, nil, decode)
	})
}

// TestEncodedRoundTrip: the header written on a response pins the next
// request of the session.
func TestEncodedRoundTrip(t *testing.T) {
	s := newScorer(t, "")
	eps := podEndpoints()
	for _, served := range eps {
		resp := &scheduling.Response{}
		s.ResponseReceived(t.Context(), &scheduling.Request{}, resp, served)
		next := &scheduling.Request{Headers: map[string]string{"x-session-token": resp.Headers["x-session-token"]}}
		scores := make([]float64, len(eps))
		s.Score(t.Context(), next, eps, scores)
		for i, e := range eps {
			want := 0.0
			if e == served {
				want = 1
			}
			if scores[i] != want {
				t.Errorf("served by %s: score[%s] = %v, want %v", served.Key(), e.Key(), scores[i], want)
			}
		}
	}
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func scoresOf(t *testing.T, s *Scorer, req *scheduling.Request, eps []*scheduling.Endpoint) []float64 {
	t.Helper()
	scores := make([]float64, len(eps))
	s.Score(t.Context(), req, eps, scores)
	return scores
}

func TestSessionID(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	s := newScorer(t, `{"strategy": "session_id", "evictionTtlSeconds": 300, "evictionSweepSeconds": 10}`)
	s.store.now = clock.now
	eps := podEndpoints()
	req := func(id string) *scheduling.Request {
		return &scheduling.Request{Headers: map[string]string{"x-session-id": id}}
	}
	want := func(t *testing.T, r *scheduling.Request, w ...float64) {
		t.Helper()
		got := scoresOf(t, s, r, eps)
		for i := range w {
			if got[i] != w[i] {
				t.Errorf("scores = %v, want %v", got, w)
				return
			}
		}
	}

	want(t, req("s1"), 0, 0, 0, 0) // unknown session: no preference
	want(t, &scheduling.Request{}, 0, 0, 0, 0)
	s.PreRequest(t.Context(), req("s1"), resultFor("default", map[string]*scheduling.Endpoint{"default": eps[2]}))
	want(t, req("s1"), 0, 0, 1, 0)
	want(t, req("s2"), 0, 0, 0, 0)

	// Every request refreshes the binding.
	clock.advance(200 * time.Second)
	s.PreRequest(t.Context(), req("s1"), resultFor("default", map[string]*scheduling.Endpoint{"default": eps[2]}))
	clock.advance(200 * time.Second)
	want(t, req("s1"), 0, 0, 1, 0)

	// A session that moved (its endpoint left the candidates) rebinds.
	s.PreRequest(t.Context(), req("s1"), resultFor("default", map[string]*scheduling.Endpoint{"default": eps[0]}))
	want(t, req("s1"), 1, 0, 0, 0)

	// Unused for longer than the TTL: forgotten when read, dropped by the
	// next sweep of its shard.
	clock.advance(301 * time.Second)
	want(t, req("s1"), 0, 0, 0, 0)
	if s.Sessions() != 1 {
		t.Fatalf("Sessions() = %d before the sweep, want 1", s.Sessions())
	}
	// Fill every shard so that the expired binding's shard is swept.
	for i := range 1000 {
		s.PreRequest(t.Context(), req(fmt.Sprintf("fill-%d", i)), resultFor("default", map[string]*scheduling.Endpoint{"default": eps[1]}))
	}
	if got := s.Sessions(); got != 1000 {
		t.Errorf("Sessions() = %d after the sweep, want 1000", got)
	}
}

func TestSessionIDSourcesAndProfile(t *testing.T) {
	eps := podEndpoints()
	agent := scheduling.NewStateKey[string]("agent-identity")
	s := newScorer(t, `{"strategy": "session_id", "profileName": "prefill",
		"sessionIdConfig": {"sources": [{"header": "x-session-id"}, {"attribute": "agent-identity"}]}}`)
	result := resultFor("decode", map[string]*scheduling.Endpoint{"decode": eps[0], "prefill": eps[1]})

	byAgent := &scheduling.Request{}
	agent.Set(byAgent, "agent-7")
	s.PreRequest(t.Context(), byAgent, result)
	if got := scoresOf(t, s, byAgent, eps); got[1] != 1 || got[0] != 0 {
		t.Errorf("agent session scores = %v, want the prefill endpoint", got)
	}
	// The header comes first; it names a different, unknown session.
	both := &scheduling.Request{Headers: map[string]string{"x-session-id": "h-1"}}
	agent.Set(both, "agent-7")
	if got := scoresOf(t, s, both, eps); got[1] != 0 {
		t.Errorf("header session scores = %v, want no preference", got)
	}
	// A profile that did not run binds nothing.
	s.PreRequest(t.Context(), both, resultFor("decode", map[string]*scheduling.Endpoint{"decode": eps[0]}))
	if s.Sessions() != 1 {
		t.Errorf("Sessions() = %d, want 1", s.Sessions())
	}
	s.PreRequest(t.Context(), both, nil)
	s.PreRequest(t.Context(), nil, result)
}

func TestSessionIDBounded(t *testing.T) {
	s := newScorer(t, `{"strategy": "session_id", "evictionTtlSeconds": 0}`)
	s.store.perShard = 4
	ep := podEndpoints()[0]
	res := resultFor("default", map[string]*scheduling.Endpoint{"default": ep})
	for i := range 10_000 {
		s.PreRequest(t.Context(), &scheduling.Request{Headers: map[string]string{"x-session-id": fmt.Sprint(i)}}, res)
	}
	if got, limit := s.Sessions(), 4*shardCount; got > limit {
		t.Errorf("Sessions() = %d, want at most %d", got, limit)
	}
	// The newest session is always kept.
	last := &scheduling.Request{Headers: map[string]string{"x-session-id": "9999"}}
	if got := scoresOf(t, s, last, []*scheduling.Endpoint{ep}); got[0] != 1 {
		t.Errorf("newest session score = %v, want 1", got[0])
	}
}

// TestSessionIDMemoryBounded checks that a session binding costs a fixed
// amount of memory however long its identifier is: the map stores a
// 128-bit hash of the identifier, not the identifier.
func TestSessionIDMemoryBounded(t *testing.T) {
	if size := unsafe.Sizeof(sessionKey{}); size != 16 {
		t.Errorf("session key is %d bytes, want 16", size)
	}
	s := newScorer(t, `{"strategy": "session_id", "evictionTtlSeconds": 0}`)
	ep := podEndpoints()[0]
	res := resultFor("default", map[string]*scheduling.Endpoint{"default": ep})
	const sessions, idLen = 2048, 8 << 10
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	for i := range sessions {
		// A fresh 8 KiB identifier per request, as a header value would be.
		id := fmt.Sprintf("%0*d", idLen, i)
		s.PreRequest(t.Context(), &scheduling.Request{Headers: map[string]string{"x-session-id": id}}, res)
	}
	after := heap()
	if got := s.Sessions(); got != sessions {
		t.Fatalf("Sessions() = %d, want %d", got, sessions)
	}
	perEntry := (int64(after) - int64(before)) / sessions
	t.Logf("%d bytes per session with %d-byte identifiers", perEntry, idLen)
	if perEntry > 256 {
		t.Errorf("%d bytes retained per session with %d-byte identifiers, want at most 256", perEntry, idLen)
	}
	// Long identifiers still get affinity.
	long := &scheduling.Request{Headers: map[string]string{"x-session-id": fmt.Sprintf("%0*d", idLen, 7)}}
	if got := scoresOf(t, s, long, []*scheduling.Endpoint{ep}); got[0] != 1 {
		t.Errorf("long session score = %v, want 1", got[0])
	}
	other := &scheduling.Request{Headers: map[string]string{"x-session-id": fmt.Sprintf("%0*d", idLen, sessions+1)}}
	if got := scoresOf(t, s, other, []*scheduling.Endpoint{ep}); got[0] != 0 {
		t.Errorf("unknown long session score = %v, want 0", got[0])
	}
	runtime.KeepAlive(s)
}

// TestSessionIDConcurrent scores and binds from many goroutines while the
// clock moves and shards are swept. Run with -race.
func TestSessionIDConcurrent(t *testing.T) {
	s := newScorer(t, `{"strategy": "session_id", "evictionTtlSeconds": 1, "evictionSweepSeconds": 0.001}`)
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	s.store.now = clock.now
	s.store.perShard = 8
	eps := podEndpoints()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			scores := make([]float64, len(eps))
			for i := range 500 {
				id := fmt.Sprintf("s-%d", (w*31+i)%200)
				req := &scheduling.Request{Headers: map[string]string{"x-session-id": id}}
				s.Score(t.Context(), req, eps, scores)
				for _, v := range scores {
					if v != 0 && v != 1 {
						t.Errorf("score %v", v)
					}
				}
				s.PreRequest(t.Context(), req, resultFor("default", map[string]*scheduling.Endpoint{"default": eps[i%len(eps)]}))
				if i%50 == 0 {
					clock.advance(300 * time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
	if got := s.Sessions(); got > 8*shardCount {
		t.Errorf("Sessions() = %d, want at most %d", got, 8*shardCount)
	}
}

// TestNoGoroutines: eviction is lazy, so instances start no goroutine and
// need no shutdown.
func TestNoGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	for range 20 {
		newScorer(t, `{"strategy": "session_id"}`)
	}
	if after := runtime.NumGoroutine(); after > before {
		t.Errorf("goroutines %d -> %d after creating scorers", before, after)
	}
}
