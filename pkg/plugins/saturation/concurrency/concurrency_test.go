package concurrency

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

func build(t testing.TB, raw string) (*Detector, error) {
	t.Helper()
	var params json.RawMessage
	if raw != "" {
		params = json.RawMessage(raw)
	}
	p, err := Registration.Factory("cd", params, schedulingtest.NewHandle(t))
	if err != nil {
		return nil, err
	}
	return p.(*Detector), nil
}

func mustBuild(t testing.TB, raw string) *Detector {
	t.Helper()
	d, err := build(t, raw)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestParams(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		raw        string
		wantErrs   []string
		wantTokens bool
		wantCap    int64
		wantLimit  int64
	}{
		{name: "no parameters gives the defaults", wantCap: 100, wantLimit: 100},
		{name: "null parameters", raw: `null`, wantCap: 100, wantLimit: 100},
		{name: "requests mode with headroom", raw: `{"concurrencyMode": "requests", "maxConcurrency": 10, "headroom": 0.5}`, wantCap: 10, wantLimit: 15},
		{name: "tokens mode default capacity", raw: `{"concurrencyMode": "tokens"}`, wantTokens: true, wantCap: 1_000_000, wantLimit: 1_000_000},
		{name: "tokens mode", raw: `{"concurrencyMode": "tokens", "maxTokenConcurrency": 100, "headroom": 0.2}`, wantTokens: true, wantCap: 100, wantLimit: 120},
		{name: "headroom above 1 is allowed", raw: `{"headroom": 3}`, wantCap: 100, wantLimit: 400},
		{name: "unknown key", raw: `{"maxInflight": 3}`, wantErrs: []string{`unknown field "maxInflight"`}},
		{name: "wrong type", raw: `{"maxConcurrency": "100"}`, wantErrs: []string{"maxConcurrency: expected an integer"}},
		{name: "fractional capacity", raw: `{"maxConcurrency": 1.5}`, wantErrs: []string{"maxConcurrency: expected an integer"}},
		{name: "unknown mode", raw: `{"concurrencyMode": "bytes"}`, wantErrs: []string{`concurrencyMode: must be "requests" or "tokens", got "bytes"`}},
		{name: "empty mode", raw: `{"concurrencyMode": ""}`, wantErrs: []string{`concurrencyMode: must be "requests" or "tokens", got ""`}},
		{name: "zero maxConcurrency", raw: `{"maxConcurrency": 0}`, wantErrs: []string{"maxConcurrency: must be > 0, got 0"}},
		{name: "negative maxTokenConcurrency", raw: `{"maxTokenConcurrency": -5}`, wantErrs: []string{"maxTokenConcurrency: must be > 0, got -5"}},
		{name: "negative headroom", raw: `{"headroom": -0.1}`, wantErrs: []string{"headroom: must be >= 0, got -0.1"}},
		{
			name: "every problem is reported",
			raw:  `{"concurrencyMode": "x", "maxConcurrency": -1, "maxTokenConcurrency": 0, "headroom": -1}`,
			wantErrs: []string{
				"concurrencyMode: must be",
				"maxConcurrency: must be > 0",
				"maxTokenConcurrency: must be > 0",
				"headroom: must be >= 0",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d, err := build(t, tt.raw)
			if len(tt.wantErrs) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if d.tokens != tt.wantTokens || d.capacity != tt.wantCap || d.limit != tt.wantLimit {
					t.Errorf("tokens, capacity, limit = %v, %d, %d; want %v, %d, %d", d.tokens, d.capacity, d.limit, tt.wantTokens, tt.wantCap, tt.wantLimit)
				}
				if got := d.TypedName(); got != (scheduling.TypedName{Type: Type, Name: "cd"}) {
					t.Errorf("TypedName() = %v", got)
				}
				return
			}
			if err == nil {
				t.Fatalf("want errors %q, got none", tt.wantErrs)
			}
			leaves := scheduling.Errors(err)
			if len(leaves) != len(tt.wantErrs) {
				t.Fatalf("got %d errors %q, want %d", len(leaves), err, len(tt.wantErrs))
			}
			for i, want := range tt.wantErrs {
				if !strings.Contains(leaves[i].Error(), want) {
					t.Errorf("error %d = %q, want it to contain %q", i, leaves[i], want)
				}
			}
		})
	}
}

// fakeLoad is a scheduling.InFlightLoad with fixed counts per endpoint key.
type fakeLoad map[string][2]int64

func (f fakeLoad) InFlight(key string) (requests, tokens int64) {
	c := f[key]
	return c[0], c[1]
}

// request returns a request carrying the view, as the
// inflight-load-producer leaves it after Produce.
func request(load scheduling.InFlightLoad) *scheduling.Request {
	req := &scheduling.Request{}
	scheduling.InFlightLoadKey.Set(req, load)
	return req
}

// loadOf gives the endpoints the requests and tokens counts, in order.
func loadOf(eps []*scheduling.Endpoint, requests, tokens []int64) fakeLoad {
	f := fakeLoad{}
	for i, e := range eps {
		var c [2]int64
		if i < len(requests) {
			c[0] = requests[i]
		}
		if i < len(tokens) {
			c[1] = tokens[i]
		}
		f[e.Key()] = c
	}
	return f
}

func TestSaturation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		params   string
		n        int     // endpoints
		requests []int64 // in-flight requests per endpoint
		tokens   []int64 // in-flight tokens per endpoint
		want     float64
	}{
		{name: "no candidates is saturated", params: `{}`, n: 0, want: 1},
		{name: "idle", params: `{}`, n: 3, requests: []int64{0, 0, 0}, want: 0},
		{name: "requests over pool capacity", params: `{"maxConcurrency": 10}`, n: 2, requests: []int64{5, 10}, tokens: []int64{999, 999}, want: 0.75},
		{name: "one full endpoint of two", params: `{"maxConcurrency": 10}`, n: 2, requests: []int64{10, 0}, want: 0.5},
		{name: "over capacity", params: `{"maxConcurrency": 2}`, n: 1, requests: []int64{3}, want: 1.5},
		{name: "tokens", params: `{"concurrencyMode": "tokens", "maxTokenConcurrency": 100}`, n: 2, requests: []int64{99, 99}, tokens: []int64{30, 20}, want: 0.25},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := mustBuild(t, tt.params)
			eps := schedulingtest.Endpoints(tt.n, nil)
			req := request(loadOf(eps, tt.requests, tt.tokens))
			if got := d.Saturation(t.Context(), req, eps); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("Saturation() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSaturationIgnoresEndpointsOutsideCandidates(t *testing.T) {
	t.Parallel()
	d := mustBuild(t, `{"maxConcurrency": 10}`)
	eps := schedulingtest.Endpoints(2, nil)
	req := request(loadOf(eps, []int64{10}, nil))
	if got := d.Saturation(t.Context(), req, eps[1:]); got != 0 {
		t.Errorf("Saturation(other endpoint) = %v, want 0", got)
	}
}

func TestFilter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		params   string
		requests []int64
		tokens   []int64
		want     []string
	}{
		{name: "all under capacity", params: `{"maxConcurrency": 3}`, requests: []int64{0, 2, 1}, want: []string{"ep-0", "ep-1", "ep-2"}},
		{name: "at capacity is removed", params: `{"maxConcurrency": 3}`, requests: []int64{3, 2, 4}, want: []string{"ep-1"}},
		{name: "headroom relaxes the limit", params: `{"maxConcurrency": 10, "headroom": 0.2}`, requests: []int64{11, 12, 10}, want: []string{"ep-0", "ep-2"}},
		{name: "order is kept", params: `{"maxConcurrency": 1}`, requests: []int64{0, 1, 0, 1, 0}, want: []string{"ep-0", "ep-2", "ep-4"}},
		{name: "none under capacity: none kept, as in GIE", params: `{"maxConcurrency": 1}`, requests: []int64{1, 2}, want: []string{}},
		// Limit 120 tokens; the request counts are not looked at.
		{name: "tokens", params: `{"concurrencyMode": "tokens", "maxTokenConcurrency": 100, "headroom": 0.2}`, requests: []int64{500, 0}, tokens: []int64{110, 120}, want: []string{"ep-0"}},
		{name: "empty input", params: `{}`, want: []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := mustBuild(t, tt.params)
			eps := schedulingtest.Endpoints(max(len(tt.requests), len(tt.tokens)), nil)
			before := slices.Clone(eps)
			got := d.Filter(t.Context(), request(loadOf(eps, tt.requests, tt.tokens)), eps)
			if names := schedulingtest.Names(got); !slices.Equal(names, tt.want) {
				t.Errorf("Filter() = %v, want %v", names, tt.want)
			}
			if !slices.Equal(eps, before) {
				t.Error("Filter modified its input")
			}
		})
	}
}

// TestWithoutView checks that without an in-flight view on the request
// every endpoint counts as idle.
func TestWithoutView(t *testing.T) {
	t.Parallel()
	d := mustBuild(t, `{"maxConcurrency": 1}`)
	eps := schedulingtest.Endpoints(3, nil)
	for name, req := range map[string]*scheduling.Request{
		"nil request": nil,
		"key unset":   {},
		"nil view":    request(nil),
	} {
		if got := d.Saturation(t.Context(), req, eps); got != 0 {
			t.Errorf("%s: Saturation() = %v, want 0", name, got)
		}
		if got := d.Saturation(t.Context(), req, nil); got != 1 {
			t.Errorf("%s: Saturation(no candidates) = %v, want 1", name, got)
		}
		if got := d.Filter(t.Context(), req, eps); len(got) != len(eps) || &got[0] != &eps[0] {
			t.Errorf("%s: Filter() = %v, want the input", name, schedulingtest.Names(got))
		}
	}
}

func TestConsumesTheProducersKey(t *testing.T) {
	t.Parallel()
	d := mustBuild(t, `{}`)
	key := scheduling.InFlightLoadKey.Name()
	if got := d.Consumes(); !slices.Equal(got, []string{key}) {
		t.Errorf("Consumes() = %q, want [%q]", got, key)
	}
	if ptype, params, ok := d.DefaultProducer(key); !ok || ptype != "inflight-load-producer" || params != nil {
		t.Errorf("DefaultProducer(%q) = %q, %q, %v", key, ptype, params, ok)
	}
	if ptype, _, ok := d.DefaultProducer("other"); ok {
		t.Errorf("DefaultProducer(other) = %q, want none", ptype)
	}
}

// liveLoad is a view whose counts change while it is read.
type liveLoad struct {
	mu sync.Mutex
	m  map[string]int64
}

func (l *liveLoad) InFlight(key string) (int64, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.m[key], 10 * l.m[key]
}

func (l *liveLoad) add(key string, n int64) {
	l.mu.Lock()
	l.m[key] += n
	l.mu.Unlock()
}

// TestConcurrentUse reads a view that changes under the detector; it only
// checks that the detector holds no state of its own (run with -race).
func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	d := mustBuild(t, `{"concurrencyMode": "tokens", "maxTokenConcurrency": 50}`)
	eps := schedulingtest.Endpoints(3, nil)
	load := &liveLoad{m: map[string]int64{}}
	ctx := t.Context()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				e := eps[(g+i)%len(eps)]
				load.add(e.Key(), 1)
				req := request(load)
				if s := d.Saturation(ctx, req, eps); s < 0 {
					t.Errorf("Saturation() = %v", s)
				}
				d.Filter(ctx, req, eps)
				load.add(e.Key(), -1)
			}
		})
	}
	wg.Wait()
	if got := d.Saturation(ctx, request(load), eps); got != 0 {
		t.Errorf("Saturation() = %v after all completed", got)
	}
}

func TestFilterDoesNotAllocateWhenAllPass(t *testing.T) {
	d := mustBuild(t, `{}`)
	eps := schedulingtest.Endpoints(100, nil)
	req := request(loadOf(eps, slices.Repeat([]int64{1}, len(eps)), nil))
	if allocs := testing.AllocsPerRun(100, func() { d.Filter(t.Context(), req, eps) }); allocs != 0 {
		t.Errorf("Filter allocated %v times per run", allocs)
	}
}
