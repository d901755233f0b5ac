package prefixaffinity

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

// gieDecision models the decision of GIE v1.5's prefix-cache-affinity-filter
// (framework/plugins/scheduling/filter/prefixcacheaffinity) for one request,
// as a list of kept endpoint indices. ratios[i] is endpoint i's prefix
// score, matched / total blocks. draw returns the exploration draw; GIE takes
// it from math/rand after the early exits.
//
// GIE's TTFT load gate reads each endpoint's predicted TTFT, which only its
// latency-predictor sidecar produces. Without predictions GIE's best TTFT
// of any set is math.MaxFloat64, so the gate compares MaxFloat64 −
// MaxFloat64 = 0 with a penalty that is >= 0, and never fires: the model
// keeps that computation to show it.
func gieDecision(threshold, exploration, maxPenaltyMs float64, draw func() float64, ratios []float64) []int {
	all := make([]int, len(ratios))
	for i := range all {
		all[i] = i
	}
	if len(ratios) <= 1 || threshold <= 0 {
		return all
	}
	if draw() < exploration {
		return all
	}
	var sticky, nonSticky []int
	for i, r := range ratios {
		if r >= threshold {
			sticky = append(sticky, i)
		} else {
			nonSticky = append(nonSticky, i)
		}
	}
	if len(sticky) == 0 {
		return all
	}
	if maxPenaltyMs > 0 && len(nonSticky) > 0 {
		noPrediction := math.MaxFloat64 // best TTFT of a set without predictions
		if noPrediction-noPrediction > maxPenaltyMs {
			return all
		}
	}
	return sticky
}

// parityCase is one request: the candidates' matched blocks out of total,
// and their waiting queues and in-flight tokens, which GIE ignores without
// a predictor.
type parityCase struct {
	name     string
	matched  []int
	total    int
	queues   []int
	inflight []int64
}

// run filters the case's request with f and returns the kept indices.
func (c parityCase) run(t *testing.T, f *Filter) []int {
	t.Helper()
	eps := schedulingtest.Endpoints(len(c.matched), func(i int, b *schedulingtest.EndpointBuilder) {
		if i < len(c.queues) {
			b.Queue(c.queues[i])
		}
	})
	req := &scheduling.Request{PromptTokens: 2000}
	hits := scheduling.PrefixHitMap{}
	load := fakeLoad{}
	for i, m := range c.matched {
		hits[eps[i].Key()] = m
		if i < len(c.inflight) {
			load[eps[i].Key()] = c.inflight[i]
		}
	}
	scheduling.PrefixMatchKey.Set(req, &scheduling.PrefixMatch{TotalBlocks: c.total, BlockSizeTokens: 16, Hits: hits})
	scheduling.InFlightLoadKey.Set(req, load)
	kept := f.Filter(t.Context(), req, eps)
	out := make([]int, 0, len(kept))
	for _, e := range kept {
		out = append(out, slices.Index(eps, e))
	}
	return out
}

// ratios returns GIE's prefix scores for the case.
func (c parityCase) ratios() []float64 {
	out := make([]float64, len(c.matched))
	for i, m := range c.matched {
		if c.total > 0 {
			out[i] = float64(m) / float64(c.total)
		}
	}
	return out
}

// newSeededFilter builds the filter from raw parameters on a handle with a
// fixed seed, and returns the random stream the filter draws from, so that
// the GIE model draws the same numbers.
func newSeededFilter(t *testing.T, raw string, seed uint64) (*Filter, *rand.Rand) {
	t.Helper()
	h := scheduling.NewHandle(scheduling.HandleOptions{Seed: seed})
	pl, err := Registration.Factory("affinity", json.RawMessage(raw), h)
	if err != nil {
		t.Fatalf("factory: %v", err)
	}
	twin := scheduling.NewHandle(scheduling.HandleOptions{Seed: seed})
	return pl.(*Filter), twin.Rand("affinity")
}

// TestGIEParity checks that a GIE v1.5 configuration keeps the endpoints
// GIE v1.5 keeps, when GIE runs without a latency predictor (Switchyard has
// none).
func TestGIEParity(t *testing.T) {
	cases := []parityCase{
		{name: "sticky endpoints exist: only they are kept", matched: []int{10, 3, 9, 0, 10}, total: 10},
		{name: "none above the threshold: all are kept", matched: []int{7, 0, 5, 7}, total: 10},
		{name: "no hit at all: all are kept", matched: []int{0, 0, 0}, total: 10},
		{name: "every endpoint sticky", matched: []int{8, 9, 10}, total: 10},
		{name: "prompt not hashed", matched: []int{0, 0}, total: 0},
		{name: "single candidate", matched: []int{0}, total: 10},
		// The sticky endpoint is far more loaded than the others. GIE
		// without a predictor still keeps it alone; the default ttftSource
		// must too.
		{name: "loaded sticky endpoint stays sticky", matched: []int{10, 0, 0}, total: 10,
			queues: []int{10_000, 0, 0}, inflight: []int64{1 << 40, 0, 0}},
	}
	configs := []string{
		`{"explorationProbability": 0}`,
		`{"explorationProbability": 0, "maxTTFTPenaltyMs": 1}`,
		`{"explorationProbability": 0, "maxTTFTPenaltyMs": 0}`,
		`{"explorationProbability": 0, "affinityThreshold": 0.5}`,
		`{"explorationProbability": 0, "affinityThreshold": 1}`,
		`{"explorationProbability": 0, "affinityThreshold": 0}`,
	}
	for _, raw := range configs {
		// GIE's parameters: its defaults, overridden by the configuration.
		gie := DefaultParams()
		if err := json.Unmarshal([]byte(raw), &gie); err != nil {
			t.Fatal(err)
		}
		for _, c := range cases {
			t.Run(raw+"/"+c.name, func(t *testing.T) {
				f, rng := newSeededFilter(t, raw, 7)
				want := gieDecision(gie.AffinityThreshold, gie.ExplorationProbability, gie.MaxTTFTPenaltyMs, rng.Float64, c.ratios())
				if got := c.run(t, f); !slices.Equal(got, want) {
					t.Errorf("kept %v, GIE keeps %v", got, want)
				}
			})
		}
	}
}

// TestGIEParityExploration replays requests through the filter and the GIE
// model with the same seeded stream of draws: each request explores (keeps
// every endpoint) exactly when GIE's would with those draws.
func TestGIEParityExploration(t *testing.T) {
	c := parityCase{matched: []int{0, 10, 2, 9}, total: 10}
	for _, prob := range []float64{0.01, 0.3, 0.5, 1} {
		t.Run(fmt.Sprint(prob), func(t *testing.T) {
			f, rng := newSeededFilter(t, fmt.Sprintf(`{"explorationProbability": %v}`, prob), 42)
			explored := 0
			for i := range 500 {
				want := gieDecision(0.8, prob, 5000, rng.Float64, c.ratios())
				got := c.run(t, f)
				if !slices.Equal(got, want) {
					t.Fatalf("request %d: kept %v, GIE keeps %v", i, got, want)
				}
				if len(got) == len(c.matched) {
					explored++
				}
			}
			if prob < 1 && (explored == 0 || explored == 500) {
				t.Errorf("explored %d of 500 requests with probability %v", explored, prob)
			}
		})
	}
}

// TestGIEParityRandom compares the filter with the GIE model on random
// requests and GIE configurations.
func TestGIEParityRandom(t *testing.T) {
	gen := rand.New(rand.NewPCG(3, 5))
	for i := range 300 {
		threshold := []float64{0, 0.25, 0.5, 0.8, 0.99, 1}[gen.IntN(6)]
		prob := []float64{0, 0.05, 0.5}[gen.IntN(3)]
		penalty := []float64{0, 1, 5000}[gen.IntN(3)]
		raw := fmt.Sprintf(`{"affinityThreshold": %v, "explorationProbability": %v, "maxTTFTPenaltyMs": %v}`, threshold, prob, penalty)
		n := 1 + gen.IntN(12)
		c := parityCase{total: gen.IntN(20), matched: make([]int, n), queues: make([]int, n), inflight: make([]int64, n)}
		for j := range n {
			if c.total > 0 {
				c.matched[j] = gen.IntN(c.total + 1)
			}
			c.queues[j] = gen.IntN(1000)
			c.inflight[j] = gen.Int64N(1 << 30)
		}
		f, rng := newSeededFilter(t, raw, uint64(i)+1)
		for r := range 5 {
			want := gieDecision(threshold, prob, penalty, rng.Float64, c.ratios())
			if got := c.run(t, f); !slices.Equal(got, want) {
				t.Fatalf("case %d request %d (%s, matched %v of %d): kept %v, GIE keeps %v", i, r, raw, c.matched, c.total, got, want)
			}
		}
	}
}
