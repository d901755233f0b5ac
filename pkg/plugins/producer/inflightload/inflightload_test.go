package inflightload

import (
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

func TestFactory(t *testing.T) {
	tests := []struct {
		name     string
		raw      string
		wantErrs []string
		check    func(t *testing.T, p *Producer)
	}{
		{
			name: "defaults",
			raw:  "",
			check: func(t *testing.T, p *Producer) {
				if p.addOutput || p.outputRatio != 1.5 || p.maxOutput != -1 {
					t.Errorf("got add=%v ratio=%v max=%v, want false 1.5 -1", p.addOutput, p.outputRatio, p.maxOutput)
				}
			},
		},
		{
			name: "all parameters",
			raw:  `{"addEstimatedOutputTokens": true, "outputRatio": 2, "maxEstimatedOutputTokens": 512}`,
			check: func(t *testing.T, p *Producer) {
				if !p.addOutput || p.outputRatio != 2 || p.maxOutput != 512 {
					t.Errorf("got add=%v ratio=%v max=%v, want true 2 512", p.addOutput, p.outputRatio, p.maxOutput)
				}
			},
		},
		{
			name: "explicit zero cap",
			raw:  `{"maxEstimatedOutputTokens": 0, "outputRatio": 0}`,
			check: func(t *testing.T, p *Producer) {
				if p.maxOutput != 0 || p.outputRatio != 0 {
					t.Errorf("got ratio=%v max=%v, want 0 0", p.outputRatio, p.maxOutput)
				}
			},
		},
		{
			name:     "every invalid field is reported",
			raw:      `{"outputRatio": -1, "maxEstimatedOutputTokens": -5}`,
			wantErrs: []string{"outputRatio: must be", "maxEstimatedOutputTokens: must be >= 0, got -5"},
		},
		{name: "unknown key", raw: `{"requestTimeout": "2m"}`, wantErrs: []string{"requestTimeout"}},
		{name: "wrong type", raw: `{"addEstimatedOutputTokens": "yes"}`, wantErrs: []string{"addEstimatedOutputTokens: expected a boolean"}},
		{name: "wrong number type", raw: `{"maxEstimatedOutputTokens": 1.5}`, wantErrs: []string{"maxEstimatedOutputTokens"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pl, err := Registration.Factory("load", json.RawMessage(tt.raw), schedulingtest.NewHandle(t))
			if len(tt.wantErrs) > 0 {
				if err == nil {
					t.Fatalf("no error, want %q", tt.wantErrs)
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
			p := pl.(*Producer)
			if got := p.TypedName(); got != (scheduling.TypedName{Type: Type, Name: "load"}) {
				t.Errorf("TypedName() = %v", got)
			}
			tt.check(t, p)
		})
	}
}

func TestProducesConsumes(t *testing.T) {
	p := newProducer(t, DefaultParams())
	if got := p.Produces(); len(got) != 1 || got[0] != scheduling.InFlightLoadKey.Name() {
		t.Errorf("Produces() = %v", got)
	}
	if got := p.Consumes(); len(got) != 0 {
		t.Errorf("Consumes() = %v, want none", got)
	}
	req := &scheduling.Request{}
	p.Produce(t.Context(), req, nil)
	v, ok := scheduling.InFlightLoadKey.Get(req)
	if !ok || v != scheduling.InFlightLoad(p) {
		t.Fatalf("InFlightLoadKey = %v, %v; want the producer", v, ok)
	}
	if r, tok := v.InFlight("nobody"); r != 0 || tok != 0 {
		t.Errorf("unknown endpoint = %d, %d; want 0, 0", r, tok)
	}
}

func newProducer(t testing.TB, p Params) *Producer {
	t.Helper()
	pr, err := New(Type, p, schedulingtest.NewHandle(t))
	if err != nil {
		t.Fatal(err)
	}
	return pr
}

func resultFor(targets ...*scheduling.Endpoint) *scheduling.Result {
	return &scheduling.Result{PrimaryProfile: "default", ProfileResults: map[string]*scheduling.ProfileResult{"default": {Targets: targets}}}
}

func ptr[T any](v T) *T { return &v }

func TestLifecycle(t *testing.T) {
	eps := schedulingtest.Endpoints(2, nil)
	a, b := eps[0], eps[1]
	type want struct{ reqs, toks int64 }
	tests := []struct {
		name        string
		params      Params
		prompt      int
		maxTokens   int
		prefix      *scheduling.PrefixMatch
		afterPre    want
		afterChunk  want
		afterFinish want
	}{
		{
			name:        "prompt tokens released at the first chunk",
			params:      DefaultParams(),
			prompt:      1000,
			afterPre:    want{1, 1000},
			afterChunk:  want{1, 0},
			afterFinish: want{0, 0},
		},
		{
			name:        "prefix hit discounts the target's tokens",
			params:      DefaultParams(),
			prompt:      1000,
			prefix:      &scheduling.PrefixMatch{TotalBlocks: 4, BlockSizeTokens: 16, Hits: scheduling.PrefixHitMap{a.Key(): 3, b.Key(): 4}},
			afterPre:    want{1, 250},
			afterChunk:  want{1, 0},
			afterFinish: want{0, 0},
		},
		{
			name:        "prefix hit on another endpoint does not discount",
			params:      DefaultParams(),
			prompt:      1000,
			prefix:      &scheduling.PrefixMatch{TotalBlocks: 4, BlockSizeTokens: 16, Hits: scheduling.PrefixHitMap{b.Key(): 4}},
			afterPre:    want{1, 1000},
			afterChunk:  want{1, 0},
			afterFinish: want{0, 0},
		},
		{
			name:        "estimated output held until completion",
			params:      Params{AddEstimatedOutputTokens: true, OutputRatio: 1.5},
			prompt:      101,
			prefix:      &scheduling.PrefixMatch{TotalBlocks: 2, BlockSizeTokens: 16, Hits: scheduling.PrefixHitMap{a.Key(): 1}},
			afterPre:    want{1, 51 + 152}, // round(101×0.5) + round(101×1.5)
			afterChunk:  want{1, 152},
			afterFinish: want{0, 0},
		},
		{
			name:        "output capped by max_tokens",
			params:      Params{AddEstimatedOutputTokens: true, OutputRatio: 1.5},
			prompt:      100,
			maxTokens:   20,
			afterPre:    want{1, 120},
			afterChunk:  want{1, 20},
			afterFinish: want{0, 0},
		},
		{
			name:        "output capped by maxEstimatedOutputTokens",
			params:      Params{AddEstimatedOutputTokens: true, OutputRatio: 1.5, MaxEstimatedOutputTokens: ptr[int64](64)},
			prompt:      100,
			maxTokens:   1000,
			afterPre:    want{1, 164},
			afterChunk:  want{1, 64},
			afterFinish: want{0, 0},
		},
		{
			name:        "ratio ignored without addEstimatedOutputTokens",
			params:      Params{OutputRatio: 3},
			prompt:      10,
			afterPre:    want{1, 10},
			afterChunk:  want{1, 0},
			afterFinish: want{0, 0},
		},
		{
			name:        "no prompt tokens still counts the request",
			params:      Params{AddEstimatedOutputTokens: true, OutputRatio: 1.5},
			afterPre:    want{1, 0},
			afterChunk:  want{1, 0},
			afterFinish: want{0, 0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newProducer(t, tt.params)
			req := &scheduling.Request{PromptTokens: tt.prompt, MaxOutputTokens: tt.maxTokens}
			if tt.prefix != nil {
				scheduling.PrefixMatchKey.Set(req, tt.prefix)
			}
			check := func(stage string, w want) {
				t.Helper()
				r, tok := p.InFlight(a.Key())
				if r != w.reqs || tok != w.toks {
					t.Errorf("%s: InFlight(a) = %d, %d; want %d, %d", stage, r, tok, w.reqs, w.toks)
				}
				if r, tok := p.InFlight(b.Key()); r != 0 || tok != 0 {
					t.Errorf("%s: InFlight(b) = %d, %d; want 0, 0", stage, r, tok)
				}
			}
			p.PreRequest(t.Context(), req, resultFor(a, b))
			check("after PreRequest", tt.afterPre)
			p.PreRequest(t.Context(), req, resultFor(a, b)) // counted once
			check("after a second PreRequest", tt.afterPre)
			p.ResponseStreaming(t.Context(), req, &scheduling.Response{}, []byte("data: {}"), a)
			check("after the first chunk", tt.afterChunk)
			p.ResponseStreaming(t.Context(), req, &scheduling.Response{}, []byte("data: {}"), a)
			check("after the second chunk", tt.afterChunk)
			p.ResponseComplete(t.Context(), req, &scheduling.Response{EndOfStream: true}, a)
			check("after completion", tt.afterFinish)
			p.ResponseComplete(t.Context(), req, &scheduling.Response{EndOfStream: true}, a) // never negative
			check("after a second completion", tt.afterFinish)
		})
	}
}

func TestCompleteWithoutBody(t *testing.T) {
	p := newProducer(t, DefaultParams())
	ep := schedulingtest.Endpoint("a").Build()
	req := &scheduling.Request{PromptTokens: 40}
	p.PreRequest(t.Context(), req, resultFor(ep))
	p.ResponseComplete(t.Context(), req, &scheduling.Response{Disconnected: true}, nil)
	if r, tok := p.InFlight(ep.Key()); r != 0 || tok != 0 {
		t.Errorf("InFlight = %d, %d; want 0, 0", r, tok)
	}
}

func TestIgnoresUnscheduled(t *testing.T) {
	p := newProducer(t, DefaultParams())
	req := &scheduling.Request{PromptTokens: 5}
	p.PreRequest(t.Context(), req, nil)
	p.PreRequest(t.Context(), req, &scheduling.Result{PrimaryProfile: "x"})
	p.PreRequest(t.Context(), nil, resultFor(schedulingtest.Endpoint("a").Build()))
	p.ResponseStreaming(t.Context(), req, &scheduling.Response{}, nil, nil)
	p.ResponseComplete(t.Context(), req, &scheduling.Response{}, nil)
	p.ResponseStreaming(t.Context(), nil, &scheduling.Response{}, nil, nil)
	p.ResponseComplete(t.Context(), nil, &scheduling.Response{}, nil)
	n := 0
	p.counters.Range(func(_, _ any) bool { n++; return true })
	if n != 0 {
		t.Errorf("%d counters created, want 0", n)
	}
}

func TestOnlyPrimaryTargetCounted(t *testing.T) {
	p := newProducer(t, DefaultParams())
	eps := schedulingtest.Endpoints(3, nil)
	req := &scheduling.Request{PromptTokens: 8}
	res := &scheduling.Result{PrimaryProfile: "decode", ProfileResults: map[string]*scheduling.ProfileResult{
		"decode":  {Targets: []*scheduling.Endpoint{eps[0], eps[1]}},
		"prefill": {Targets: []*scheduling.Endpoint{eps[2]}},
	}}
	p.PreRequest(t.Context(), req, res)
	for i, want := range []int64{1, 0, 0} {
		if r, _ := p.InFlight(eps[i].Key()); r != want {
			t.Errorf("InFlight(%s) requests = %d, want %d", eps[i].Name(), r, want)
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

func TestPrune(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	p := newProducer(t, DefaultParams())
	p.now = clock.now
	p.nextPrune.Store(clock.now().Add(pruneInterval).UnixNano())

	eps := schedulingtest.Endpoints(3, nil)
	gone, busy, present := eps[0], eps[1], eps[2]
	finished := &scheduling.Request{PromptTokens: 10}
	p.PreRequest(t.Context(), finished, resultFor(gone))
	p.ResponseComplete(t.Context(), finished, &scheduling.Response{}, gone)
	p.PreRequest(t.Context(), &scheduling.Request{PromptTokens: 10}, resultFor(busy)) // never completes
	done := &scheduling.Request{}
	p.PreRequest(t.Context(), done, resultFor(present))
	p.ResponseComplete(t.Context(), done, &scheduling.Response{}, present)

	has := func(e *scheduling.Endpoint) bool { _, ok := p.counters.Load(e.Key()); return ok }
	candidates := []*scheduling.Endpoint{busy, present}

	// Within the interval nothing is pruned.
	p.Produce(t.Context(), &scheduling.Request{}, candidates)
	if !has(gone) {
		t.Fatal("pruned before the interval passed")
	}
	// First prune: the counters were used in the current generation.
	clock.advance(pruneInterval)
	p.Produce(t.Context(), &scheduling.Request{}, candidates)
	if !has(gone) {
		t.Fatal("pruned an endpoint targeted during the last interval")
	}
	// Second prune: idle for a whole interval and absent → dropped.
	clock.advance(pruneInterval)
	p.Produce(t.Context(), &scheduling.Request{}, candidates)
	if has(gone) {
		t.Error("idle absent endpoint not pruned")
	}
	if !has(busy) {
		t.Error("endpoint with a request in flight pruned")
	}
	if !has(present) {
		t.Error("endpoint among the candidates pruned")
	}
	if r, _ := p.InFlight(busy.Key()); r != 1 {
		t.Errorf("busy endpoint requests = %d, want 1", r)
	}
	// A pruned endpoint comes back from zero.
	again := &scheduling.Request{PromptTokens: 3}
	p.PreRequest(t.Context(), again, resultFor(gone))
	if r, tok := p.InFlight(gone.Key()); r != 1 || tok != 3 {
		t.Errorf("re-added endpoint = %d, %d; want 1, 3", r, tok)
	}
}

func TestForget(t *testing.T) {
	p := newProducer(t, DefaultParams())
	ep := schedulingtest.Endpoint("a").Build()
	old := &scheduling.Request{PromptTokens: 10}
	p.PreRequest(t.Context(), old, resultFor(ep))
	p.Forget(ep.Key())
	if r, tok := p.InFlight(ep.Key()); r != 0 || tok != 0 {
		t.Fatalf("forgotten endpoint = %d, %d; want 0, 0", r, tok)
	}
	fresh := &scheduling.Request{PromptTokens: 7}
	p.PreRequest(t.Context(), fresh, resultFor(ep))
	// The old request releases into the forgotten counter, not the new one.
	p.ResponseComplete(t.Context(), old, &scheduling.Response{}, ep)
	if r, tok := p.InFlight(ep.Key()); r != 1 || tok != 7 {
		t.Errorf("after the old request completed = %d, %d; want 1, 7", r, tok)
	}
}

// TestConcurrent hammers one producer from many goroutines, with pruning on
// every Produce, and checks the counters come back to exactly zero and are
// never seen negative. Run with -race.
func TestConcurrent(t *testing.T) {
	p := newProducer(t, Params{AddEstimatedOutputTokens: true, OutputRatio: 1.5})
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	p.now = func() time.Time { clock.advance(pruneInterval); return clock.now() } // prune every call
	eps := schedulingtest.Endpoints(8, nil)
	const workers, perWorker = 8, 300
	var wg sync.WaitGroup
	held := make(chan *scheduling.Request, workers*perWorker)
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				req := &scheduling.Request{PromptTokens: 1 + (w*perWorker+i)%97, MaxOutputTokens: i % 50}
				p.Produce(t.Context(), req, eps[:w%len(eps)])
				target := eps[(w+i)%len(eps)]
				p.PreRequest(t.Context(), req, resultFor(target))
				for _, e := range eps {
					if r, tok := p.InFlight(e.Key()); r < 0 || tok < 0 {
						t.Errorf("negative load %d, %d", r, tok)
					}
				}
				if i%3 == 0 {
					held <- req // completed later
					continue
				}
				p.ResponseStreaming(t.Context(), req, &scheduling.Response{}, []byte("x"), target)
				p.ResponseComplete(t.Context(), req, &scheduling.Response{}, target)
			}
		})
	}
	wg.Wait()
	close(held)
	var total int64
	for _, e := range eps {
		r, _ := p.InFlight(e.Key())
		total += r
	}
	if want := int64(workers * ((perWorker + 2) / 3)); total != want {
		t.Errorf("held requests = %d, want %d", total, want)
	}
	for req := range held {
		p.ResponseComplete(t.Context(), req, &scheduling.Response{Disconnected: true}, nil)
	}
	for _, e := range eps {
		if r, tok := p.InFlight(e.Key()); r != 0 || tok != 0 {
			t.Errorf("InFlight(%s) = %d, %d after all completed; want 0, 0", e.Name(), r, tok)
		}
	}
}

func TestReadme(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	if !strings.HasPrefix(doc, "# "+Type+"\n") {
		t.Errorf("README does not start with %q", "# "+Type)
	}
	last := -1
	for _, h := range []string{"## Type", "## Description", "## Parameters", "## Metrics", "## Example"} {
		i := strings.Index(doc, "\n"+h+"\n")
		if i <= last {
			t.Errorf("section %q missing or out of order", h)
		}
		last = i
	}
	if n := strings.Count(doc, "```yaml"); n != 1 {
		t.Errorf("README has %d yaml blocks, want 1", n)
	}
	if !strings.Contains(doc, "type: "+Type) {
		t.Errorf("README example does not use %s", Type)
	}
}
