package prefixaffinity

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

func newFilter(t testing.TB, raw string) *Filter {
	t.Helper()
	var r json.RawMessage
	if raw != "" {
		r = json.RawMessage(raw)
	}
	pl, err := Registration.Factory("affinity", r, schedulingtest.NewHandle(t))
	if err != nil {
		t.Fatalf("factory: %v", err)
	}
	return pl.(*Filter)
}

// wantParams checks the filter's effective parameters.
func wantParams(want Params) func(*testing.T, scheduling.Plugin) {
	return func(t *testing.T, p scheduling.Plugin) {
		if got := p.(*Filter).params; got != want {
			t.Errorf("params = %+v, want %+v", got, want)
		}
	}
}

func TestParams(t *testing.T) {
	def := DefaultParams()
	schedulingtest.RunFactoryCases(t, Registration, []schedulingtest.FactoryCase{
		{Name: "no parameters", Params: "", Check: wantParams(def)},
		{Name: "null", Params: "null", Check: wantParams(def)},
		{Name: "empty object", Params: "{}", Check: wantParams(def)},
		{Name: "all keys", Params: `{"affinityThreshold": 0.99, "explorationProbability": 0, "maxTTFTPenaltyMs": 0, "ttftSource": "prefillThroughput", "peakPrefillThroughput": 8000}`,
			Check: wantParams(Params{AffinityThreshold: 0.99, ExplorationProbability: 0, MaxTTFTPenaltyMs: 0, TTFTSource: TTFTSourcePrefillThroughput, PeakPrefillThroughput: 8000})},
		{Name: "threshold 0 disables", Params: `{"affinityThreshold": 0}`, Check: wantParams(Params{AffinityThreshold: 0, ExplorationProbability: 0.01, MaxTTFTPenaltyMs: 5000, TTFTSource: TTFTSourceNone, PeakPrefillThroughput: 15928})},
		{Name: "ttftSource none", Params: `{"ttftSource": "none"}`, Check: wantParams(def)},
		{Name: "threshold above 1", Params: `{"affinityThreshold": 1.5}`, WantErrs: []string{"affinityThreshold: must be in [0, 1], got 1.5"}},
		{Name: "negative threshold", Params: `{"affinityThreshold": -0.1}`, WantErrs: []string{"affinityThreshold: must be in [0, 1], got -0.1"}},
		{Name: "exploration above 1", Params: `{"explorationProbability": 2}`, WantErrs: []string{"explorationProbability: must be in [0, 1], got 2"}},
		{Name: "negative exploration", Params: `{"explorationProbability": -1}`, WantErrs: []string{"explorationProbability: must be in [0, 1], got -1"}},
		{Name: "negative penalty", Params: `{"maxTTFTPenaltyMs": -5}`, WantErrs: []string{"maxTTFTPenaltyMs: must be >= 0, got -5"}},
		{Name: "zero throughput", Params: `{"peakPrefillThroughput": 0}`, WantErrs: []string{"peakPrefillThroughput: must be > 0, got 0"}},
		{Name: "unknown ttftSource", Params: `{"ttftSource": "prefill"}`, WantErrs: []string{`ttftSource: must be "none" or "prefillThroughput", got "prefill"`}},
		{Name: "empty ttftSource", Params: `{"ttftSource": ""}`, WantErrs: []string{`ttftSource: must be "none" or "prefillThroughput", got ""`}},
		{Name: "ttftSource is case-sensitive", Params: `{"ttftSource": "PrefillThroughput"}`, WantErrs: []string{`ttftSource: must be "none" or "prefillThroughput", got "PrefillThroughput"`}},
		{Name: "llm-d latencyPredictor needs a predictor", Params: `{"ttftSource": "latencyPredictor"}`,
			WantErrs: []string{`ttftSource: "latencyPredictor" needs a latency predictor, which Switchyard does not have; use "none"`}},
		{Name: "ttftSource of the wrong type", Params: `{"ttftSource": 1}`, WantErrs: []string{"ttftSource: expected a string"}},
		{Name: "every problem at once", Params: `{"affinityThreshold": 2, "explorationProbability": -1, "maxTTFTPenaltyMs": -1, "ttftSource": "x", "peakPrefillThroughput": -1}`,
			WantErrs: []string{"affinityThreshold:", "explorationProbability:", "maxTTFTPenaltyMs:", "ttftSource:", "peakPrefillThroughput:"}},
		{Name: "unknown key", Params: `{"threshold": 0.5}`, WantErrs: []string{`unknown field "threshold"`}},
		{Name: "llm-d penaltySource is not supported", Params: `{"penaltySource": "constant"}`, WantErrs: []string{`unknown field "penaltySource"`}},
		{Name: "wrong type", Params: `{"affinityThreshold": "high"}`, WantErrs: []string{"affinityThreshold: expected a number"}},
	})
}

func TestNew(t *testing.T) {
	if _, err := New("x", DefaultParams(), nil); err == nil {
		t.Error("New accepted a nil handle")
	}
	f, err := New("", DefaultParams(), schedulingtest.NewHandle(t))
	if err != nil {
		t.Fatal(err)
	}
	if f.TypedName().Name != Type {
		t.Errorf("default name = %q", f.TypedName().Name)
	}
	if got := f.Consumes(); !slices.Equal(got, []string{scheduling.PrefixMatchKey.Name()}) {
		t.Errorf("Consumes = %v", got)
	}
}

func TestDefaultProducer(t *testing.T) {
	f := newFilter(t, "")
	typ, params, ok := f.DefaultProducer(scheduling.PrefixMatchKey.Name())
	if !ok || typ != "approx-prefix-cache-producer" || params != nil {
		t.Errorf("DefaultProducer(prefix match) = %q, %q, %v; want approx-prefix-cache-producer, nil, true", typ, params, ok)
	}
	for _, key := range []string{scheduling.InFlightLoadKey.Name(), "", "something-else"} {
		if typ, params, ok := f.DefaultProducer(key); ok || typ != "" || params != nil {
			t.Errorf("DefaultProducer(%q) = %q, %q, %v; want nothing", key, typ, params, ok)
		}
	}
}

// fakeLoad reports in-flight tokens by endpoint key.
type fakeLoad map[string]int64

func (f fakeLoad) InFlight(key string) (int64, int64) { return 1, f[key] }

func TestFilter(t *testing.T) {
	const pt = `{"ttftSource": "prefillThroughput"}`
	// ep-0 … ep-4; the match is over 10 blocks.
	type setup struct {
		matched map[int]int // endpoint index → matched blocks
		total   int
		queues  map[int]int // endpoint index → waiting queue
		load    map[int]int64
		tokens  int
	}
	tests := []struct {
		name  string
		raw   string
		n     int
		setup *setup // nil: no prefix match on the request
		want  []int
	}{
		{name: "no prefix match", n: 5, want: []int{0, 1, 2, 3, 4}},
		{name: "prompt not hashed", n: 5, setup: &setup{total: 0}, want: []int{0, 1, 2, 3, 4}},
		{name: "no hit anywhere", n: 5, setup: &setup{total: 10}, want: []int{0, 1, 2, 3, 4}},
		{name: "hits below the threshold", n: 5, setup: &setup{total: 10, matched: map[int]int{1: 7, 3: 5}}, want: []int{0, 1, 2, 3, 4}},
		{name: "sticky endpoints kept in order", n: 5, setup: &setup{total: 10, matched: map[int]int{3: 10, 1: 9, 2: 5}}, want: []int{1, 3}},
		{name: "threshold is inclusive", n: 5, setup: &setup{total: 10, matched: map[int]int{4: 8}}, want: []int{4}},
		{name: "every endpoint sticky", n: 3, setup: &setup{total: 10, matched: map[int]int{0: 10, 1: 10, 2: 9}}, want: []int{0, 1, 2}},
		{name: "single endpoint", n: 1, setup: &setup{total: 10}, want: []int{0}},
		{name: "threshold 0 disables", raw: `{"affinityThreshold": 0}`, n: 3, setup: &setup{total: 10, matched: map[int]int{0: 10}}, want: []int{0, 1, 2}},
		{name: "custom threshold", raw: `{"affinityThreshold": 0.5}`, n: 4, setup: &setup{total: 10, matched: map[int]int{0: 5, 1: 4}}, want: []int{0}},
		// The default ttftSource "none" never breaks stickiness, as GIE
		// v1.5 without a latency predictor.
		{name: "no TTFT gate by default", n: 3,
			setup: &setup{total: 10, matched: map[int]int{0: 10}, queues: map[int]int{0: 100_000}, load: map[int]int64{0: 1 << 40}, tokens: 1000}, want: []int{0}},
		{name: "ttftSource none", raw: `{"ttftSource": "none", "maxTTFTPenaltyMs": 1}`, n: 3,
			setup: &setup{total: 10, matched: map[int]int{0: 10}, queues: map[int]int{0: 100_000}, tokens: 1000}, want: []int{0}},
		// ttftSource "prefillThroughput": a 1000-token prompt at 15928
		// tokens/s; a queue of 100 such prompts is about 6.3 s.
		{name: "loaded sticky endpoint breaks stickiness", raw: pt, n: 3,
			setup: &setup{total: 10, matched: map[int]int{0: 10}, queues: map[int]int{0: 100}, tokens: 1000}, want: []int{0, 1, 2}},
		{name: "moderate load keeps stickiness", raw: pt, n: 3,
			setup: &setup{total: 10, matched: map[int]int{0: 10}, queues: map[int]int{0: 50, 1: 1, 2: 1}, tokens: 1000}, want: []int{0}},
		{name: "penalty 0 always sticks", raw: `{"ttftSource": "prefillThroughput", "maxTTFTPenaltyMs": 0}`, n: 3,
			setup: &setup{total: 10, matched: map[int]int{0: 10}, queues: map[int]int{0: 1000}, tokens: 1000}, want: []int{0}},
		{name: "the best sticky endpoint counts", raw: pt, n: 3,
			setup: &setup{total: 10, matched: map[int]int{0: 10, 1: 10}, queues: map[int]int{0: 1000}, tokens: 1000}, want: []int{0, 1}},
		{name: "in-flight tokens replace the queue", raw: pt, n: 3,
			setup: &setup{total: 10, matched: map[int]int{0: 10}, queues: map[int]int{0: 1000}, load: map[int]int64{0: 1000}, tokens: 1000}, want: []int{0}},
		{name: "in-flight tokens break stickiness", raw: pt, n: 3,
			setup: &setup{total: 10, matched: map[int]int{0: 10}, load: map[int]int64{0: 100_000}, tokens: 1000}, want: []int{0, 1, 2}},
		{name: "token estimate from prompt bytes", raw: `{"ttftSource": "prefillThroughput", "peakPrefillThroughput": 1}`, n: 2,
			setup: &setup{total: 10, matched: map[int]int{0: 10}, queues: map[int]int{0: 2}}, want: []int{0, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw := tt.raw
			if raw == "" {
				raw = `{"explorationProbability": 0}`
			} else {
				raw = strings.TrimSuffix(raw, "}") + `, "explorationProbability": 0}`
			}
			f := newFilter(t, raw)
			var st setup
			if tt.setup != nil {
				st = *tt.setup
			}
			eps := schedulingtest.Endpoints(tt.n, func(i int, b *schedulingtest.EndpointBuilder) { b.Queue(st.queues[i]) })
			req := &scheduling.Request{PromptTokens: st.tokens, Prompt: scheduling.Prompt{Text: []byte(strings.Repeat("x", 40_000))}}
			if tt.setup != nil {
				hits := scheduling.PrefixHitMap{}
				for i, m := range st.matched {
					hits[eps[i].Key()] = m
				}
				pm := &scheduling.PrefixMatch{TotalBlocks: st.total, BlockSizeTokens: 16, Hits: hits}
				scheduling.PrefixMatchKey.Set(req, pm)
				if st.load != nil {
					load := fakeLoad{}
					for i, v := range st.load {
						load[eps[i].Key()] = v
					}
					scheduling.InFlightLoadKey.Set(req, load)
				}
			}
			in := slices.Clone(eps)
			got := f.Filter(t.Context(), req, eps)
			if !slices.Equal(eps, in) {
				t.Error("Filter modified its input")
			}
			var want []*scheduling.Endpoint
			for _, i := range tt.want {
				want = append(want, eps[i])
			}
			if !slices.Equal(got, want) {
				t.Errorf("kept %v, want %v", schedulingtest.Names(got), schedulingtest.Names(want))
			}
		})
	}
}

func TestExploration(t *testing.T) {
	eps := schedulingtest.Endpoints(4, nil)
	req := &scheduling.Request{}
	scheduling.PrefixMatchKey.Set(req, &scheduling.PrefixMatch{TotalBlocks: 4, BlockSizeTokens: 16, Hits: scheduling.PrefixHitMap{eps[2].Key(): 4}})
	tests := []struct {
		name         string
		prob         string
		wantLo, want int // explored requests out of 1000, within [wantLo, want]
	}{
		{name: "never", prob: "0", wantLo: 0, want: 0},
		{name: "always", prob: "1", wantLo: 1000, want: 1000},
		{name: "GIE default", prob: "0.01", wantLo: 1, want: 30},
		{name: "half", prob: "0.5", wantLo: 430, want: 570},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFilter(t, `{"explorationProbability": `+tt.prob+`}`)
			explored := 0
			for range 1000 {
				if len(f.Filter(t.Context(), req, eps)) == len(eps) {
					explored++
				}
			}
			if explored < tt.wantLo || explored > tt.want {
				t.Errorf("explored %d of 1000, want [%d, %d]", explored, tt.wantLo, tt.want)
			}
		})
	}
	t.Run("deterministic for a seed", func(t *testing.T) {
		run := func() []int {
			f := newFilter(t, `{"explorationProbability": 0.3}`)
			var out []int
			for range 50 {
				out = append(out, len(f.Filter(t.Context(), req, eps)))
			}
			return out
		}
		if a, b := run(), run(); !slices.Equal(a, b) {
			t.Errorf("two runs with one seed differ: %v vs %v", a, b)
		}
	})
}

func TestConcurrentFilter(t *testing.T) {
	f := newFilter(t, `{"explorationProbability": 0.2}`)
	eps := schedulingtest.Endpoints(50, func(i int, b *schedulingtest.EndpointBuilder) { b.Queue(i % 7) })
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				req := &scheduling.Request{PromptTokens: 500}
				pm := &scheduling.PrefixMatch{TotalBlocks: 8, BlockSizeTokens: 16, Hits: scheduling.PrefixHitMap{
					eps[(g+i)%len(eps)].Key(): 8, eps[(g*3+i)%len(eps)].Key(): 7,
				}}
				scheduling.PrefixMatchKey.Set(req, pm)
				got := f.Filter(t.Context(), req, eps)
				if len(got) == 0 || len(got) > len(eps) {
					t.Errorf("kept %d endpoints", len(got))
				}
			}
		})
	}
	wg.Wait()
}
