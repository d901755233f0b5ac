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

func result(targets ...*scheduling.Endpoint) *scheduling.Result {
	return &scheduling.Result{
		PrimaryProfile: "default",
		ProfileResults: map[string]*scheduling.ProfileResult{"default": {Targets: targets}},
	}
}

// send counts n requests of promptTokens each against e and returns them.
func send(t testing.TB, d *Detector, e *scheduling.Endpoint, n, promptTokens int) []*scheduling.Request {
	t.Helper()
	reqs := make([]*scheduling.Request, n)
	for i := range reqs {
		reqs[i] = &scheduling.Request{ID: e.Name(), PromptTokens: promptTokens}
		d.PreRequest(t.Context(), reqs[i], result(e))
	}
	return reqs
}

func complete(t testing.TB, d *Detector, reqs ...*scheduling.Request) {
	t.Helper()
	for _, r := range reqs {
		d.ResponseComplete(t.Context(), r, &scheduling.Response{EndOfStream: true}, nil)
	}
}

func TestSaturation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		params string
		n      int   // endpoints
		load   []int // requests sent to each endpoint
		prompt int   // prompt tokens per request
		want   float64
	}{
		{name: "no candidates is saturated", params: `{}`, n: 0, want: 1},
		{name: "idle", params: `{}`, n: 3, load: []int{0, 0, 0}, want: 0},
		{name: "requests over pool capacity", params: `{"maxConcurrency": 10}`, n: 2, load: []int{5, 10}, want: 0.75},
		{name: "one full endpoint of two", params: `{"maxConcurrency": 10}`, n: 2, load: []int{10, 0}, want: 0.5},
		{name: "over capacity", params: `{"maxConcurrency": 2}`, n: 1, load: []int{3}, want: 1.5},
		// 4 prompt tokens → 4 + 6 = 10 tokens per request.
		{name: "tokens", params: `{"concurrencyMode": "tokens", "maxTokenConcurrency": 100}`, n: 2, load: []int{3, 2}, prompt: 4, want: 0.25},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := mustBuild(t, tt.params)
			eps := schedulingtest.Endpoints(tt.n, nil)
			for i, n := range tt.load {
				send(t, d, eps[i], n, tt.prompt)
			}
			if got := d.Saturation(t.Context(), eps); math.Abs(got-tt.want) > 1e-9 {
				t.Errorf("Saturation() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSaturationIgnoresEndpointsOutsideCandidates(t *testing.T) {
	t.Parallel()
	d := mustBuild(t, `{"maxConcurrency": 10}`)
	eps := schedulingtest.Endpoints(2, nil)
	send(t, d, eps[0], 10, 0)
	if got := d.Saturation(t.Context(), eps[1:]); got != 0 {
		t.Errorf("Saturation(other endpoint) = %v, want 0", got)
	}
}

func TestFilter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		params string
		load   []int
		prompt int
		want   []string
	}{
		{name: "all under capacity", params: `{"maxConcurrency": 3}`, load: []int{0, 2, 1}, want: []string{"ep-0", "ep-1", "ep-2"}},
		{name: "at capacity is removed", params: `{"maxConcurrency": 3}`, load: []int{3, 2, 4}, want: []string{"ep-1"}},
		{name: "headroom relaxes the limit", params: `{"maxConcurrency": 10, "headroom": 0.2}`, load: []int{11, 12, 10}, want: []string{"ep-0", "ep-2"}},
		{name: "order is kept", params: `{"maxConcurrency": 1}`, load: []int{0, 1, 0, 1, 0}, want: []string{"ep-0", "ep-2", "ep-4"}},
		{name: "none under capacity: none kept, as in GIE", params: `{"maxConcurrency": 1}`, load: []int{1, 2}, want: []string{}},
		// 4 prompt tokens → 10 tokens per request; limit 120.
		{name: "tokens", params: `{"concurrencyMode": "tokens", "maxTokenConcurrency": 100, "headroom": 0.2}`, load: []int{11, 12}, prompt: 4, want: []string{"ep-0"}},
		{name: "empty input", params: `{}`, load: nil, want: []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := mustBuild(t, tt.params)
			eps := schedulingtest.Endpoints(len(tt.load), nil)
			for i, n := range tt.load {
				send(t, d, eps[i], n, tt.prompt)
			}
			before := slices.Clone(eps)
			got := d.Filter(t.Context(), &scheduling.Request{}, eps)
			if names := schedulingtest.Names(got); !slices.Equal(names, tt.want) {
				t.Errorf("Filter() = %v, want %v", names, tt.want)
			}
			if !slices.Equal(eps, before) {
				t.Error("Filter modified its input")
			}
		})
	}
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	d := mustBuild(t, `{"maxConcurrency": 4}`)
	eps := schedulingtest.Endpoints(2, nil)
	ctx := t.Context()
	check := func(step string, wantReqs, wantToks int64) {
		t.Helper()
		reqs, toks := d.InFlight(eps[0].Key())
		if reqs != wantReqs || toks != wantToks {
			t.Errorf("%s: InFlight = %d, %d; want %d, %d", step, reqs, toks, wantReqs, wantToks)
		}
	}

	r1 := &scheduling.Request{PromptTokens: 10} // 25 tokens
	r2 := &scheduling.Request{PromptTokens: 2}  // 5 tokens
	d.PreRequest(ctx, r1, result(eps[0], eps[1]))
	d.PreRequest(ctx, r2, result(eps[0]))
	check("two requests", 2, 30)
	// Every primary target is charged, as by GIE's producer.
	if reqs, toks := d.InFlight(eps[1].Key()); reqs != 1 || toks != 25 {
		t.Errorf("fallback target: InFlight = %d, %d; want 1, 25", reqs, toks)
	}

	// Releasing happens once, on every endpoint charged, even if completion
	// is reported twice and whatever endpoint the completion names.
	d.ResponseComplete(ctx, r1, &scheduling.Response{Disconnected: true}, eps[1])
	d.ResponseComplete(ctx, r1, &scheduling.Response{EndOfStream: true}, eps[0])
	check("one released", 1, 5)
	if reqs, toks := d.InFlight(eps[1].Key()); reqs != 0 || toks != 0 {
		t.Errorf("fallback target after completion: InFlight = %d, %d", reqs, toks)
	}

	// A request scheduled again is moved, not counted twice.
	d.PreRequest(ctx, r2, result(eps[1]))
	check("moved away", 0, 0)
	if reqs, toks := d.InFlight(eps[1].Key()); reqs != 1 || toks != 5 {
		t.Errorf("moved request: InFlight = %d, %d", reqs, toks)
	}
	d.ResponseComplete(ctx, r2, &scheduling.Response{EndOfStream: true}, eps[1])

	// Unscheduled or unknown requests and empty results are ignored.
	d.ResponseComplete(ctx, &scheduling.Request{}, nil, nil)
	d.ResponseComplete(ctx, nil, nil, nil)
	d.PreRequest(ctx, &scheduling.Request{}, nil)
	d.PreRequest(ctx, &scheduling.Request{}, &scheduling.Result{})
	d.PreRequest(ctx, nil, result(eps[0]))
	check("all done", 0, 0)

	// Idle endpoints leave no entry behind.
	n := 0
	d.loads.Range(func(_, _ any) bool { n++; return true })
	if n != 0 {
		t.Errorf("%d entries left after every request completed", n)
	}
}

func TestInstancesCountSeparately(t *testing.T) {
	t.Parallel()
	a, b := mustBuild(t, `{}`), mustBuild(t, `{}`)
	b.chargeKey = scheduling.NewStateKey[*charge](Type + "/other/charge")
	e := schedulingtest.Endpoint("e").Build()
	r := &scheduling.Request{}
	a.PreRequest(t.Context(), r, result(e))
	b.PreRequest(t.Context(), r, result(e))
	a.ResponseComplete(t.Context(), r, nil, e)
	if got, _ := a.InFlight(e.Key()); got != 0 {
		t.Errorf("a: %d in flight", got)
	}
	if got, _ := b.InFlight(e.Key()); got != 1 {
		t.Errorf("b: %d in flight, want 1", got)
	}
}

// TestTokenEstimate checks that tokens are counted with
// scheduling.EstimateTokens, the inflight-load-producer's GIE estimate.
func TestTokenEstimate(t *testing.T) {
	t.Parallel()
	reqs := []*scheduling.Request{
		{},                  // empty prompt: 1 + 2
		{PromptTokens: 3},   // 3 + 5
		{PromptTokens: 100}, // 100 + 150
		{Prompt: scheduling.Prompt{Text: []byte("Tell me a story about a brave knight.")}}, // 9 + 14
		{PromptTokens: 2, Prompt: scheduling.Prompt{Text: []byte("1234567890123456")}},     // 2 + 3
	}
	for i, want := range []int64{3, 8, 250, 23, 5} {
		d := mustBuild(t, `{"concurrencyMode": "tokens"}`)
		e := schedulingtest.Endpoint("e").Address("127.0.0.1").Build()
		d.PreRequest(t.Context(), reqs[i], result(e))
		if _, toks := d.InFlight(e.Key()); toks != want || toks != scheduling.EstimateTokens(reqs[i]) {
			t.Errorf("request %d: %d tokens, want %d", i, toks, want)
		}
	}
}

// TestHookOrders checks the release path in both orders of PreRequest and
// ResponseComplete, called directly.
func TestHookOrders(t *testing.T) {
	t.Parallel()
	e := schedulingtest.Endpoint("e").Address("127.0.0.1").Build()
	t.Run("PreRequest then completion without a response", func(t *testing.T) {
		d := mustBuild(t, `{"concurrencyMode": "tokens"}`)
		busy := send(t, d, e, 1, 100)
		req := &scheduling.Request{PromptTokens: 40}
		d.PreRequest(t.Context(), req, result(e))
		d.ResponseComplete(t.Context(), req, &scheduling.Response{Disconnected: true}, nil)
		if reqs, toks := d.InFlight(e.Key()); reqs != 1 || toks != 250 {
			t.Errorf("InFlight = %d, %d; want 1, 250", reqs, toks)
		}
		complete(t, d, busy...)
		if reqs, toks := d.InFlight(e.Key()); reqs != 0 || toks != 0 {
			t.Errorf("InFlight = %d, %d after all completed", reqs, toks)
		}
	})
	t.Run("completion then PreRequest", func(t *testing.T) {
		d := mustBuild(t, `{"concurrencyMode": "tokens"}`)
		busy := send(t, d, e, 1, 100)
		req := &scheduling.Request{PromptTokens: 40}
		d.ResponseComplete(t.Context(), req, &scheduling.Response{Disconnected: true}, e)
		if reqs, toks := d.InFlight(e.Key()); reqs != 1 || toks != 250 {
			t.Errorf("after the early completion: InFlight = %d, %d; want 1, 250", reqs, toks)
		}
		d.PreRequest(t.Context(), req, result(e))
		if reqs, toks := d.InFlight(e.Key()); reqs != 1 || toks != 250 {
			t.Errorf("after the late PreRequest: InFlight = %d, %d; want 1, 250", reqs, toks)
		}
		complete(t, d, req)
		complete(t, d, busy...)
		if reqs, toks := d.InFlight(e.Key()); reqs != 0 || toks != 0 {
			t.Errorf("InFlight = %d, %d after all completed", reqs, toks)
		}
		n := 0
		d.loads.Range(func(_, _ any) bool { n++; return true })
		if n != 0 {
			t.Errorf("%d entries left", n)
		}
	})
}

func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	d := mustBuild(t, `{"concurrencyMode": "tokens"}`)
	eps := schedulingtest.Endpoints(3, nil)
	ctx := t.Context()
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := range 500 {
				r := &scheduling.Request{PromptTokens: i % 7}
				res := result(eps[(g+i)%len(eps)])
				if i%2 == 0 {
					res = result(eps[(g+i)%len(eps)], eps[(g+i+1)%len(eps)])
				}
				d.PreRequest(ctx, r, res)
				d.Saturation(ctx, eps)
				d.Filter(ctx, r, eps)
				// Completion may be reported from several paths at once.
				var cw sync.WaitGroup
				for range 2 {
					cw.Go(func() { d.ResponseComplete(ctx, r, nil, nil) })
				}
				cw.Wait()
			}
		})
	}
	wg.Wait()
	for _, e := range eps {
		if reqs, toks := d.InFlight(e.Key()); reqs != 0 || toks != 0 {
			t.Errorf("%s: InFlight = %d, %d after all completed", e.Name(), reqs, toks)
		}
	}
}

func TestFilterDoesNotAllocateWhenAllPass(t *testing.T) {
	d := mustBuild(t, `{}`)
	eps := schedulingtest.Endpoints(100, nil)
	for _, e := range eps {
		send(t, d, e, 1, 0)
	}
	if allocs := testing.AllocsPerRun(100, func() { d.Filter(t.Context(), nil, eps) }); allocs != 0 {
		t.Errorf("Filter allocated %v times per run", allocs)
	}
}
