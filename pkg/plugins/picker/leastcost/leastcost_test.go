package leastcost

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/internal/pick"
	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/internal/picktest"
	"github.com/switchyard-ai/switchyard/pkg/requests"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

func TestFactory(t *testing.T) {
	cases := append(picktest.FactoryCases(),
		schedulingtest.FactoryCase{Name: "catalog", Params: `{"catalog": {"llama": {"input": 0.2, "output": 0.6}, "free": {"input": 0, "output": 0}}}`,
			Check: func(t *testing.T, p scheduling.Plugin) {
				if got := p.(*Picker).catalog["llama"]; got != (scheduling.Price{Input: 0.2, Output: 0.6}) {
					t.Errorf("catalog[llama] = %+v", got)
				}
			}},
		schedulingtest.FactoryCase{Name: "negative price", Params: `{"catalog": {"llama": {"input": -1, "output": 0.6}}}`,
			WantErr: `catalog["llama"].input: must be a finite price >= 0 (USD per 1M tokens), got -1`},
		schedulingtest.FactoryCase{Name: "every problem", Params: `{"catalog": {"a": {"input": -1, "output": -2}, "": {"input": 1}}, "maxNumOfEndpoints": 0}`,
			WantErrs: []string{`catalog[""]: the model name must not be empty`, `catalog["a"].input`, `catalog["a"].output`, "maxNumOfEndpoints"}},
		schedulingtest.FactoryCase{Name: "unknown price field", Params: `{"catalog": {"llama": {"inputTokens": 1}}}`, WantErr: `unknown field "catalog.llama.inputTokens"`},
		schedulingtest.FactoryCase{Name: "price not a number", Params: `{"catalog": {"llama": {"input": "cheap"}}}`, WantErr: "expected a number"},
	)
	schedulingtest.RunFactoryCases(t, Registration, cases)
}

func TestNew(t *testing.T) {
	if _, err := New("x", Params{}, schedulingtest.NewHandle(t)); err == nil {
		t.Error("New accepted maxNumOfEndpoints 0")
	}
	if _, err := New("x", DefaultParams(), nil); err == nil {
		t.Error("New accepted a nil handle")
	}
	big := DefaultParams()
	big.Catalog = map[string]scheduling.Price{}
	for i := range MaxCatalogModels + 1 {
		big.Catalog[fmt.Sprint(i)] = scheduling.Price{}
	}
	if err := big.Validate(); err == nil || !strings.Contains(err.Error(), "catalog: at most 10000 models") {
		t.Errorf("a huge catalog: err = %v", err)
	}
}

func newPicker(t testing.TB, reg prometheus.Registerer, max int, catalog map[string]scheduling.Price) *Picker {
	t.Helper()
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	p, err := New("lc", Params{Params: picktestParams(max), Catalog: catalog}, scheduling.NewHandle(scheduling.HandleOptions{Registerer: reg, Seed: 1}))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func price(in, out float64) *scheduling.Price { return &scheduling.Price{Input: in, Output: out} }

// ep builds an endpoint; entries nil means it declares no models.
func ep(name string, entries ...scheduling.ModelEntry) *scheduling.Endpoint {
	b := schedulingtest.Endpoint(name)
	if entries != nil {
		b.Models(entries...)
	}
	return b.Build()
}

func scoredOf(eps ...*scheduling.Endpoint) []scheduling.ScoredEndpoint {
	out := make([]scheduling.ScoredEndpoint, len(eps))
	for i, e := range eps {
		out[i] = scheduling.ScoredEndpoint{Endpoint: e}
	}
	return out
}

func chatReq(model string, promptTokens, maxOut int) *scheduling.Request {
	return &scheduling.Request{Model: model, TargetModel: model, PromptTokens: promptTokens, MaxOutputTokens: maxOut, BodyBytes: promptTokens * 4}
}

// TestC23_PriceLookup: the endpoint's own price first, then the catalog;
// a pricing block that declares nothing (pricing: null) shadows the
// catalog, an entry without one takes the catalog's price.
func TestC23_PriceLookup(t *testing.T) {
	catalog := map[string]scheduling.Price{"llama": {Input: 1, Output: 2}}
	tests := []struct {
		name   string
		e      *scheduling.Endpoint
		model  string
		want   scheduling.Price
		wantOK bool
	}{
		{name: "declared price", e: ep("a", scheduling.ModelEntry{Name: "llama", Pricing: price(0.2, 0.6)}), model: "llama", want: scheduling.Price{Input: 0.2, Output: 0.6}, wantOK: true},
		{name: "by alias", e: ep("a", scheduling.ModelEntry{Name: "llama-3.3-70b", Aliases: []string{"llama"}, Pricing: price(0.3, 0.7)}), model: "llama", want: scheduling.Price{Input: 0.3, Output: 0.7}, wantOK: true},
		{name: "pricing null shadows the catalog", e: ep("a", scheduling.ModelEntry{Name: "llama", Unpriced: true}), model: "llama", wantOK: false},
		{name: "entry without pricing: catalog", e: ep("a", scheduling.ModelEntry{Name: "llama"}), model: "llama", want: catalog["llama"], wantOK: true},
		{name: "no declaration: catalog", e: ep("a"), model: "llama", want: catalog["llama"], wantOK: true},
		{name: "other models declared: catalog", e: ep("a", scheduling.ModelEntry{Name: "qwen", Pricing: price(9, 9)}), model: "llama", want: catalog["llama"], wantOK: true},
		{name: "nowhere", e: ep("a"), model: "mistral", wantOK: false},
		{name: "invalid declared price is unpriced", e: ep("a", scheduling.ModelEntry{Name: "llama", Pricing: price(-1, 1)}), model: "llama", wantOK: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := LookupPrice(tt.e, tt.model, catalog)
			if ok != tt.wantOK || got != tt.want {
				t.Errorf("LookupPrice = %+v, %v; want %+v, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// TestC23_CheapestWins: the guide's example, provider-endpoint at
// 2.50/10.00 and self-hosted at 0.20/0.60: self-hosted wins; and the cost
// formula, input × input price + max output × output price.
func TestC23_CheapestWins(t *testing.T) {
	provider := ep("provider-endpoint", scheduling.ModelEntry{Name: "llama-3.3-70b", Pricing: price(2.50, 10.00)})
	self := ep("self-hosted", scheduling.ModelEntry{Name: "llama-3.3-70b", Pricing: price(0.20, 0.60)})
	pk := newPicker(t, nil, 1, nil)
	for range 5 {
		if got := pk.Pick(t.Context(), chatReq("llama-3.3-70b", 1000, 500), scoredOf(provider, self)).Targets[0]; got != self {
			t.Fatalf("picked %s", got.Name())
		}
	}
	if got := Cost(scheduling.Price{Input: 2.5, Output: 10}, 1000, 500); got != 0.0025+0.005 {
		t.Errorf("Cost = %v, want 0.0075", got)
	}
	// Output dominates: cheap input, expensive output loses a long answer.
	a := ep("a", scheduling.ModelEntry{Name: "m", Pricing: price(0.1, 10)})
	b := ep("b", scheduling.ModelEntry{Name: "m", Pricing: price(1, 1)})
	if got := pk.Pick(t.Context(), chatReq("m", 100, 4000), scoredOf(a, b)).Targets[0]; got != b {
		t.Errorf("long answer: picked %s, want b (100×1 + 4000×1 < 100×0.1 + 4000×10)", got.Name())
	}
	if got := pk.Pick(t.Context(), chatReq("m", 100000, 10), scoredOf(a, b)).Targets[0]; got != a {
		t.Errorf("long prompt: picked %s, want a", got.Name())
	}
	// The resolved (target) model is priced.
	req := chatReq("alias", 10, 10)
	req.TargetModel = "m"
	if got := pk.Pick(t.Context(), req, scoredOf(a, b)).Targets[0]; got != a && got != b {
		t.Errorf("target model: picked %s", got.Name())
	}
}

// TestC24_Ordering: unpriced candidates rank last (never free); with none
// priced the picker takes turns like RoundRobin; equal costs go to the
// lower output price, then take turns.
func TestC24_Ordering(t *testing.T) {
	t.Run("unpriced last", func(t *testing.T) {
		unpriced := ep("unpriced", scheduling.ModelEntry{Name: "m"})
		dear := ep("dear", scheduling.ModelEntry{Name: "m", Pricing: price(100, 100)})
		pk := newPicker(t, nil, 2, nil)
		for range 4 {
			got := schedulingtest.Names(pk.Pick(t.Context(), chatReq("m", 10, 10), scoredOf(unpriced, dear)).Targets)
			if !slices.Equal(got, []string{"dear", "unpriced"}) {
				t.Fatalf("targets = %v, want dear first, the unpriced one last", got)
			}
		}
	})
	t.Run("all unpriced is round robin", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		pk := newPicker(t, reg, 1, nil)
		s := scoredOf(ep("a"), ep("b"), ep("c"))
		var got []string
		for range 6 {
			got = append(got, pk.Pick(t.Context(), chatReq("m", 10, 10), s).Targets[0].Name())
		}
		if !slices.Equal(got, []string{"a", "b", "c", "a", "b", "c"}) {
			t.Errorf("picks = %v, want the candidates in turn", got)
		}
		if v := counter(t, reg, OutcomeUnpriced); v != 6 {
			t.Errorf("%s{outcome=%q} = %v", DecisionsMetric, OutcomeUnpriced, v)
		}
	})
	t.Run("ties by output price, then turns", func(t *testing.T) {
		// A body-less request costs 1M × input: a, b and c tie on input;
		// b and c have the lower output price and take turns; d is dearer.
		s := scoredOf(
			ep("a", scheduling.ModelEntry{Name: "m", Pricing: price(1, 5)}),
			ep("b", scheduling.ModelEntry{Name: "m", Pricing: price(1, 2)}),
			ep("d", scheduling.ModelEntry{Name: "m", Pricing: price(2, 0)}),
			ep("c", scheduling.ModelEntry{Name: "m", Pricing: price(1, 2)}),
		)
		reg := prometheus.NewRegistry()
		pk := newPicker(t, reg, 1, nil)
		var got []string
		for range 4 {
			got = append(got, pk.Pick(t.Context(), &scheduling.Request{Model: "m"}, s).Targets[0].Name())
		}
		if !slices.Equal(got, []string{"b", "c", "b", "c"}) {
			t.Errorf("picks = %v, want b and c in turn", got)
		}
		if v := counter(t, reg, OutcomeCheapest); v != 4 {
			t.Errorf("%s{outcome=%q} = %v", DecisionsMetric, OutcomeCheapest, v)
		}
		pk3 := newPicker(t, nil, 4, nil)
		first := schedulingtest.Names(pk3.Pick(t.Context(), &scheduling.Request{Model: "m"}, s).Targets)
		second := schedulingtest.Names(pk3.Pick(t.Context(), &scheduling.Request{Model: "m"}, s).Targets)
		if !slices.Equal(first, []string{"b", "c", "a", "d"}) || !slices.Equal(second, []string{"c", "b", "a", "d"}) {
			t.Errorf("fallbacks = %v then %v, want b c a d then c b a d", first, second)
		}
	})
	t.Run("more than the candidates", func(t *testing.T) {
		pk := newPicker(t, nil, 5, nil)
		s := scoredOf(ep("x"), ep("y", scheduling.ModelEntry{Name: "m", Pricing: price(1, 1)}))
		if got := schedulingtest.Names(pk.Pick(t.Context(), chatReq("m", 1, 1), s).Targets); !slices.Equal(got, []string{"y", "x"}) {
			t.Errorf("targets = %v", got)
		}
		all := newPicker(t, nil, 5, nil)
		if got := all.Pick(t.Context(), chatReq("m", 1, 1), scoredOf(ep("x"), ep("z"))).Targets; len(got) != 2 {
			t.Errorf("unpriced targets = %v", schedulingtest.Names(got))
		}
		if got := all.Pick(t.Context(), nil, nil); len(got.Targets) != 0 {
			t.Error("no candidates must give no targets")
		}
	})
}

// TestC25_Sizing: parsed bodies are sized by the tokenizer-free prompt
// estimate and their output cap, per API; body-less requests by 1M input
// and 0 output, which ranks by input price.
func TestC25_Sizing(t *testing.T) {
	tests := []struct {
		name    string
		api     requests.API
		body    string
		wantOut int64
	}{
		{name: "chat max_tokens", api: requests.APIChatCompletions, body: `{"model":"m","max_tokens":300,"messages":[{"role":"user","content":"hello there"}]}`, wantOut: 300},
		{name: "chat max_completion_tokens", api: requests.APIChatCompletions, body: `{"model":"m","max_completion_tokens":400,"messages":[{"role":"user","content":"hi"}]}`, wantOut: 400},
		{name: "chat without a cap", api: requests.APIChatCompletions, body: `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, wantOut: 0},
		{name: "responses max_output_tokens", api: requests.APIResponses, body: `{"model":"m","max_output_tokens":500,"input":"question"}`, wantOut: 500},
		{name: "anthropic max_tokens", api: requests.APIMessages, body: `{"model":"m","max_tokens":600,"messages":[{"role":"user","content":"hi"}]}`, wantOut: 600},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out requests.Parsed
			if err := requests.Parse(requests.FormatOpenAI, tt.api, []byte(tt.body), &out); err != nil {
				t.Fatal(err)
			}
			req := &scheduling.Request{Model: out.Model, PromptTokens: out.PromptTokens, MaxOutputTokens: out.MaxOutputTokens, BodyBytes: len(tt.body), Prompt: out.Prompt}
			in, o := Tokens(req)
			if in != int64(out.PromptTokens) || in < 1 || o != tt.wantOut {
				t.Errorf("Tokens = %d, %d; want %d, %d", in, o, out.PromptTokens, tt.wantOut)
			}
		})
	}
	for _, tt := range []struct {
		name          string
		req           *scheduling.Request
		wantIn, wantO int64
	}{
		{name: "body-less", req: &scheduling.Request{Model: "m"}, wantIn: BodylessInputTokens, wantO: BodylessOutputTokens},
		{name: "nil", req: nil, wantIn: BodylessInputTokens, wantO: BodylessOutputTokens},
		{name: "unparsed body (passthrough)", req: &scheduling.Request{Model: "m", BodyBytes: 4000}, wantIn: 1000},
		{name: "prompt without counts", req: &scheduling.Request{Prompt: scheduling.Prompt{Text: []byte("12345678")}, MaxOutputTokens: 7}, wantIn: 2, wantO: 7},
	} {
		if in, o := Tokens(tt.req); in != tt.wantIn || o != tt.wantO {
			t.Errorf("%s: Tokens = %d, %d; want %d, %d", tt.name, in, o, tt.wantIn, tt.wantO)
		}
	}
	// Body-less ranks by input price (output 0), ties broken by output.
	cheapIn := ep("cheap-input", scheduling.ModelEntry{Name: "m", Pricing: price(0.5, 50)})
	cheapOut := ep("cheap-output", scheduling.ModelEntry{Name: "m", Pricing: price(0.6, 0.1)})
	pk := newPicker(t, nil, 1, nil)
	if got := pk.Pick(t.Context(), &scheduling.Request{Model: "m"}, scoredOf(cheapIn, cheapOut)).Targets[0]; got != cheapIn {
		t.Errorf("body-less picked %s, want the cheaper input price", got.Name())
	}
	if got := pk.Pick(t.Context(), chatReq("m", 10, 1000), scoredOf(cheapIn, cheapOut)).Targets[0]; got != cheapOut {
		t.Errorf("sized request picked %s, want the cheaper output", got.Name())
	}
}

// TestC26_PricingWarnings: a model served by two or more endpoints with
// fewer than two priced replicas warns; only declared models are checked.
func TestC26_PricingWarnings(t *testing.T) {
	catalog := Params{Catalog: map[string]scheduling.Price{"cat": {Input: 1, Output: 1}}}
	tests := []struct {
		name string
		eps  []*scheduling.Endpoint
		p    Params
		want []string
	}{
		{name: "two priced replicas", eps: []*scheduling.Endpoint{
			ep("a", scheduling.ModelEntry{Name: "m", Pricing: price(1, 1)}), ep("b", scheduling.ModelEntry{Name: "m", Pricing: price(2, 2)})}},
		{name: "one of two priced", eps: []*scheduling.Endpoint{
			ep("a", scheduling.ModelEntry{Name: "m", Pricing: price(1, 1)}), ep("b", scheduling.ModelEntry{Name: "m"})},
			want: []string{`model "m" is served by 2 endpoints but only 1 are priced`}},
		{name: "none of three priced", eps: []*scheduling.Endpoint{
			ep("a", scheduling.ModelEntry{Name: "m"}), ep("b", scheduling.ModelEntry{Name: "m"}), ep("c", scheduling.ModelEntry{Name: "m"})},
			want: []string{`model "m" is served by 3 endpoints but only 0 are priced`}},
		{name: "one endpoint is fine", eps: []*scheduling.Endpoint{ep("a", scheduling.ModelEntry{Name: "m"})}},
		{name: "undeclared models are not checked", eps: []*scheduling.Endpoint{ep("a"), ep("b")}},
		{name: "endpoints without declarations serve it, priced by the catalog", eps: []*scheduling.Endpoint{
			ep("a", scheduling.ModelEntry{Name: "cat"}), ep("b"), ep("c")}, p: catalog},
		{name: "without the catalog they are unpriced", eps: []*scheduling.Endpoint{
			ep("a", scheduling.ModelEntry{Name: "x", Pricing: price(1, 1)}), ep("b")},
			want: []string{`model "x" is served by 2 endpoints but only 1 are priced`}},
		{name: "model order", eps: []*scheduling.Endpoint{
			ep("a", scheduling.ModelEntry{Name: "zeta"}, scheduling.ModelEntry{Name: "alpha"}), ep("b", scheduling.ModelEntry{Name: "zeta"}, scheduling.ModelEntry{Name: "alpha"})},
			want: []string{`model "alpha"`, `model "zeta"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := PricingWarnings(tt.eps, tt.p)
			if len(got) != len(tt.want) {
				t.Fatalf("warnings = %q, want %d", got, len(tt.want))
			}
			for i, w := range tt.want {
				if !strings.Contains(got[i], w) || !strings.HasPrefix(got[i], Type+": ") {
					t.Errorf("warning %d = %q, want it to contain %q", i, got[i], w)
				}
			}
		})
	}
}

// TestC27_TiersNarrowBeforeCost: smart-routing tiers are filters ahead of
// the picker in the profile: the cheapest endpoint of the pool is out of
// the tier and never picked; cost ranks within the tier.
func TestC27_TiersNarrowBeforeCost(t *testing.T) {
	tier := &schedulingtest.FakeFilter{Name: "premium-tier", Keep: func(e *scheduling.Endpoint) bool { return e.Metadata().Labels["tier"] == "premium" }}
	mk := func(name, tierName string, in float64) *scheduling.Endpoint {
		return schedulingtest.Endpoint(name).Label("tier", tierName).Models(scheduling.ModelEntry{Name: "m", Pricing: price(in, 1)}).Build()
	}
	candidates := []*scheduling.Endpoint{mk("budget", "economy", 0.01), mk("p-dear", "premium", 3), mk("p-cheap", "premium", 1)}
	prof, err := scheduling.NewProfile("default", []scheduling.Filter{tier}, nil, newPicker(t, nil, 1, nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		res, err := prof.Run(t.Context(), chatReq("m", 100, 100), candidates)
		if err != nil {
			t.Fatal(err)
		}
		if got := res.Targets[0].Name(); got != "p-cheap" {
			t.Errorf("picked %s, want p-cheap (the cheapest of the tier)", got)
		}
	}
}

func TestCloseDeletesSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	pk := newPicker(t, reg, 1, nil)
	pk.Pick(t.Context(), chatReq("m", 1, 1), scoredOf(ep("a")))
	pk.Close(scheduling.CloseInfo{Successor: true})
	if counter(t, reg, OutcomeUnpriced) != 1 {
		t.Error("a close with successor must keep the series")
	}
	newPicker(t, reg, 1, nil) // a second instance reuses the collector
	pk.Close(scheduling.CloseInfo{})
	fams, _ := reg.Gather()
	for _, f := range fams {
		if f.GetName() == DecisionsMetric && len(f.GetMetric()) != 0 {
			t.Errorf("%d series left", len(f.GetMetric()))
		}
	}
}

func TestPickConcurrent(t *testing.T) {
	s := scoredOf(
		ep("a", scheduling.ModelEntry{Name: "m", Pricing: price(1, 1)}),
		ep("b", scheduling.ModelEntry{Name: "m", Pricing: price(1, 1)}),
		ep("c"),
	)
	pk := newPicker(t, nil, 2, nil)
	var wg sync.WaitGroup
	counts := make([]map[string]int, 8)
	for g := range 8 {
		counts[g] = map[string]int{}
		wg.Go(func() {
			for range 200 {
				res := pk.Pick(t.Context(), chatReq("m", 10, 10), s)
				if len(res.Targets) != 2 || res.Targets[1].Name() == "c" && res.Targets[0].Name() == "c" {
					t.Errorf("targets = %v", schedulingtest.Names(res.Targets))
					return
				}
				counts[g][res.Targets[0].Name()]++
			}
		})
	}
	wg.Wait()
	total := map[string]int{}
	for _, c := range counts {
		for k, v := range c {
			total[k] += v
		}
	}
	if total["a"] != 800 || total["b"] != 800 {
		t.Errorf("tied picks = %v, want 800 each (strict turns)", total)
	}
}

func counter(t *testing.T, g prometheus.Gatherer, outcome string) float64 {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != DecisionsMetric {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == outcome {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func picktestParams(max int) pick.Params { return pick.Params{MaxNumOfEndpoints: max} }

// TestFallbacksOnlyNotAPick: a call that only orders the fallbacks (the
// strategy-picker's scorers chose the primary) neither takes a turn among
// tied candidates nor counts a decision.
func TestFallbacksOnlyNotAPick(t *testing.T) {
	entry := scheduling.ModelEntry{Name: "llama", Pricing: price(1, 2)}
	for _, tt := range []struct {
		name    string
		scored  []scheduling.ScoredEndpoint
		outcome string
	}{
		{name: "tied prices", scored: scoredOf(ep("a", entry), ep("b", entry), ep("c", entry)), outcome: OutcomeCheapest},
		{name: "none priced", scored: scoredOf(ep("a"), ep("b"), ep("c")), outcome: OutcomeUnpriced},
	} {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			plain, mixed := newPicker(t, nil, 2, nil), newPicker(t, reg, 2, nil)
			req := chatReq("llama", 100, 10)
			fb := scheduling.PickInfo{FallbacksOnly: true}
			for i := range 4 {
				want := strings.Join(schedulingtest.Names(plain.PickInProfile(t.Context(), req, tt.scored, scheduling.PickInfo{}).Targets), ",")
				peek := strings.Join(schedulingtest.Names(mixed.PickInProfile(t.Context(), req, tt.scored, fb).Targets), ",")
				got := strings.Join(schedulingtest.Names(mixed.PickInProfile(t.Context(), req, tt.scored, scheduling.PickInfo{}).Targets), ",")
				if got != want || peek != want {
					t.Fatalf("pick %d: %s after a fallbacks-only call (which ordered %s), want %s", i, got, peek, want)
				}
			}
			if v := counter(t, reg, tt.outcome); v != 4 {
				t.Errorf("%s{outcome=%q} = %v, want 4 (the picks, not the fallbacks-only calls)", DecisionsMetric, tt.outcome, v)
			}
		})
	}
}
