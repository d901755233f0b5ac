package prefixawarehash

import (
	"cmp"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/internal/hashring"
	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/internal/pick"
	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/internal/picktest"
	"github.com/switchyard-ai/switchyard/pkg/requests"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

func TestFactory(t *testing.T) {
	cases := append(picktest.FactoryCases(),
		schedulingtest.FactoryCase{Name: "defaults", Check: wantParams(DefaultParams())},
		schedulingtest.FactoryCase{Name: "every field", Params: `{"enabled": false, "loadFactorEpsilon": 0.5, "maxPrefixLength": 64, "virtualNodes": 10, "maxNumOfEndpoints": 2}`,
			Check: wantParams(Params{Params: picktestMax(2), Enabled: false, LoadFactorEpsilon: 0.5, MaxPrefixLength: 64, VirtualNodes: 10})},
		schedulingtest.FactoryCase{Name: "epsilon zero", Params: `{"loadFactorEpsilon": 0}`,
			Check: func(t *testing.T, p scheduling.Plugin) {
				if got := p.(*Picker).params.LoadFactorEpsilon; got != 0 {
					t.Errorf("epsilon = %v", got)
				}
			}},
		schedulingtest.FactoryCase{Name: "negative epsilon", Params: `{"loadFactorEpsilon": -0.1}`, WantErr: "loadFactorEpsilon: must be 0..1000, got -0.1"},
		schedulingtest.FactoryCase{Name: "huge epsilon", Params: `{"loadFactorEpsilon": 1001}`, WantErr: "loadFactorEpsilon: must be 0..1000, got 1001"},
		schedulingtest.FactoryCase{Name: "zero prefix length", Params: `{"maxPrefixLength": 0}`, WantErr: "maxPrefixLength: must be 1..1048576 bytes, got 0"},
		schedulingtest.FactoryCase{Name: "too long prefix", Params: `{"maxPrefixLength": 1048577}`, WantErr: "maxPrefixLength: must be 1..1048576 bytes, got 1048577"},
		schedulingtest.FactoryCase{Name: "zero virtual nodes", Params: `{"virtualNodes": 0}`, WantErr: "virtualNodes: must be 1..1000, got 0"},
		schedulingtest.FactoryCase{Name: "too many virtual nodes", Params: `{"virtualNodes": 1001}`, WantErr: "virtualNodes: must be 1..1000, got 1001"},
		schedulingtest.FactoryCase{Name: "wrong type", Params: `{"enabled": "yes"}`, WantErr: "enabled: expected a boolean"},
		schedulingtest.FactoryCase{Name: "every problem", Params: `{"loadFactorEpsilon": -1, "maxPrefixLength": 0, "virtualNodes": 0, "maxNumOfEndpoints": 0}`,
			WantErrs: []string{"loadFactorEpsilon: must be", "maxPrefixLength: must be", "virtualNodes: must be", "maxNumOfEndpoints: must be >= 1"}},
	)
	schedulingtest.RunFactoryCases(t, Registration, cases)
}

func picktestMax(n int) pick.Params { return pick.Params{MaxNumOfEndpoints: n} }

func xxhashModel(model string) uint64 { return xxhash.Sum64String(model) }

func wantParams(want Params) func(*testing.T, scheduling.Plugin) {
	return func(t *testing.T, p scheduling.Plugin) {
		t.Helper()
		if got := p.(*Picker).params; got != want {
			t.Errorf("params = %+v, want %+v", got, want)
		}
	}
}

func TestNew(t *testing.T) {
	if _, err := New("x", Params{Params: DefaultParams().Params}, schedulingtest.NewHandle(t)); err == nil {
		t.Error("New accepted zero virtualNodes and maxPrefixLength")
	}
	if _, err := New("x", DefaultParams(), nil); err == nil {
		t.Error("New accepted a nil handle")
	}
	h := schedulingtest.NewHandle(t)
	if _, err := Registration.Factory("p", nil, h); err != nil {
		t.Fatal(err)
	}
	if got, _ := h.Params("p"); got != any(DefaultParams()) {
		t.Errorf("effective parameters = %+v, want the defaults", got)
	}
	// The name defaults to the type.
	p, err := New("", DefaultParams(), schedulingtest.NewHandle(t))
	if err != nil || p.TypedName().Name != Type {
		t.Errorf("New(\"\") = %v, %v", p, err)
	}
}

// loaded returns n endpoints named ep-0 … with a FakeLoad each.
func loaded(n int) ([]scheduling.ScoredEndpoint, []*schedulingtest.FakeLoad) {
	loads := make([]*schedulingtest.FakeLoad, n)
	eps := schedulingtest.Endpoints(n, func(i int, b *schedulingtest.EndpointBuilder) {
		loads[i] = schedulingtest.NewFakeLoad(0, 0)
		b.Load(loads[i])
	})
	scored := make([]scheduling.ScoredEndpoint, n)
	for i, e := range eps {
		scored[i] = scheduling.ScoredEndpoint{Endpoint: e}
	}
	return scored, loads
}

func newPicker(t testing.TB, mutate func(*Params)) *Picker {
	t.Helper()
	p := DefaultParams()
	if mutate != nil {
		mutate(&p)
	}
	pk, err := New(Type, p, schedulingtest.NewHandle(t))
	if err != nil {
		t.Fatal(err)
	}
	return pk
}

// chat returns a chat request for model with a system prompt (sys may be
// empty) and a user message.
func chat(model, sys, user string) *scheduling.Request {
	var msgs []scheduling.Message
	if sys != "" {
		msgs = append(msgs, scheduling.Message{Role: "system", Content: sys})
	}
	msgs = append(msgs, scheduling.Message{Role: "user", Content: user})
	return &scheduling.Request{Model: model, TargetModel: model, Prompt: scheduling.Prompt{Messages: msgs}}
}

// parsed parses a body of an API into a request, as the ext_proc server
// does.
func parsed(t *testing.T, api requests.API, body string) *scheduling.Request {
	t.Helper()
	var out requests.Parsed
	if err := requests.Parse(requests.FormatOpenAI, api, []byte(body), &out); err != nil {
		t.Fatalf("Parse(%s): %v", body, err)
	}
	return &scheduling.Request{Model: out.Model, TargetModel: out.Model, Prompt: out.Prompt, PromptTokens: out.PromptTokens, BodyBytes: len(body)}
}

// TestC15_KeyIsModelAndSystemPromptElseFirstUserMessage checks the key
// material of the three APIs the guide names, as pkg/requests parses
// them: the system prompt (chat system message, Anthropic's system,
// Responses' instructions), else the first user message; and that the
// key is SHA-256 of the model, 0x00 and the material cut to
// maxPrefixLength bytes.
func TestC15_KeyIsModelAndSystemPromptElseFirstUserMessage(t *testing.T) {
	tests := []struct {
		name     string
		api      requests.API
		body     string
		want     string
		wantNoKy bool
	}{
		{name: "chat system prompt", api: requests.APIChatCompletions,
			body: `{"model":"m","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"hi"}]}`, want: "You are terse."},
		{name: "chat developer prompt", api: requests.APIChatCompletions,
			body: `{"model":"m","messages":[{"role":"developer","content":"Be kind."},{"role":"user","content":"hi"}]}`, want: "Be kind."},
		{name: "chat without system: first user message", api: requests.APIChatCompletions,
			body: `{"model":"m","messages":[{"role":"user","content":"first"},{"role":"assistant","content":"a"},{"role":"user","content":"second"}]}`, want: "first"},
		{name: "chat text parts", api: requests.APIChatCompletions,
			body: `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}]}`, want: "a\nb"},
		{name: "chat user message of an image only", api: requests.APIChatCompletions,
			body: `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`, wantNoKy: true},
		{name: "anthropic system string", api: requests.APIMessages,
			body: `{"model":"m","max_tokens":5,"system":"Anthropic system","messages":[{"role":"user","content":"hi"}]}`, want: "Anthropic system"},
		{name: "anthropic system blocks", api: requests.APIMessages,
			body: `{"model":"m","max_tokens":5,"system":[{"type":"text","text":"one","cache_control":{"type":"ephemeral"}},{"type":"text","text":"two"}],"messages":[{"role":"user","content":"hi"}]}`, want: "one\ntwo"},
		{name: "anthropic without system", api: requests.APIMessages,
			body: `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":"question"}]}]}`, want: "question"},
		{name: "responses instructions", api: requests.APIResponses,
			body: `{"model":"m","instructions":"Responses system","input":"hello"}`, want: "Responses system"},
		{name: "responses string input", api: requests.APIResponses,
			body: `{"model":"m","input":"just input"}`, want: "just input"},
		{name: "responses items", api: requests.APIResponses,
			body: `{"model":"m","input":[{"type":"function_call_output","call_id":"c","output":"x"},{"role":"user","content":[{"type":"input_text","text":"item text"}]}]}`, want: "item text"},
		{name: "completions have no key", api: requests.APICompletions,
			body: `{"model":"m","prompt":"plain prompt"}`, wantNoKy: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := parsed(t, tt.api, tt.body)
			got, ok := KeyMaterial(req)
			if tt.wantNoKy {
				if ok {
					t.Fatalf("KeyMaterial = %q, want none", got)
				}
				if _, ok := Key(req, DefaultMaxPrefixLength); ok {
					t.Error("Key found a key")
				}
				return
			}
			if !ok || got != tt.want {
				t.Fatalf("KeyMaterial = %q, %v; want %q", got, ok, tt.want)
			}
			key, ok := Key(req, DefaultMaxPrefixLength)
			if want := sha256.Sum256([]byte("m\x00" + tt.want)); !ok || key != want {
				t.Errorf("Key = %x, want SHA-256 of model, 0x00, material", key)
			}
		})
	}
	t.Run("the model is part of the key", func(t *testing.T) {
		a, _ := Key(chat("a", "same", "u"), 1024)
		b, _ := Key(chat("b", "same", "u"), 1024)
		if a == b {
			t.Error("two models with one system prompt share a key")
		}
	})
	t.Run("the resolved model is hashed", func(t *testing.T) {
		req := chat("alias", "s", "u")
		req.TargetModel = "served"
		got, _ := Key(req, 1024)
		if want := sha256.Sum256([]byte("served\x00s")); got != want {
			t.Error("Key does not hash the target model")
		}
	})
	t.Run("maxPrefixLength counts UTF-8 bytes", func(t *testing.T) {
		long := strings.Repeat("é", 10) // 20 bytes
		got, _ := Key(chat("m", long, "u"), 5)
		if want := sha256.Sum256([]byte("m\x00éé")); got != want {
			t.Error("5 bytes of é×10 must be cut to éé (4 bytes), at a character boundary")
		}
		same1, _ := Key(chat("m", strings.Repeat("x", 2000)+"A", "u"), 1024)
		same2, _ := Key(chat("m", strings.Repeat("x", 2000)+"B", "u"), 1024)
		if same1 != same2 {
			t.Error("prompts equal in their first 1024 bytes must share a key")
		}
	})
	if got := Truncate("abc", 10); got != "abc" {
		t.Errorf("Truncate short = %q", got)
	}
	if _, ok := KeyMaterial(nil); ok {
		t.Error("nil request has key material")
	}
}

func TestBound(t *testing.T) {
	tests := []struct {
		total int64
		n     int
		eps   float64
		want  int64
	}{
		{total: 0, n: 1, eps: 0.25, want: 2},    // ceil(1.25)
		{total: 0, n: 4, eps: 0.25, want: 1},    // ceil(0.3125)
		{total: 3, n: 4, eps: 0.25, want: 2},    // ceil(1.25)
		{total: 7, n: 4, eps: 0, want: 2},       // ceil(2): exact
		{total: 9, n: 11, eps: 0.1, want: 1},    // 10 × 1.1 / 11 = 1 (float gives 1.0000000000000002)
		{total: 99, n: 10, eps: 0.25, want: 13}, // ceil(12.5)
		{total: -5, n: 2, eps: 0.25, want: 1},   // negative counts as 0
		{total: 5, n: 0, eps: 0.25, want: 0},
	}
	for _, tt := range tests {
		if got := Bound(tt.total, tt.n, tt.eps); got != tt.want {
			t.Errorf("Bound(%d, %d, %v) = %d, want %d", tt.total, tt.n, tt.eps, got, tt.want)
		}
	}
}

// refPick is the reference CHWBL choice for a request with a key: the
// first owner clockwise from the key's hash with load < bound.
// refOrder is the reference walk, independent of the ring's code: the
// candidates' indices ordered by the clockwise distance from h to their
// nearest point (ties by key, as the ring orders colliding points).
func refOrder(scored []scheduling.ScoredEndpoint, vnodes int, h uint64) []int {
	dist := make([]uint64, len(scored))
	order := make([]int, len(scored))
	for i, s := range scored {
		kh := xxhash.Sum64String(s.Endpoint.Key())
		dist[i] = ^uint64(0)
		for v := range vnodes {
			dist[i] = min(dist[i], hashring.PointHash(kh, v)-h)
		}
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		if c := cmp.Compare(dist[a], dist[b]); c != 0 {
			return c
		}
		return cmp.Compare(scored[a].Endpoint.Key(), scored[b].Endpoint.Key())
	})
	return order
}

// refPick is the first candidate of the reference walk under the bound.
func refPick(t *testing.T, scored []scheduling.ScoredEndpoint, key [32]byte, loads []int64, bound int64) int {
	t.Helper()
	for _, j := range refOrder(scored, DefaultVirtualNodes, beUint64(key[:8])) {
		if loads[j] < bound {
			return j
		}
	}
	t.Fatal("no endpoint under the bound")
	return -1
}

func beUint64(b []byte) uint64 {
	var v uint64
	for _, c := range b[:8] {
		v = v<<8 | uint64(c)
	}
	return v
}

// TestC15_BoundedLoadNeverExceeded is the property test: over 10,000
// seeded random sequences of arrivals and completions (1 to 24
// candidates, ε from 0 to 2, hot and cold keys), the endpoint each arrival
// goes to has fewer than ceil((total_in_flight + 1)(1 + ε)/N) requests in
// flight before it (so at most the bound after), and it is exactly the
// first endpoint clockwise from the key that is under the bound.
func TestC15_BoundedLoadNeverExceeded(t *testing.T) {
	const sequences, events = 10000, 40
	epsilons := []float64{0, 0.1, 0.25, 0.5, 1, 2}
	rng := rand.New(rand.NewPCG(15, 17))
	keys := make([]*scheduling.Request, 200)
	for i := range keys {
		keys[i] = chat("model", fmt.Sprintf("system prompt %d", i), "u")
	}
	type world struct {
		scored []scheduling.ScoredEndpoint
		loads  []*schedulingtest.FakeLoad
		pick   []*Picker // by epsilon
	}
	worlds := map[int]*world{}
	picks, overflows := 0, 0
	for seq := range sequences {
		n := 1 + rng.IntN(24)
		w := worlds[n]
		if w == nil {
			w = &world{}
			w.scored, w.loads = loaded(n)
			for _, eps := range epsilons {
				w.pick = append(w.pick, newPicker(t, func(p *Params) { p.LoadFactorEpsilon = eps }))
			}
			worlds[n] = w
		}
		for _, l := range w.loads {
			l.InFlightN.Store(0)
		}
		ei := rng.IntN(len(epsilons))
		eps, pk := epsilons[ei], w.pick[ei]
		hot := 1 + rng.IntN(len(keys)) // how many distinct keys this sequence uses
		var open []int                 // endpoint index of each open request
		for range events {
			if len(open) > 0 && rng.IntN(10) < 4 {
				i := rng.IntN(len(open))
				w.loads[open[i]].InFlightN.Add(-1)
				open = append(open[:i], open[i+1:]...)
				continue
			}
			req := keys[rng.IntN(hot)]
			loads := make([]int64, n)
			var total int64
			for j, l := range w.loads {
				loads[j] = l.InFlight()
				total += loads[j]
			}
			bound := Bound(total, n, eps)
			res := pk.Pick(t.Context(), req, w.scored)
			if len(res.Targets) != 1 {
				t.Fatalf("seq %d: %d targets", seq, len(res.Targets))
			}
			chosen := slices.IndexFunc(w.scored, func(s scheduling.ScoredEndpoint) bool { return s.Endpoint == res.Targets[0] })
			if loads[chosen]+1 > bound {
				t.Fatalf("seq %d (N=%d, ε=%v): endpoint %d goes to %d in flight, above the bound %d (total %d)", seq, n, eps, chosen, loads[chosen]+1, bound, total)
			}
			key, _ := Key(req, DefaultMaxPrefixLength)
			if want := refPick(t, w.scored, key, loads, bound); chosen != want {
				t.Fatalf("seq %d: picked %d, the first endpoint under the bound clockwise is %d", seq, chosen, want)
			}
			if refOrder(w.scored, DefaultVirtualNodes, beUint64(key[:8]))[0] != chosen {
				overflows++
			}
			w.loads[chosen].InFlightN.Add(1)
			open = append(open, chosen)
			picks++
		}
	}
	t.Logf("%d sequences, %d arrivals checked against the bound, %d of them overflowed to a later endpoint", sequences, picks, overflows)
}

func endpointsOf(scored []scheduling.ScoredEndpoint) []*scheduling.Endpoint {
	out := make([]*scheduling.Endpoint, len(scored))
	for i := range scored {
		out[i] = scored[i].Endpoint
	}
	return out
}

// assign maps each key to an endpoint name, the picker seeing the loads
// as they are (sticky: each assignment stays in flight when sticky).
func assign(t *testing.T, names []string, keys []*scheduling.Request, sticky bool, eps float64) []string {
	t.Helper()
	return assignWith(t, newPicker(t, func(p *Params) { p.LoadFactorEpsilon = eps }), names, keys, sticky)
}

// assignWith is assign with a given picker (one that may have seen other
// endpoints: its ring is then a superset of these).
func assignWith(t *testing.T, pk *Picker, names []string, keys []*scheduling.Request, sticky bool) []string {
	t.Helper()
	scored := make([]scheduling.ScoredEndpoint, len(names))
	loads := map[string]*schedulingtest.FakeLoad{}
	for i, name := range names {
		l := schedulingtest.NewFakeLoad(0, 0)
		loads[name] = l
		scored[i] = scheduling.ScoredEndpoint{Endpoint: schedulingtest.Endpoint(name).Load(l).Build()}
	}
	out := make([]string, len(keys))
	for i, req := range keys {
		e := pk.Pick(t.Context(), req, scored).Targets[0]
		out[i] = e.Name()
		if sticky {
			loads[e.Name()].InFlightN.Add(1)
		}
	}
	return out
}

// TestC15_AddOrRemoveOneEndpointMovesFewKeys: with 20 endpoints, removing
// or adding one moves about 1/20 of the keys. Unloaded (the bound never
// binds), exactly the keys of the endpoint that left (or that the new
// one takes) move; loaded (every key stays in flight, so loads grow to
// the bound's scale, the paper's setting) the overflow cascade moves a
// few more, at most 1/20 + ε (+ 0.02 of sampling margin), and more as ε
// shrinks (ε = 0, perfect balance, is logged only: about half the keys
// move). The measured fractions are logged. One instance that sees every
// change (its ring over all 21 endpoints, walked skipping the absent one)
// assigns exactly as instances that know only the current endpoints.
func TestC15_AddOrRemoveOneEndpointMovesFewKeys(t *testing.T) {
	const n, numKeys = 20, 20000
	keys := make([]*scheduling.Request, numKeys)
	for i := range keys {
		keys[i] = chat("model", fmt.Sprintf("tenant %d system prompt", i), "u")
	}
	names := make([]string, n+1)
	for i := range names {
		names[i] = fmt.Sprintf("pod-%d", i)
	}
	base, fewer, more := names[:n], names[1:n], names
	for _, tc := range []struct {
		sticky bool
		eps    float64
	}{{false, DefaultLoadFactorEpsilon}, {true, DefaultLoadFactorEpsilon}, {true, 0.1}, {true, 0}} {
		label := "unloaded"
		limit := 1.0/n + 0.02
		if tc.sticky {
			label = fmt.Sprintf("loaded, ε=%v", tc.eps)
			limit = 1.0/n + tc.eps + 0.02
			if tc.eps == 0 {
				// Perfect balance: CHWBL's moves grow as 1/ε² (the
				// paper), so ε = 0 is logged, not bounded.
				limit = 1
			}
		}
		before := assign(t, base, keys, tc.sticky, tc.eps)
		// One instance that sees every change: its ring is built over all
		// 21 endpoints and walked skipping the absent one. It must assign
		// exactly as instances that know only the current endpoints.
		shared := newPicker(t, func(p *Params) { p.LoadFactorEpsilon = tc.eps })
		assignWith(t, shared, more, keys[:1], false)
		if got := assignWith(t, shared, base, keys, tc.sticky); !slices.Equal(got, before) {
			t.Fatalf("%s: the pool's ring assigns the 20 endpoints' keys differently from their own ring", label)
		}
		for _, change := range []struct {
			name  string
			after []string
		}{{"remove pod-0", fewer}, {"add pod-20", more}} {
			after := assign(t, change.after, keys, tc.sticky, tc.eps)
			if got := assignWith(t, shared, change.after, keys, tc.sticky); !slices.Equal(got, after) {
				t.Fatalf("%s, %s: the pool's ring assigns differently from the endpoints' own ring", label, change.name)
			}
			moved, wrong := 0, 0
			for i := range keys {
				if before[i] == after[i] {
					continue
				}
				moved++
				if !tc.sticky && before[i] != "pod-0" && after[i] != "pod-20" {
					wrong++ // unloaded, only the changed endpoint's keys may move
				}
			}
			frac := float64(moved) / numKeys
			t.Logf("%s, %s: %d of %d keys moved (%.4f; 1/20 = 0.05)", label, change.name, moved, numKeys, frac)
			if frac > limit {
				t.Errorf("%s, %s: %.4f of the keys moved, want at most %.4f", label, change.name, frac, limit)
			}
			if wrong > 0 {
				t.Errorf("%s, %s: %d keys moved between endpoints that did not change", label, change.name, wrong)
			}
		}
	}
}

// TestC15_AffinityAndEpsilon: the same key keeps its endpoint while it is
// under the bound, moves on at the bound, and a larger ε keeps it longer.
func TestC15_AffinityAndEpsilon(t *testing.T) {
	req := chat("m", "shared system prompt", "u")
	scored, loads := loaded(4)
	pk := newPicker(t, nil)
	home := pk.Pick(t.Context(), req, scored).Targets[0]
	hi := slices.IndexFunc(scored, func(s scheduling.ScoredEndpoint) bool { return s.Endpoint == home })
	for range 5 {
		if got := pk.Pick(t.Context(), chat("m", "shared system prompt", "another user turn"), scored).Targets[0]; got != home {
			t.Fatalf("same system prompt went to %s, then %s", home.Name(), got.Name())
		}
	}
	// Home holds 2 of 2 in flight: bound = ceil(3 × 1.25 / 4) = 1: full.
	loads[hi].InFlightN.Store(2)
	if got := pk.Pick(t.Context(), req, scored).Targets[0]; got == home {
		t.Error("the key's endpoint at the bound still took the request")
	}
	// With ε = 3, bound = ceil(3 × 4 / 4) = 3: home has room again.
	wide := newPicker(t, func(p *Params) { p.LoadFactorEpsilon = 3 })
	if got := wide.Pick(t.Context(), req, scored).Targets[0]; got != home {
		t.Errorf("with ε=3 the key moved to %s", got.Name())
	}
}

func TestPickFallbacks(t *testing.T) {
	scored, loads := loaded(6)
	pk := newPicker(t, func(p *Params) { p.MaxNumOfEndpoints = 3 })
	req := chat("m", "sys", "u")
	res := pk.Pick(t.Context(), req, scored)
	if len(res.Targets) != 3 {
		t.Fatalf("targets = %v", schedulingtest.Names(res.Targets))
	}
	names := schedulingtest.Names(res.Targets)
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	if len(slices.Compact(sorted)) != 3 {
		t.Errorf("duplicate targets %v", names)
	}
	// Half of them full (10 in flight each, total 30: bound
	// ceil(31 × 1.25 / 6) = 7): the three under the bound come first, in
	// ring order, whatever the key.
	for i := range loads {
		loads[i].InFlightN.Store(0)
		if i < 3 {
			loads[i].InFlightN.Store(10)
		}
	}
	for i := range 20 {
		res = pk.Pick(t.Context(), chat("m", fmt.Sprintf("k%d", i), "u"), scored)
		got := schedulingtest.Names(res.Targets)
		slices.Sort(got)
		if !slices.Equal(got, []string{"ep-3", "ep-4", "ep-5"}) {
			t.Fatalf("with three endpoints under the bound, targets = %v", schedulingtest.Names(res.Targets))
		}
	}
	// Only one under the bound: it is first, then full ones in ring order.
	pk4 := newPicker(t, func(p *Params) { p.MaxNumOfEndpoints = 4 })
	res = pk4.Pick(t.Context(), req, scored)
	if len(res.Targets) != 4 || !slices.Contains([]string{"ep-3", "ep-4", "ep-5"}, res.Targets[0].Name()) {
		t.Errorf("targets = %v", schedulingtest.Names(res.Targets))
	}
	// More than there are candidates.
	big := newPicker(t, func(p *Params) { p.MaxNumOfEndpoints = 10 })
	if got := big.Pick(t.Context(), req, scored); len(got.Targets) != 6 {
		t.Errorf("maxNumOfEndpoints 10 of 6: %d targets", len(got.Targets))
	}
	if got := big.Pick(t.Context(), &scheduling.Request{Model: "m"}, scored); len(got.Targets) != 6 {
		t.Errorf("fallback path, 10 of 6: %d targets", len(got.Targets))
	}
	if got := pk.Pick(t.Context(), req, nil); len(got.Targets) != 0 {
		t.Error("no candidates must give no targets")
	}
	one := scored[:1]
	if got := big.Pick(t.Context(), req, one); len(got.Targets) != 1 {
		t.Error("one candidate")
	}
}

// TestPickOrderIndependent: the same set in another order gives the same
// endpoint (every process, whatever its candidates' order).
func TestPickOrderIndependent(t *testing.T) {
	scored, _ := loaded(12)
	pk := newPicker(t, func(p *Params) { p.MaxNumOfEndpoints = 2 })
	rev := slices.Clone(scored)
	slices.Reverse(rev)
	other := newPicker(t, func(p *Params) { p.MaxNumOfEndpoints = 2 })
	for i := range 50 {
		req := chat("m", fmt.Sprintf("s%d", i), "u")
		a := schedulingtest.Names(pk.Pick(t.Context(), req, scored).Targets)
		b := schedulingtest.Names(pk.Pick(t.Context(), req, rev).Targets) // the cached ring, reordered candidates
		c := schedulingtest.Names(other.Pick(t.Context(), req, rev).Targets)
		if !slices.Equal(a, b) || !slices.Equal(a, c) {
			t.Fatalf("key %d: %v, reordered %v, other instance %v", i, a, b, c)
		}
	}
	if got := pk.rings.Builds(); got != 1 {
		t.Errorf("rings built = %d, want 1 (one candidate set)", got)
	}
}

// TestC16_FallbackIsUnboundedModelHash: without a key, or with prefix
// routing disabled, the model's hash chooses with no load bound: all of a
// model's requests go to one endpoint even when it is the busiest.
func TestC16_FallbackIsUnboundedModelHash(t *testing.T) {
	scored, loads := loaded(5)
	for _, tt := range []struct {
		name    string
		enabled bool
		req     *scheduling.Request
	}{
		{"no key extractable", true, &scheduling.Request{Model: "llama", TargetModel: "llama", Prompt: scheduling.Prompt{Text: []byte("completion prompt")}}},
		{"prefix routing disabled", false, chat("llama", "sys", "u")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, l := range loads {
				l.InFlightN.Store(0)
			}
			reg := prometheus.NewRegistry()
			pk, err := New("p", func() Params { p := DefaultParams(); p.Enabled = tt.enabled; return p }(), handleWith(reg, logr.Discard()))
			if err != nil {
				t.Fatal(err)
			}
			first := pk.Pick(t.Context(), tt.req, scored).Targets[0]
			fi := slices.IndexFunc(scored, func(s scheduling.ScoredEndpoint) bool { return s.Endpoint == first })
			loads[fi].InFlightN.Store(1000) // far above any bound
			for range 20 {
				if got := pk.Pick(t.Context(), tt.req, scored).Targets[0]; got != first {
					t.Fatalf("the fallback moved from %s to %s: it must not apply a load bound", first.Name(), got.Name())
				}
			}
			// The model's hash, the same choice a ring walk from
			// xxhash(model) makes (the consistent-hash-picker's).
			if want := scored[refOrder(scored, DefaultVirtualNodes, xxhashModel("llama"))[0]].Endpoint; first != want {
				t.Errorf("fallback picked %s, the model hash gives %s", first.Name(), want.Name())
			}
			if got := counter(t, reg, RequestsMetric, map[string]string{"picker": "p", "strategy": StrategyModelHashFallback}); got != 21 {
				t.Errorf("model_hash_fallback = %v, want 21", got)
			}
		})
	}
}

// TestC16_DisabledWarns: building an instance with prefix routing
// disabled warns, through the loader's warnings when the handle collects
// them, else in the log; an enabled one does not.
func TestC16_DisabledWarns(t *testing.T) {
	off := DefaultParams()
	off.Enabled = false
	if w := DisabledWarning("p", off); !strings.Contains(w, "prefix routing is disabled") || !strings.Contains(w, `"p"`) {
		t.Errorf("DisabledWarning = %q", w)
	}
	if w := DisabledWarning("p", DefaultParams()); w != "" {
		t.Errorf("enabled: warning %q", w)
	}
	var logged []string
	log := funcr.New(func(_, args string) { logged = append(logged, args) }, funcr.Options{})
	if _, err := New("p", off, handleWith(prometheus.NewRegistry(), log)); err != nil {
		t.Fatal(err)
	}
	if len(logged) != 1 || !strings.Contains(logged[0], "prefix routing is disabled") {
		t.Errorf("log = %q, want one warning", logged)
	}
	wh := &warnHandle{Handle: handleWith(prometheus.NewRegistry(), log)}
	logged = nil
	if _, err := New("p", off, wh); err != nil {
		t.Fatal(err)
	}
	if len(wh.warnings) != 1 || len(logged) != 0 {
		t.Errorf("warnings = %q, log = %q: a collecting handle gets the warning instead of the log", wh.warnings, logged)
	}
	wh.warnings = nil
	if _, err := New("q", DefaultParams(), wh); err != nil || len(wh.warnings) != 0 {
		t.Errorf("enabled instance warned %q (%v)", wh.warnings, err)
	}
}

type warnHandle struct {
	scheduling.Handle
	warnings []string
}

func (h *warnHandle) Warn(msg string) { h.warnings = append(h.warnings, msg) }

func handleWith(reg prometheus.Registerer, log logr.Logger) scheduling.Handle {
	return scheduling.NewHandle(scheduling.HandleOptions{Registerer: reg, Logger: log, Seed: 1})
}

// TestC17_VirtualNodesAndReload: 150 virtual nodes per candidate by
// default; an instance built with other parameters (a reload) builds its
// ring from its first request, with its own virtual nodes and ε, while the
// in-flight counts it reads (the datastore's) are the same.
func TestC17_VirtualNodesAndReload(t *testing.T) {
	scored, loads := loaded(10)
	old := newPicker(t, nil)
	req := chat("m", "sys", "u")
	old.Pick(t.Context(), req, scored)
	if got := old.rings.Ring().Points(); got != 10*DefaultVirtualNodes {
		t.Errorf("ring points = %d, want 10 × 150", got)
	}
	for _, l := range loads {
		l.InFlightN.Store(3)
	}
	reloaded := newPicker(t, func(p *Params) { p.VirtualNodes = 40; p.LoadFactorEpsilon = 0 })
	if reloaded.rings.Ring().Members() != 0 {
		t.Fatal("a new instance starts without a ring")
	}
	reloaded.Pick(t.Context(), req, scored)
	if got := reloaded.rings.Ring().Points(); got != 10*40 {
		t.Errorf("reloaded ring points = %d, want 10 × 40", got)
	}
	if reloaded.rings.Builds() != 1 {
		t.Errorf("builds = %d", reloaded.rings.Builds())
	}
	for i, l := range loads {
		if l.InFlight() != 3 {
			t.Errorf("endpoint %d in flight = %d after the reload, want 3", i, l.InFlight())
		}
	}
	// ε applies from the next request: all at 3, total 30, N 10: ε=0
	// gives bound ceil(31/10) = 4, so every endpoint has room and the key
	// keeps its ring endpoint; raise one to 4 and it must move.
	home := reloaded.Pick(t.Context(), req, scored).Targets[0]
	hi := slices.IndexFunc(scored, func(s scheduling.ScoredEndpoint) bool { return s.Endpoint == home })
	loads[hi].InFlightN.Store(4) // total 31: bound ceil(32/10) = 4: full
	if got := reloaded.Pick(t.Context(), req, scored).Targets[0]; got == home {
		t.Error("ε=0: the endpoint at the bound took the request")
	}
	if got := old.Pick(t.Context(), req, scored).Targets[0]; got != old.Pick(t.Context(), req, scored).Targets[0] {
		t.Error("the old instance is not deterministic")
	}
}

// TestRingOverThePool: one ring over the pool; subsets of it (filters
// that vary per request) build nothing more and pick exactly what a ring
// of the subset alone would; a new endpoint rebuilds once; a closed
// instance caches nothing.
func TestRingOverThePool(t *testing.T) {
	scored, loads := loaded(30)
	for i, l := range loads {
		l.InFlightN.Store(int64(i % 4))
	}
	pk := newPicker(t, func(p *Params) { p.MaxNumOfEndpoints = 3 })
	pk.Pick(t.Context(), chat("m", "s", "u"), scored)
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 60 {
		k := 1 + rng.IntN(len(scored))
		sub := make([]scheduling.ScoredEndpoint, k)
		for i, j := range rng.Perm(len(scored))[:k] {
			sub[i] = scored[j]
		}
		fresh := newPicker(t, func(p *Params) { p.MaxNumOfEndpoints = 3 })
		for i := range 10 {
			req := chat("m", fmt.Sprintf("s%d", i), "u")
			if i%3 == 0 {
				req = &scheduling.Request{Model: fmt.Sprint("m", i)} // the model-hash fallback
			}
			got := schedulingtest.Names(pk.Pick(t.Context(), req, sub).Targets)
			want := schedulingtest.Names(fresh.Pick(t.Context(), req, sub).Targets)
			if !slices.Equal(got, want) {
				t.Fatalf("trial %d (%d candidates), request %d: pool ring %v, the subset's own ring %v", trial, k, i, got, want)
			}
		}
	}
	if got := pk.rings.Builds(); got != 1 {
		t.Errorf("builds after 60 subsets = %d, want 1", got)
	}
	grown := append(slices.Clone(scored), scheduling.ScoredEndpoint{Endpoint: schedulingtest.Endpoint("new").Build()})
	pk.Pick(t.Context(), chat("m", "s", "u"), grown)
	pk.Pick(t.Context(), chat("m", "s", "u"), scored)
	if got, m := pk.rings.Builds(), pk.rings.Ring().Members(); got != 2 || m != 31 {
		t.Errorf("after a new endpoint: builds %d, members %d; want 2, 31", got, m)
	}
	pk.Close(scheduling.CloseInfo{})
	before := pk.rings.Builds()
	pk.Pick(t.Context(), chat("m", "s", "u"), scored)
	if pk.rings.Builds() != before+1 || pk.rings.Ring().Members() != 0 {
		t.Error("a closed instance must build uncached rings")
	}
}

// TestWalkVisitsEachEndpointOnce: the bounded walk visits each candidate
// once however many virtual nodes it has: with every candidate but one at
// the bound the pick is that one, and fallbacks are distinct.
func TestWalkVisitsEachEndpointOnce(t *testing.T) {
	scored, loads := loaded(6)
	pk := newPicker(t, func(p *Params) { p.MaxNumOfEndpoints = 6; p.LoadFactorEpsilon = 0 })
	// Loads 5, 5, 5, 5, 5, 0: total 25, bound ceil(26/6) = 5: only ep-5
	// is under it.
	for i, l := range loads {
		l.InFlightN.Store(5)
		if i == 5 {
			l.InFlightN.Store(0)
		}
	}
	for i := range 50 {
		res := pk.Pick(t.Context(), chat("m", fmt.Sprintf("s%d", i), "u"), scored)
		names := schedulingtest.Names(res.Targets)
		if names[0] != "ep-5" {
			t.Fatalf("key %d: primary %s, want ep-5, the only one under the bound", i, names[0])
		}
		if len(names) != 6 || len(slices.Compact(slices.Sorted(slices.Values(names)))) != 6 {
			t.Fatalf("key %d: targets %v, want the six candidates once each", i, names)
		}
	}
}

// TestC52_PrefixRoutingMetrics: the guide's three series, with their
// strategy and backend labels, deleted when the instance is dropped.
func TestC52_PrefixRoutingMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	clock := time.Unix(1_700_000_000, 0)
	pk, err := newWithClock("p", DefaultParams(), handleWith(reg, logr.Discard()), func() time.Time { return clock })
	if err != nil {
		t.Fatal(err)
	}
	scored, loads := loaded(4)
	for i := range 100 {
		pk.Pick(t.Context(), chat("m", fmt.Sprintf("s%d", i%40), "u"), scored)
	}
	pk.Pick(t.Context(), &scheduling.Request{Model: "m"}, scored) // no key
	// Overflow: fill the key's endpoint.
	req := chat("m", "hot", "u")
	home := pk.Pick(t.Context(), req, scored).Targets[0]
	hi := slices.IndexFunc(scored, func(s scheduling.ScoredEndpoint) bool { return s.Endpoint == home })
	loads[hi].InFlightN.Store(5)
	pk.Pick(t.Context(), req, scored)
	want := map[string]float64{StrategyPrefixHash: 101, StrategyBoundedOverflow: 1, StrategyModelHashFallback: 1}
	for s, v := range want {
		if got := counter(t, reg, RequestsMetric, map[string]string{"picker": "p", "strategy": s}); got != v {
			t.Errorf("%s{strategy=%q} = %v, want %v", RequestsMetric, s, got, v)
		}
	}
	total := 0.0
	for _, e := range scored {
		total += gauge(t, reg, DistributionMetric, map[string]string{"picker": "p", "backend": e.Endpoint.Name()})
	}
	if total != 103 {
		t.Errorf("backend distribution sums to %v, want 103", total)
	}
	// 41 distinct keys in the current window (none completed yet).
	if got := gauge(t, reg, CardinalityMetric, map[string]string{"picker": "p"}); got < 39 || got > 43 {
		t.Errorf("cardinality = %v, want about 41", got)
	}
	clock = clock.Add(CardinalityWindow)
	for i := range 10 {
		pk.Pick(t.Context(), chat("m", fmt.Sprintf("new%d", i), "u"), scored)
	}
	if got := gauge(t, reg, CardinalityMetric, map[string]string{"picker": "p"}); got < 39 || got > 43 {
		t.Errorf("cardinality after the window = %v, want the completed window's ~41", got)
	}
	clock = clock.Add(CardinalityWindow)
	if got := gauge(t, reg, CardinalityMetric, map[string]string{"picker": "p"}); got != 10 {
		t.Errorf("cardinality of the last window = %v, want 10", got)
	}
	clock = clock.Add(2 * CardinalityWindow)
	if got := gauge(t, reg, CardinalityMetric, map[string]string{"picker": "p"}); got != 0 {
		t.Errorf("cardinality after an idle window = %v, want 0", got)
	}
	// A successor keeps the series; a plain drop deletes them.
	pk.Close(scheduling.CloseInfo{Successor: true})
	if n := series(t, reg, RequestsMetric); n != 3 {
		t.Errorf("after a close with successor: %d request series, want 3", n)
	}
	if n := series(t, reg, CardinalityMetric); n != 0 {
		t.Errorf("the closed instance's sketch is still reported")
	}
	pk2, err := New("p", DefaultParams(), handleWith(reg, logr.Discard()))
	if err != nil {
		t.Fatal("a second instance on the registry must reuse the collectors:", err)
	}
	pk2.Close(scheduling.CloseInfo{})
	for _, name := range []string{RequestsMetric, DistributionMetric, CardinalityMetric} {
		if n := series(t, reg, name); n != 0 {
			t.Errorf("%s: %d series left after the instance was dropped", name, n)
		}
	}
	if got := Strategies(); !slices.Equal(got, []string{"prefix_hash", "bounded_overflow", "model_hash_fallback"}) {
		t.Errorf("Strategies() = %v", got)
	}
}

// TestSketch checks the HyperLogLog estimate within 3 standard errors.
func TestSketch(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 10, 100, 1000, 10000, 100000} {
		s := &sketch{}
		for range n {
			h := rng.Uint64()
			s.add(h)
			s.add(h) // duplicates do not count
		}
		got := s.estimate()
		tol := 3 * 1.04 / 32 * float64(n)
		if d := got - float64(n); d > tol+1 || d < -tol-1 {
			t.Errorf("estimate of %d distinct = %v (tolerance %.0f)", n, got, tol)
		}
	}
}

func TestPickConcurrent(t *testing.T) {
	scored, loads := loaded(16)
	pk := newPicker(t, func(p *Params) { p.MaxNumOfEndpoints = 2 })
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 300 {
				sub := scored[:8+(i+g)%8]
				res := pk.Pick(t.Context(), chat("m", fmt.Sprintf("s%d", i%13), "u"), sub)
				if len(res.Targets) != 2 {
					t.Errorf("targets = %d", len(res.Targets))
					return
				}
				loads[i%16].InFlightN.Add(1)
			}
		})
	}
	wg.Wait()
}

// counter returns a counter's value by its labels, 0 when absent.
func counter(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	m := find(t, g, name, labels)
	if m == nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

func gauge(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	m := find(t, g, name, labels)
	if m == nil {
		return 0
	}
	return m.GetGauge().GetValue()
}

func series(t *testing.T, g prometheus.Gatherer, name string) int {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return len(f.GetMetric())
		}
	}
	return 0
}

func find(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) *dto.Metric {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue next
				}
			}
			return m
		}
	}
	return nil
}

// TestFallbacksOnlyNotAPick: a call that only orders the fallbacks (the
// strategy-picker's scorers chose the primary) is not counted: no request
// or backend series moves and its prefix does not enter the cardinality
// estimate; the order it returns is the pick's.
func TestFallbacksOnlyNotAPick(t *testing.T) {
	reg := prometheus.NewRegistry()
	clock := time.Unix(1_700_000_000, 0)
	p := DefaultParams()
	p.MaxNumOfEndpoints = 3
	pk, err := newWithClock("p", p, handleWith(reg, logr.Discard()), func() time.Time { return clock })
	if err != nil {
		t.Fatal(err)
	}
	scored, _ := loaded(5)
	fb := scheduling.PickInfo{FallbacksOnly: true}
	for i := range 20 {
		req := chat("m", fmt.Sprintf("s%d", i), "u")
		order := pk.PickInProfile(t.Context(), req, scored, fb)
		if len(order.Targets) != 3 {
			t.Fatalf("fallbacks-only call ordered %v", schedulingtest.Names(order.Targets))
		}
		if got, want := schedulingtest.Names(order.Targets), schedulingtest.Names(pk.Pick(t.Context(), req, scored).Targets); !slices.Equal(got, want) {
			t.Fatalf("fallbacks-only order %v, the pick's %v", got, want)
		}
	}
	pk.PickInProfile(t.Context(), &scheduling.Request{Model: "m"}, scored, fb) // no key
	if got := counter(t, reg, RequestsMetric, map[string]string{"picker": "p", "strategy": StrategyPrefixHash}); got != 20 {
		t.Errorf("%s{strategy=%q} = %v, want 20 (the picks only)", RequestsMetric, StrategyPrefixHash, got)
	}
	if got := counter(t, reg, RequestsMetric, map[string]string{"picker": "p", "strategy": StrategyModelHashFallback}); got != 0 {
		t.Errorf("%s{strategy=%q} = %v, want 0", RequestsMetric, StrategyModelHashFallback, got)
	}
	sum := 0.0
	for _, e := range scored {
		sum += gauge(t, reg, DistributionMetric, map[string]string{"picker": "p", "backend": e.Endpoint.Name()})
	}
	if sum != 20 {
		t.Errorf("backend distribution sums to %v, want 20", sum)
	}
	// Fallbacks-only calls with new prefixes add nothing to the estimate.
	for i := range 30 {
		pk.PickInProfile(t.Context(), chat("m", fmt.Sprintf("other%d", i), "u"), scored, fb)
	}
	if got := gauge(t, reg, CardinalityMetric, map[string]string{"picker": "p"}); got < 19 || got > 21 {
		t.Errorf("cardinality = %v, want about 20 (the picks' prefixes)", got)
	}
}
