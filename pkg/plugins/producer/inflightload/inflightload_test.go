package inflightload

import (
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
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
			name: "defaults: GIE's accounting",
			raw:  "",
			check: func(t *testing.T, p *Producer) {
				if p.llmd || p.addOutput || p.outputRatio != 1.5 || p.maxOutput != -1 {
					t.Errorf("got llmd=%v add=%v ratio=%v max=%v, want false false 1.5 -1", p.llmd, p.addOutput, p.outputRatio, p.maxOutput)
				}
			},
		},
		{
			name: "explicit gie",
			raw:  `{"tokenAccounting": "gie"}`,
			check: func(t *testing.T, p *Producer) {
				if p.llmd {
					t.Error("llm-d accounting selected")
				}
			},
		},
		{
			name: "llm-d defaults",
			raw:  `{"tokenAccounting": "llm-d"}`,
			check: func(t *testing.T, p *Producer) {
				if !p.llmd || p.addOutput || p.outputRatio != 1.5 || p.maxOutput != -1 {
					t.Errorf("got llmd=%v add=%v ratio=%v max=%v, want true false 1.5 -1", p.llmd, p.addOutput, p.outputRatio, p.maxOutput)
				}
			},
		},
		{
			name: "all llm-d parameters",
			raw:  `{"tokenAccounting": "llm-d", "addEstimatedOutputTokens": true, "outputRatio": 2, "maxEstimatedOutputTokens": 512}`,
			check: func(t *testing.T, p *Producer) {
				if !p.llmd || !p.addOutput || p.outputRatio != 2 || p.maxOutput != 512 {
					t.Errorf("got llmd=%v add=%v ratio=%v max=%v, want true true 2 512", p.llmd, p.addOutput, p.outputRatio, p.maxOutput)
				}
			},
		},
		{
			name: "explicit zero cap and ratio",
			raw:  `{"tokenAccounting": "llm-d", "maxEstimatedOutputTokens": 0, "outputRatio": 0}`,
			check: func(t *testing.T, p *Producer) {
				if p.maxOutput != 0 || p.outputRatio != 0 {
					t.Errorf("got ratio=%v max=%v, want 0 0", p.outputRatio, p.maxOutput)
				}
			},
		},
		{
			name:     "every invalid field is reported",
			raw:      `{"tokenAccounting": "llm-d", "outputRatio": -1, "maxEstimatedOutputTokens": -5}`,
			wantErrs: []string{"outputRatio: must be a finite number >= 0, got -1", "maxEstimatedOutputTokens: must be >= 0, got -5"},
		},
		{
			name: "llm-d parameters with gie accounting",
			raw:  `{"tokenAccounting": "gie", "addEstimatedOutputTokens": false, "outputRatio": 1.5, "maxEstimatedOutputTokens": 10}`,
			wantErrs: []string{
				`addEstimatedOutputTokens: applies only with tokenAccounting "llm-d" (tokenAccounting is "gie")`,
				`outputRatio: applies only with tokenAccounting "llm-d"`,
				`maxEstimatedOutputTokens: applies only with tokenAccounting "llm-d"`,
			},
		},
		{
			name: "llm-d parameters without an accounting choose llm-d's, so llm-d files load unchanged",
			raw:  `{"addEstimatedOutputTokens": true, "outputRatio": 2}`,
			check: func(t *testing.T, p *Producer) {
				if !p.llmd || !p.addOutput || p.outputRatio != 2 || p.params.TokenAccounting != AccountingLLMD {
					t.Errorf("got llmd=%v addOutput=%v ratio=%v accounting=%q, want llm-d accounting", p.llmd, p.addOutput, p.outputRatio, p.params.TokenAccounting)
				}
			},
		},
		{
			name: "no parameters: GIE's accounting for a GIE configuration",
			raw:  `{}`,
			check: func(t *testing.T, p *Producer) {
				if p.llmd || p.params.TokenAccounting != AccountingGIE {
					t.Errorf("got llmd=%v accounting=%q, want gie", p.llmd, p.params.TokenAccounting)
				}
			},
		},
		{
			name:     "unknown accounting",
			raw:      `{"tokenAccounting": "vllm", "outputRatio": -2}`,
			wantErrs: []string{`tokenAccounting: must be "gie" or "llm-d", got "vllm"`, "outputRatio: must be a finite number >= 0, got -2"},
		},
		{name: "unknown key", raw: `{"requestTimeout": "2m"}`, wantErrs: []string{"requestTimeout"}},
		{name: "wrong type", raw: `{"tokenAccounting": "llm-d", "addEstimatedOutputTokens": "yes"}`, wantErrs: []string{"addEstimatedOutputTokens: expected a boolean"}},
		{name: "wrong accounting type", raw: `{"tokenAccounting": 1}`, wantErrs: []string{"tokenAccounting: expected a string"}},
		{name: "wrong number type", raw: `{"tokenAccounting": "llm-d", "maxEstimatedOutputTokens": 1.5}`, wantErrs: []string{"maxEstimatedOutputTokens"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pl, err := Registration.Factory("load", json.RawMessage(tt.raw), schedulingtest.NewHandle(t))
			if len(tt.wantErrs) > 0 {
				if err == nil {
					t.Fatalf("no error, want %q", tt.wantErrs)
				}
				if leaves := scheduling.Errors(err); len(leaves) != len(tt.wantErrs) {
					t.Errorf("got %d errors (%v), want %d", len(leaves), err, len(tt.wantErrs))
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

// llmd returns llm-d accounting parameters.
func llmd(addOutput bool, ratio float64, maxOutput *int64) Params {
	return Params{TokenAccounting: AccountingLLMD, AddEstimatedOutputTokens: &addOutput, OutputRatio: &ratio, MaxEstimatedOutputTokens: maxOutput}
}

func resultFor(targets ...*scheduling.Endpoint) *scheduling.Result {
	return &scheduling.Result{PrimaryProfile: "default", ProfileResults: map[string]*scheduling.ProfileResult{"default": {Targets: targets}}}
}

func ptr[T any](v T) *T { return &v }

type load struct{ reqs, toks int64 }

func inFlight(p *Producer, e *scheduling.Endpoint) load {
	r, tok := p.InFlight(e.Key())
	return load{r, tok}
}

func TestLifecycle(t *testing.T) {
	eps := schedulingtest.Endpoints(2, nil)
	a, b := eps[0], eps[1]
	tests := []struct {
		name        string
		params      Params
		prompt      int
		text        string
		maxTokens   int
		prefix      *scheduling.PrefixMatch
		afterPre    load
		afterChunk  load
		afterFinish load
	}{
		{
			name:        "gie: input and 1.5× output held until completion",
			params:      DefaultParams(),
			prompt:      1000,
			afterPre:    load{1, 2500},
			afterChunk:  load{1, 2500},
			afterFinish: load{0, 0},
		},
		{
			name:        "gie: prefix hits do not discount",
			params:      DefaultParams(),
			prompt:      1000,
			prefix:      &scheduling.PrefixMatch{TotalBlocks: 4, BlockSizeTokens: 16, Hits: scheduling.PrefixHitMap{a.Key(): 4}},
			afterPre:    load{1, 2500},
			afterChunk:  load{1, 2500},
			afterFinish: load{0, 0},
		},
		{
			name:        "gie: max_tokens does not cap",
			params:      DefaultParams(),
			prompt:      100,
			maxTokens:   10,
			afterPre:    load{1, 250},
			afterChunk:  load{1, 250},
			afterFinish: load{0, 0},
		},
		{
			name:        "gie: prompt text when the token estimate is unknown",
			params:      DefaultParams(),
			text:        "Hello, world!", // round(13/4) = 3; 3 + round(4.5) = 8
			afterPre:    load{1, 8},
			afterChunk:  load{1, 8},
			afterFinish: load{0, 0},
		},
		{
			name:        "gie: empty prompt counts one input token",
			params:      DefaultParams(),
			afterPre:    load{1, 3},
			afterChunk:  load{1, 3},
			afterFinish: load{0, 0},
		},
		{
			name:        "llm-d: prompt tokens released at the first chunk",
			params:      Params{TokenAccounting: AccountingLLMD},
			prompt:      1000,
			afterPre:    load{1, 1000},
			afterChunk:  load{1, 0},
			afterFinish: load{0, 0},
		},
		{
			name:        "llm-d: prefix hit discounts the target's tokens",
			params:      Params{TokenAccounting: AccountingLLMD},
			prompt:      1000,
			prefix:      &scheduling.PrefixMatch{TotalBlocks: 4, BlockSizeTokens: 16, Hits: scheduling.PrefixHitMap{a.Key(): 3, b.Key(): 4}},
			afterPre:    load{1, 250},
			afterChunk:  load{1, 0},
			afterFinish: load{0, 0},
		},
		{
			name:        "llm-d: prefix hit on another endpoint does not discount",
			params:      Params{TokenAccounting: AccountingLLMD},
			prompt:      1000,
			prefix:      &scheduling.PrefixMatch{TotalBlocks: 4, BlockSizeTokens: 16, Hits: scheduling.PrefixHitMap{b.Key(): 4}},
			afterPre:    load{1, 1000},
			afterChunk:  load{1, 0},
			afterFinish: load{0, 0},
		},
		{
			name:        "llm-d: estimated output held until completion",
			params:      llmd(true, 1.5, nil),
			prompt:      101,
			prefix:      &scheduling.PrefixMatch{TotalBlocks: 2, BlockSizeTokens: 16, Hits: scheduling.PrefixHitMap{a.Key(): 1}},
			afterPre:    load{1, 51 + 152}, // round(101×0.5) + round(101×1.5)
			afterChunk:  load{1, 152},
			afterFinish: load{0, 0},
		},
		{
			name:        "llm-d: output capped by max_tokens",
			params:      llmd(true, 1.5, nil),
			prompt:      100,
			maxTokens:   20,
			afterPre:    load{1, 120},
			afterChunk:  load{1, 20},
			afterFinish: load{0, 0},
		},
		{
			name:        "llm-d: output capped by maxEstimatedOutputTokens",
			params:      llmd(true, 1.5, ptr[int64](64)),
			prompt:      100,
			maxTokens:   1000,
			afterPre:    load{1, 164},
			afterChunk:  load{1, 64},
			afterFinish: load{0, 0},
		},
		{
			name:        "llm-d: ratio ignored without addEstimatedOutputTokens",
			params:      llmd(false, 3, nil),
			prompt:      10,
			afterPre:    load{1, 10},
			afterChunk:  load{1, 0},
			afterFinish: load{0, 0},
		},
		{
			name:        "llm-d: empty prompt counts one input token",
			params:      llmd(true, 1.5, nil),
			afterPre:    load{1, 1 + 2},
			afterChunk:  load{1, 2},
			afterFinish: load{0, 0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newProducer(t, tt.params)
			req := &scheduling.Request{PromptTokens: tt.prompt, MaxOutputTokens: tt.maxTokens, Prompt: scheduling.Prompt{Text: []byte(tt.text)}}
			if tt.prefix != nil {
				scheduling.PrefixMatchKey.Set(req, tt.prefix)
			}
			check := func(stage string, w load) {
				t.Helper()
				if got := inFlight(p, a); got != w {
					t.Errorf("%s: InFlight(a) = %v; want %v", stage, got, w)
				}
				if got := inFlight(p, b); got != (load{}) {
					t.Errorf("%s: InFlight(b) = %v; want none", stage, got)
				}
			}
			p.PreRequest(t.Context(), req, resultFor(a))
			check("after PreRequest", tt.afterPre)
			p.PreRequest(t.Context(), req, resultFor(a)) // moved onto itself: counted once
			check("after a second PreRequest", tt.afterPre)
			p.ResponseStreaming(t.Context(), req, &scheduling.Response{}, []byte("data: {}"), a)
			check("after the first chunk", tt.afterChunk)
			p.ResponseStreaming(t.Context(), req, &scheduling.Response{}, []byte("data: {}"), a)
			check("after the second chunk", tt.afterChunk)
			p.ResponseComplete(t.Context(), req, &scheduling.Response{EndOfStream: true}, a)
			check("after completion", tt.afterFinish)
			p.ResponseComplete(t.Context(), req, &scheduling.Response{EndOfStream: true}, a) // never negative
			check("after a second completion", tt.afterFinish)
			p.PreRequest(t.Context(), req, resultFor(a)) // after completion: not counted
			check("after a PreRequest following completion", tt.afterFinish)
		})
	}
}

var accountings = []struct {
	name   string
	params Params
}{
	{"gie", DefaultParams()},
	{"llm-d", llmd(true, 1.5, nil)},
}

// TestPrimaryTargetCharged checks that a request is charged once, to the
// primary target (as the host counts it), that the charge follows a
// fallback that serves (GIE charges every target and releases only the one
// that served), and that completion releases it wherever it is.
func TestPrimaryTargetCharged(t *testing.T) {
	for _, acc := range accountings {
		t.Run(acc.name, func(t *testing.T) {
			p := newProducer(t, acc.params)
			eps := schedulingtest.Endpoints(3, nil)
			req := &scheduling.Request{PromptTokens: 8} // gie: 8 + 12; llm-d: 8 + 12 output
			res := &scheduling.Result{PrimaryProfile: "decode", ProfileResults: map[string]*scheduling.ProfileResult{
				"decode":  {Targets: []*scheduling.Endpoint{nil, eps[0], eps[1]}},
				"prefill": {Targets: []*scheduling.Endpoint{eps[2]}},
			}}
			p.PreRequest(t.Context(), req, res)
			for i, want := range []load{{1, 20}, {}, {}} {
				if got := inFlight(p, eps[i]); got != want {
					t.Errorf("after PreRequest: InFlight(%s) = %v, want %v", eps[i].Name(), got, want)
				}
			}
			// The gateway fell back: eps[1] serves; the charge moves there.
			resp := &scheduling.Response{StatusCode: 200, Served: eps[1].HostPort()}
			p.ResponseReceived(t.Context(), req, resp, eps[1])
			for i, want := range []load{{}, {1, 20}, {}} {
				if got := inFlight(p, eps[i]); got != want {
					t.Errorf("after the fallback: InFlight(%s) = %v, want %v", eps[i].Name(), got, want)
				}
			}
			p.ResponseStreaming(t.Context(), req, resp, []byte("x"), eps[1])
			p.ResponseComplete(t.Context(), req, &scheduling.Response{EndOfStream: true, Served: eps[1].HostPort()}, eps[1])
			for _, e := range eps {
				if got := inFlight(p, e); got != (load{}) {
					t.Errorf("after completion: InFlight(%s) = %v, want none", e.Name(), got)
				}
			}
		})
	}
}

// TestHostAccountingIsTheSource: for endpoints that carry the host's
// accounting (scheduling.LoadKey), the producer reports the host's counts
// and adds none of its own, except llm-d's tokens, which the host does
// not count; those follow a fallback like the host's count does.
func TestHostAccountingIsTheSource(t *testing.T) {
	loads := []*schedulingtest.FakeLoad{schedulingtest.NewFakeLoad(3, 0), schedulingtest.NewFakeLoad(0, 0)}
	loads[0].InFlightTokensN.Store(700)
	eps := schedulingtest.Endpoints(2, func(i int, b *schedulingtest.EndpointBuilder) { b.Load(loads[i]) })
	for _, acc := range accountings {
		t.Run(acc.name, func(t *testing.T) {
			p := newProducer(t, acc.params)
			req := &scheduling.Request{PromptTokens: 8}
			p.Produce(t.Context(), req, eps)
			view, ok := scheduling.InFlightLoadKey.Get(req)
			if !ok {
				t.Fatal("no view on the request")
			}
			p.PreRequest(t.Context(), req, resultFor(eps[0], eps[1]))
			// The host starts its count when it forwards the request.
			loads[0].InFlightN.Add(1)
			loads[0].InFlightTokensN.Add(20)
			r, tok := view.InFlight(eps[0].Key())
			if r != 4 {
				t.Errorf("requests = %d, want the host's 4", r)
			}
			wantTok := int64(720) // gie: the host's tokens
			if acc.name == "llm-d" {
				wantTok = 8 + 12 // llm-d's own: uncached prompt + output estimate
			}
			if tok != wantTok {
				t.Errorf("tokens = %d, want %d", tok, wantTok)
			}
			if n := ownCounters(p); acc.name == "gie" && n != 0 {
				t.Errorf("%d own counters with GIE's accounting on hosted endpoints, want 0", n)
			}
			// Fallback: the host moves its count, the producer its tokens.
			loads[0].InFlightN.Add(-1)
			loads[0].InFlightTokensN.Add(-20)
			loads[1].InFlightN.Add(1)
			loads[1].InFlightTokensN.Add(20)
			p.ResponseReceived(t.Context(), req, &scheduling.Response{Served: eps[1].HostPort()}, eps[1])
			r0, _ := view.InFlight(eps[0].Key())
			r1, tok1 := view.InFlight(eps[1].Key())
			if r0 != 3 || r1 != 1 || tok1 != 20 {
				t.Errorf("after the fallback: %d on %s, %d (%d tokens) on %s; want 3, 1 (20)", r0, eps[0].Name(), r1, tok1, eps[1].Name())
			}
			p.ResponseComplete(t.Context(), req, &scheduling.Response{}, eps[1])
			loads[1].InFlightN.Add(-1)
			loads[1].InFlightTokensN.Add(-20)
			if r, tok := view.InFlight(eps[1].Key()); r != 0 || tok != 0 {
				t.Errorf("after completion: %d, %d; want 0, 0", r, tok)
			}
		})
	}
}

// TestIndexFollowsTheEndpoints: a new endpoint set, or an endpoint whose
// accounting changed under the same key (a new identity), is read from
// the next request on, with or without Forget.
func TestIndexFollowsTheEndpoints(t *testing.T) {
	p := newProducer(t, DefaultParams())
	a1, a2 := schedulingtest.NewFakeLoad(1, 0), schedulingtest.NewFakeLoad(5, 0)
	set1 := []*scheduling.Endpoint{schedulingtest.Endpoint("a").Load(a1).Build(), schedulingtest.Endpoint("b").Address("127.10.0.2").Build()}
	p.Produce(t.Context(), &scheduling.Request{}, set1)
	if r, _ := p.InFlight("a"); r != 1 {
		t.Fatalf("InFlight(a) = %d, want 1", r)
	}
	// Same keys, a's accounting replaced (a new identity), a new slice.
	set2 := []*scheduling.Endpoint{schedulingtest.Endpoint("a").Load(a2).Build(), set1[1]}
	p.Produce(t.Context(), &scheduling.Request{}, set2)
	if r, _ := p.InFlight("a"); r != 5 {
		t.Errorf("after the identity change: InFlight(a) = %d, want 5", r)
	}
	// A subset of the set does not disturb the index.
	p.Produce(t.Context(), &scheduling.Request{}, set2[:1])
	if idx := p.index.Load(); idx.n != 2 {
		t.Errorf("a subset replaced the index of the full set (n = %d)", idx.n)
	}
	// Forget drops the index; the next request rebuilds it.
	p.Forget("a")
	if r, _ := p.InFlight("a"); r != 0 {
		t.Errorf("after Forget, before the next request: InFlight(a) = %d, want 0", r)
	}
	p.Produce(t.Context(), &scheduling.Request{}, set2)
	if r, _ := p.InFlight("a"); r != 5 {
		t.Errorf("after Forget and a request: InFlight(a) = %d, want 5", r)
	}
}

func ownCounters(p *Producer) int {
	n := 0
	p.counters.Range(func(_, _ any) bool { n++; return true })
	return n
}

// TestRescheduleMoves checks that a second PreRequest moves the charge to
// the new targets.
func TestRescheduleMoves(t *testing.T) {
	for _, acc := range accountings {
		t.Run(acc.name, func(t *testing.T) {
			p := newProducer(t, acc.params)
			eps := schedulingtest.Endpoints(3, nil)
			req := &scheduling.Request{PromptTokens: 4} // 4 + 6
			p.PreRequest(t.Context(), req, resultFor(eps[0], eps[1]))
			p.PreRequest(t.Context(), req, resultFor(eps[2]))
			for i, want := range []load{{}, {}, {1, 10}} {
				if got := inFlight(p, eps[i]); got != want {
					t.Errorf("InFlight(%s) = %v, want %v", eps[i].Name(), got, want)
				}
			}
			p.ResponseComplete(t.Context(), req, &scheduling.Response{}, eps[0])
			if got := inFlight(p, eps[2]); got != (load{}) {
				t.Errorf("after completion: InFlight = %v, want none", got)
			}
		})
	}
}

// TestHookOrders checks the release paths in both orders of PreRequest and
// ResponseComplete, called directly: a PreRequest whose response never
// produced a chunk is released by the completion, and a completion that
// comes first releases nothing and makes a late PreRequest charge nothing.
func TestHookOrders(t *testing.T) {
	for _, acc := range accountings {
		t.Run(acc.name, func(t *testing.T) {
			ep := schedulingtest.Endpoint("a").Address("127.0.0.1").Build()
			other := &scheduling.Request{PromptTokens: 100} // keeps the counter busy
			t.Run("PreRequest then completion without a response", func(t *testing.T) {
				p := newProducer(t, acc.params)
				p.PreRequest(t.Context(), other, resultFor(ep))
				before := inFlight(p, ep)
				req := &scheduling.Request{PromptTokens: 40}
				p.PreRequest(t.Context(), req, resultFor(ep))
				p.ResponseComplete(t.Context(), req, &scheduling.Response{Disconnected: true}, nil)
				if got := inFlight(p, ep); got != before {
					t.Errorf("InFlight = %v, want %v", got, before)
				}
			})
			t.Run("completion then PreRequest", func(t *testing.T) {
				p := newProducer(t, acc.params)
				p.PreRequest(t.Context(), other, resultFor(ep))
				before := inFlight(p, ep)
				req := &scheduling.Request{PromptTokens: 40}
				p.ResponseComplete(t.Context(), req, &scheduling.Response{Disconnected: true}, ep)
				if got := inFlight(p, ep); got != before {
					t.Errorf("after the early completion: InFlight = %v, want %v", got, before)
				}
				p.PreRequest(t.Context(), req, resultFor(ep))
				p.ResponseStreaming(t.Context(), req, &scheduling.Response{}, []byte("x"), ep)
				p.ResponseComplete(t.Context(), req, &scheduling.Response{EndOfStream: true}, ep)
				if got := inFlight(p, ep); got != before {
					t.Errorf("after the late PreRequest: InFlight = %v, want %v", got, before)
				}
			})
			t.Run("completion of a request never charged, on an idle endpoint", func(t *testing.T) {
				p := newProducer(t, acc.params)
				p.ResponseComplete(t.Context(), &scheduling.Request{PromptTokens: 40}, &scheduling.Response{}, ep)
				if got := inFlight(p, ep); got != (load{}) {
					t.Errorf("InFlight = %v, want none", got)
				}
			})
		})
	}
}

func TestIgnoresUnscheduled(t *testing.T) {
	p := newProducer(t, llmd(true, 1.5, nil))
	req := &scheduling.Request{PromptTokens: 5}
	p.PreRequest(t.Context(), req, nil)
	p.PreRequest(t.Context(), req, &scheduling.Result{PrimaryProfile: "x"})
	p.PreRequest(t.Context(), req, resultFor(nil))
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
	if r, tok := p.InFlight(gone.Key()); r != 1 || tok != 3+5 {
		t.Errorf("re-added endpoint = %d, %d; want 1, 8", r, tok)
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
	if r, tok := p.InFlight(ep.Key()); r != 1 || tok != 7+11 {
		t.Errorf("after the old request completed = %d, %d; want 1, 18", r, tok)
	}
}

// TestConcurrent hammers one producer from many goroutines, with pruning on
// every Produce, some two-target results and fallbacks, and checks the
// counters come back to exactly zero and are never seen negative. Run
// with -race.
func TestConcurrent(t *testing.T) {
	for _, acc := range accountings {
		t.Run(acc.name, func(t *testing.T) {
			p := newProducer(t, acc.params)
			clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
			p.now = func() time.Time { clock.advance(pruneInterval); return clock.now() } // prune every call
			eps := schedulingtest.Endpoints(8, nil)
			const workers, perWorker = 8, 300
			var wg sync.WaitGroup
			var heldTargets atomic.Int64
			held := make(chan *scheduling.Request, workers*perWorker)
			for w := range workers {
				wg.Go(func() {
					for i := range perWorker {
						req := &scheduling.Request{PromptTokens: (w*perWorker + i) % 97, MaxOutputTokens: i % 50}
						p.Produce(t.Context(), req, eps[:w%len(eps)])
						target := eps[(w+i)%len(eps)]
						res := resultFor(target)
						if i%2 == 0 {
							res = resultFor(target, eps[(w+i+1)%len(eps)])
						}
						p.PreRequest(t.Context(), req, res)
						for _, e := range eps {
							if r, tok := p.InFlight(e.Key()); r < 0 || tok < 0 {
								t.Errorf("negative load %d, %d", r, tok)
							}
						}
						if i%3 == 0 {
							heldTargets.Add(1) // the primary target
							held <- req        // completed later
							continue
						}
						served := target
						if i%5 == 0 && len(res.Targets()) > 1 {
							served = res.Targets()[1] // the gateway fell back
							p.ResponseReceived(t.Context(), req, &scheduling.Response{}, served)
						}
						p.ResponseStreaming(t.Context(), req, &scheduling.Response{}, []byte("x"), served)
						// Completion may be reported from several paths at once.
						var cw sync.WaitGroup
						for range 2 {
							cw.Go(func() { p.ResponseComplete(t.Context(), req, &scheduling.Response{}, target) })
						}
						cw.Wait()
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
			if want := heldTargets.Load(); total != want {
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
		})
	}
}

// TestAccountingFollowsTheConfiguration: an llm-d.ai configuration gets
// llm-d's accounting without saying so, as in llm-d.
func TestAccountingFollowsTheConfiguration(t *testing.T) {
	for _, tt := range []struct {
		apiVersion string
		wantLLMD   bool
	}{
		{apiVersion: scheduling.APIVersionLLMD, wantLLMD: true},
		{apiVersion: "inference.networking.x-k8s.io/v1alpha1", wantLLMD: false},
	} {
		h := scheduling.NewHandle(scheduling.HandleOptions{APIVersion: tt.apiVersion, Seed: 1})
		pl, err := Registration.Factory("load", nil, h)
		if err != nil {
			t.Fatal(err)
		}
		if got := pl.(*Producer).llmd; got != tt.wantLLMD {
			t.Errorf("apiVersion %s: llm-d accounting = %v, want %v", tt.apiVersion, got, tt.wantLLMD)
		}
		params, _ := h.Params("load")
		if got := params.(Params).TokenAccounting; (got == AccountingLLMD) != tt.wantLLMD || got == "" {
			t.Errorf("apiVersion %s: effective tokenAccounting = %q", tt.apiVersion, got)
		}
	}
}
