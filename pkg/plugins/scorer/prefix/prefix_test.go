package prefix

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

// blockBytes is one default block (16 tokens × 4 bytes).
const blockBytes = 64

// promptText returns n blocks of text; block i is derived from parts[i]
// when given, so prompts can share leading blocks.
func promptText(parts ...string) []byte {
	var b bytes.Buffer
	for _, p := range parts {
		blk := []byte(strings.Repeat(p+"|", blockBytes/(len(p)+1)+1))[:blockBytes]
		b.Write(blk)
	}
	return b.Bytes()
}

func blocks(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

func newRequest(model string, text []byte) *scheduling.Request {
	return &scheduling.Request{ID: "r", Model: model, TargetModel: model, Prompt: scheduling.Prompt{Text: text}}
}

func resultFor(targets ...*scheduling.Endpoint) *scheduling.Result {
	return &scheduling.Result{
		ProfileResults: map[string]*scheduling.ProfileResult{"default": {Targets: targets}},
		PrimaryProfile: "default",
	}
}

func newProducer(t testing.TB, raw string) *Producer {
	t.Helper()
	var r json.RawMessage
	if raw != "" {
		r = json.RawMessage(raw)
	}
	pl, err := ProducerRegistration.Factory(ProducerType, r, schedulingtest.NewHandle(t))
	if err != nil {
		t.Fatalf("factory: %v", err)
	}
	return pl.(*Producer)
}

func newScorer(t testing.TB, raw string) *Scorer {
	t.Helper()
	var r json.RawMessage
	if raw != "" {
		r = json.RawMessage(raw)
	}
	pl, err := ScorerRegistration.Factory(ScorerType, r, schedulingtest.NewHandle(t))
	if err != nil {
		t.Fatalf("factory: %v", err)
	}
	return pl.(*Scorer)
}

// route schedules req to target through the producer: Produce, then
// PreRequest.
func route(p *Producer, req *scheduling.Request, candidates []*scheduling.Endpoint, target *scheduling.Endpoint) *scheduling.PrefixMatch {
	ctx := context.Background()
	p.Produce(ctx, req, candidates)
	pm, _ := scheduling.PrefixMatchKey.Get(req)
	p.PreRequest(ctx, req, resultFor(target))
	return pm
}

// hitMap returns a match's hits as a map, through Range.
func hitMap(pm *scheduling.PrefixMatch) map[string]int {
	if pm == nil || pm.Hits == nil {
		return nil
	}
	out := map[string]int{}
	pm.Hits.Range(func(k string, b int) bool {
		out[k] = b
		return true
	})
	return out
}

// matchMap runs match and returns its hits as a map, nil without a hit.
func matchMap(x *index, hashes []uint64) map[string]int {
	h, ok := x.match(hashes)
	if !ok {
		return nil
	}
	return hitMap(&scheduling.PrefixMatch{TotalBlocks: len(hashes), Hits: &h})
}

func TestParams(t *testing.T) {
	def := DefaultParams()
	with := func(f func(p *Params)) Params { p := DefaultParams(); f(&p); return p }
	tests := []struct {
		name     string
		raw      string
		want     Params
		wantErrs []string
	}{
		{name: "no parameters", raw: "", want: def},
		{name: "null", raw: "null", want: def},
		{name: "empty object", raw: "{}", want: def},
		{name: "GIE v1.5 keys", raw: `{"autoTune": false, "blockSizeTokens": 32, "maxPrefixBlocksToMatch": 128, "maxPrefixTokensToMatch": 2048, "lruCapacityPerServer": 1000}`,
			want: Params{AutoTune: false, BlockSizeTokens: 32, MaxPrefixBlocksToMatch: 128, MaxPrefixTokensToMatch: 2048, LRUCapacityPerServer: 1000}},
		{name: "GIE v1.0 hashBlockSize is accepted and ignored", raw: `{"hashBlockSize": 64, "maxPrefixBlocksToMatch": 256, "lruCapacityPerServer": 31250}`,
			want: with(func(p *Params) { p.HashBlockSize = 64 })},
		{name: "GIE v1.3 blockSize is accepted and ignored", raw: `{"blockSize": 128, "autoTune": false}`,
			want: with(func(p *Params) { p.BlockSize = 128; p.AutoTune = false })},
		{name: "blockSizeTokens 0 with autoTune", raw: `{"blockSizeTokens": 0}`, want: with(func(p *Params) { p.BlockSizeTokens = 0 })},
		{name: "maxPrefixBlocksToMatch 0 with a token cap", raw: `{"maxPrefixBlocksToMatch": 0, "maxPrefixTokensToMatch": 1024}`,
			want: with(func(p *Params) { p.MaxPrefixBlocksToMatch = 0; p.MaxPrefixTokensToMatch = 1024 })},

		{name: "negative blockSizeTokens", raw: `{"blockSizeTokens": -1}`, wantErrs: []string{"blockSizeTokens: must be >= 0, got -1"}},
		{name: "blockSizeTokens 0 without autoTune", raw: `{"blockSizeTokens": 0, "autoTune": false}`,
			wantErrs: []string{"blockSizeTokens: must be > 0 when autoTune is false, got 0"}},
		{name: "blockSize without blockSizeTokens", raw: `{"blockSize": 64, "blockSizeTokens": 0}`,
			wantErrs: []string{"blockSize: deprecated block size in characters (64) is not converted; set blockSizeTokens > 0 instead"}},
		{name: "hashBlockSize without blockSizeTokens", raw: `{"hashBlockSize": 64, "blockSizeTokens": 0}`,
			wantErrs: []string{"hashBlockSize: deprecated block size in characters (64) is not converted"}},
		{name: "negative blockSize", raw: `{"blockSize": -4}`, wantErrs: []string{"blockSize: must be >= 0, got -4"}},
		{name: "negative hashBlockSize", raw: `{"hashBlockSize": -4}`, wantErrs: []string{"hashBlockSize: must be >= 0, got -4"}},
		{name: "maxPrefixBlocksToMatch 0", raw: `{"maxPrefixBlocksToMatch": 0}`,
			wantErrs: []string{"maxPrefixBlocksToMatch: must be > 0 unless maxPrefixTokensToMatch is set, got 0"}},
		{name: "negative maxPrefixBlocksToMatch", raw: `{"maxPrefixBlocksToMatch": -1}`, wantErrs: []string{"maxPrefixBlocksToMatch: must be >= 0, got -1"}},
		{name: "negative maxPrefixTokensToMatch", raw: `{"maxPrefixTokensToMatch": -1}`, wantErrs: []string{"maxPrefixTokensToMatch: must be >= 0, got -1"}},
		{name: "lruCapacityPerServer 0", raw: `{"lruCapacityPerServer": 0}`, wantErrs: []string{"lruCapacityPerServer: must be > 0, got 0"}},
		{name: "largest sizes", raw: `{"blockSizeTokens": 65536, "maxPrefixBlocksToMatch": 1048576, "maxPrefixTokensToMatch": 1048576, "lruCapacityPerServer": 16777216}`,
			want: with(func(p *Params) {
				p.BlockSizeTokens, p.MaxPrefixBlocksToMatch, p.MaxPrefixTokensToMatch, p.LRUCapacityPerServer = MaxBlockSizeTokens, MaxPrefixBlocks, MaxPrefixTokens, MaxLRUCapacityPerServer
			})},
		{name: "blockSizeTokens too large", raw: `{"blockSizeTokens": 65537}`, wantErrs: []string{"blockSizeTokens: must be <= 65536, got 65537"}},
		{name: "maxPrefixBlocksToMatch too large", raw: `{"maxPrefixBlocksToMatch": 1048577}`, wantErrs: []string{"maxPrefixBlocksToMatch: must be <= 1048576, got 1048577"}},
		{name: "maxPrefixTokensToMatch too large", raw: `{"maxPrefixTokensToMatch": 1048577}`, wantErrs: []string{"maxPrefixTokensToMatch: must be <= 1048576, got 1048577"}},
		{name: "lruCapacityPerServer too large", raw: `{"lruCapacityPerServer": 16777217}`, wantErrs: []string{"lruCapacityPerServer: must be <= 16777216, got 16777217"}},
		{name: "overflowing sizes", raw: `{"blockSizeTokens": 4611686018427387904, "maxPrefixBlocksToMatch": 9223372036854775807, "maxPrefixTokensToMatch": 9223372036854775807, "lruCapacityPerServer": 9223372036854775807}`,
			wantErrs: []string{"blockSizeTokens: must be <= 65536", "maxPrefixBlocksToMatch: must be <= 1048576", "maxPrefixTokensToMatch: must be <= 1048576", "lruCapacityPerServer: must be <= 16777216"}},
		{name: "every problem at once", raw: `{"blockSizeTokens": -1, "maxPrefixTokensToMatch": -5, "lruCapacityPerServer": -2}`,
			wantErrs: []string{"blockSizeTokens: must be >= 0, got -1", "maxPrefixTokensToMatch: must be >= 0, got -5", "lruCapacityPerServer: must be > 0, got -2"}},
		{name: "unknown key", raw: `{"blockSizeToken": 16}`, wantErrs: []string{`unknown field "blockSizeToken"`}},
		{name: "llm-d producer name is not supported", raw: `{"prefixMatchInfoProducerName": "x"}`, wantErrs: []string{`unknown field "prefixMatchInfoProducerName"`}},
		{name: "wrong type", raw: `{"autoTune": "yes"}`, wantErrs: []string{"autoTune: expected a boolean"}},
		{name: "fraction", raw: `{"blockSizeTokens": 1.5}`, wantErrs: []string{"blockSizeTokens: expected an integer"}},
	}
	regs := []scheduling.Registration{ProducerRegistration, ScorerRegistration}
	for _, tt := range tests {
		for _, reg := range regs {
			t.Run(reg.Type+"/"+tt.name, func(t *testing.T) {
				var raw json.RawMessage
				if tt.raw != "" {
					raw = json.RawMessage(tt.raw)
				}
				pl, err := reg.Factory("inst", raw, schedulingtest.NewHandle(t))
				if len(tt.wantErrs) > 0 {
					if err == nil {
						t.Fatalf("no error, want %q", tt.wantErrs)
					}
					leaves := scheduling.Errors(err)
					if len(leaves) != len(tt.wantErrs) {
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
				if got := pl.TypedName(); got != (scheduling.TypedName{Type: reg.Type, Name: "inst"}) {
					t.Errorf("TypedName = %v", got)
				}
				var got Params
				switch x := pl.(type) {
				case *Producer:
					got = x.params
				case *Scorer:
					if err := json.Unmarshal(x.producerParams, &got); err != nil {
						t.Fatal(err)
					}
				}
				if got != tt.want {
					t.Errorf("params = %+v, want %+v", got, tt.want)
				}
			})
		}
	}
}

func TestNewDefaults(t *testing.T) {
	if _, err := NewProducer("x", DefaultParams(), nil); err == nil {
		t.Error("NewProducer accepted a nil handle")
	}
	p, err := NewProducer("", DefaultParams(), schedulingtest.NewHandle(t))
	if err != nil {
		t.Fatal(err)
	}
	if p.TypedName().Name != ProducerType {
		t.Errorf("producer default name = %q", p.TypedName().Name)
	}
	s, err := NewScorer("", DefaultParams(), schedulingtest.NewHandle(t))
	if err != nil {
		t.Fatal(err)
	}
	if s.TypedName().Name != ScorerType {
		t.Errorf("scorer default name = %q", s.TypedName().Name)
	}
	if got := p.Produces(); !slices.Equal(got, []string{scheduling.PrefixMatchKey.Name()}) {
		t.Errorf("Produces = %v", got)
	}
	if got := p.Consumes(); len(got) != 0 {
		t.Errorf("producer Consumes = %v", got)
	}
	if got := s.Consumes(); !slices.Equal(got, []string{scheduling.PrefixMatchKey.Name()}) {
		t.Errorf("scorer Consumes = %v", got)
	}
	if s.Category() != scheduling.Affinity {
		t.Errorf("Category = %v", s.Category())
	}
}

func TestDefaultProducer(t *testing.T) {
	tests := []struct {
		name string
		raw  string
	}{
		{name: "defaults", raw: ""},
		{name: "custom", raw: `{"autoTune": false, "blockSizeTokens": 32, "maxPrefixTokensToMatch": 512, "lruCapacityPerServer": 10}`},
		{name: "deprecated keys survive", raw: `{"hashBlockSize": 64, "blockSize": 64}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newScorer(t, tt.raw)
			if _, _, ok := s.DefaultProducer("something-else"); ok {
				t.Error("DefaultProducer answered for an unrelated key")
			}
			typ, raw, ok := s.DefaultProducer(scheduling.PrefixMatchKey.Name())
			if !ok || typ != ProducerType {
				t.Fatalf("DefaultProducer = %q, %v", typ, ok)
			}
			pl, err := ProducerRegistration.Factory(typ, raw, schedulingtest.NewHandle(t))
			if err != nil {
				t.Fatalf("producer rejects the scorer's parameters %s: %v", raw, err)
			}
			want := DefaultParams()
			if tt.raw != "" {
				if err := scheduling.DecodeParams(json.RawMessage(tt.raw), &want); err != nil {
					t.Fatal(err)
				}
			}
			if got := pl.(*Producer).params; got != want {
				t.Errorf("producer params = %+v, want %+v", got, want)
			}
			raw[0] = 'x' // the caller owns the returned bytes
			if _, again, _ := s.DefaultProducer(scheduling.PrefixMatchKey.Name()); again[0] != '{' {
				t.Error("DefaultProducer returned its internal buffer")
			}
		})
	}
}

func TestHashPrompt(t *testing.T) {
	text := promptText(blocks("a", 10)...)
	base := hashPrompt(nil, "m", "", text, 16, 256)
	tests := []struct {
		name      string
		model     string
		salt      string
		text      []byte
		blockSize int
		maxBlocks int
		wantLen   int
		check     func(t *testing.T, got []uint64)
	}{
		{name: "whole blocks only", model: "m", text: append(slices.Clone(text), "tail"...), blockSize: 16, maxBlocks: 256, wantLen: 10,
			check: func(t *testing.T, got []uint64) {
				if !slices.Equal(got, base) {
					t.Error("a partial trailing block changed the hashes")
				}
			}},
		{name: "shorter than one block", model: "m", text: text[:blockBytes-1], blockSize: 16, maxBlocks: 256, wantLen: 0},
		{name: "exactly one block", model: "m", text: text[:blockBytes], blockSize: 16, maxBlocks: 256, wantLen: 1},
		{name: "truncated to maxBlocks", model: "m", text: text, blockSize: 16, maxBlocks: 4, wantLen: 4,
			check: func(t *testing.T, got []uint64) {
				if !slices.Equal(got, base[:4]) {
					t.Error("truncation changed the leading hashes")
				}
			}},
		{name: "zero block size", model: "m", text: text, blockSize: 0, maxBlocks: 256, wantLen: 0},
		{name: "zero max blocks", model: "m", text: text, blockSize: 16, maxBlocks: 0, wantLen: 0},
		{name: "larger blocks", model: "m", text: text, blockSize: 32, maxBlocks: 256, wantLen: 5},
		{name: "model is part of the chain", model: "other", text: text, blockSize: 16, maxBlocks: 256, wantLen: 10,
			check: func(t *testing.T, got []uint64) {
				for i := range got {
					if got[i] == base[i] {
						t.Errorf("block %d hashes equal across models", i)
					}
				}
			}},
		{name: "salt is part of the chain", model: "m", salt: "tenant-a", text: text, blockSize: 16, maxBlocks: 256, wantLen: 10,
			check: func(t *testing.T, got []uint64) {
				if got[0] == base[0] {
					t.Error("salt did not change the first hash")
				}
			}},
		{name: "equal blocks after different prefixes differ", model: "m", text: promptText("x", "a-1", "a-2"), blockSize: 16, maxBlocks: 256, wantLen: 3,
			check: func(t *testing.T, got []uint64) {
				if got[1] == base[1] || got[2] == base[2] {
					t.Error("hash of a block does not depend on its prefix")
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := hashPrompt(nil, tt.model, tt.salt, tt.text, tt.blockSize, tt.maxBlocks)
			if len(got) != tt.wantLen {
				t.Fatalf("len = %d, want %d", len(got), tt.wantLen)
			}
			if tt.check != nil {
				tt.check(t, got)
			}
		})
	}
}

func TestProduceAndScore(t *testing.T) {
	eps := schedulingtest.Endpoints(4, nil)
	a, b, c := eps[0], eps[1], eps[2]
	p := newProducer(t, `{"autoTune": false}`)
	s := newScorer(t, "")

	// a learns P (8 blocks); b learns Q, which shares P's first 4 blocks.
	pBlocks := blocks("p", 8)
	qBlocks := append(slices.Clone(pBlocks[:4]), blocks("q", 4)...)
	route(p, newRequest("m", promptText(pBlocks...)), eps, a)
	route(p, newRequest("m", promptText(qBlocks...)), eps, b)
	// c learns only the first 2 blocks of P.
	route(p, newRequest("m", promptText(pBlocks[:2]...)), eps, c)

	tests := []struct {
		name        string
		req         *scheduling.Request
		wantTotal   int
		wantMatched map[string]int
		wantScores  []float64
	}{
		{name: "full match", req: newRequest("m", promptText(pBlocks...)), wantTotal: 8,
			wantMatched: map[string]int{a.Key(): 8, b.Key(): 4, c.Key(): 2}, wantScores: []float64{1, 0.5, 0.25, 0}},
		{name: "shared prefix then divergence", req: newRequest("m", promptText(append(slices.Clone(pBlocks[:3]), blocks("z", 1)...)...)), wantTotal: 4,
			wantMatched: map[string]int{a.Key(): 3, b.Key(): 3, c.Key(): 2}, wantScores: []float64{0.75, 0.75, 0.5, 0}},
		{name: "no hit", req: newRequest("m", promptText(blocks("z", 6)...)), wantTotal: 6, wantScores: []float64{0, 0, 0, 0}},
		{name: "other model", req: newRequest("m2", promptText(pBlocks...)), wantTotal: 8, wantScores: []float64{0, 0, 0, 0}},
		{name: "cache salt", req: func() *scheduling.Request {
			r := newRequest("m", promptText(pBlocks...))
			r.Prompt.CacheSalt = "s"
			return r
		}(), wantTotal: 8, wantScores: []float64{0, 0, 0, 0}},
		{name: "short prompt", req: newRequest("m", []byte("hello")), wantTotal: 0, wantScores: []float64{0, 0, 0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p.Produce(t.Context(), tt.req, eps)
			pm, ok := scheduling.PrefixMatchKey.Get(tt.req)
			if !ok {
				t.Fatal("no PrefixMatch on the request")
			}
			if pm.TotalBlocks != tt.wantTotal || pm.BlockSizeTokens != 16 {
				t.Errorf("TotalBlocks, BlockSizeTokens = %d, %d; want %d, 16", pm.TotalBlocks, pm.BlockSizeTokens, tt.wantTotal)
			}
			got := hitMap(pm)
			if len(got) != len(tt.wantMatched) || pm.HitCount() != len(tt.wantMatched) {
				t.Errorf("hits = %v (HitCount %d), want %v", got, pm.HitCount(), tt.wantMatched)
			}
			for i, e := range eps {
				want := tt.wantMatched[e.Key()]
				if got[e.Key()] != want || pm.MatchedBlocks(e) != want {
					t.Errorf("endpoint %d: Range says %d, MatchedBlocks %d; want %d", i, got[e.Key()], pm.MatchedBlocks(e), want)
				}
			}
			scores := make([]float64, len(eps))
			s.Score(t.Context(), tt.req, eps, scores)
			if !slices.Equal(scores, tt.wantScores) {
				t.Errorf("scores = %v, want %v", scores, tt.wantScores)
			}
		})
	}

	t.Run("no prefix match on the request", func(t *testing.T) {
		scores := make([]float64, len(eps))
		s.Score(t.Context(), newRequest("m", nil), eps, scores)
		if !slices.Equal(scores, make([]float64, len(eps))) {
			t.Errorf("scores = %v", scores)
		}
	})
}

func TestMatchCountsLeadingConsecutiveBlocks(t *testing.T) {
	x := newIndex()
	h := []uint64{101, 102, 103, 104}
	x.add("a", []uint64{101, 102, 104}, 100, 0)      // misses block 2
	x.add("b", h, 100, 0)                            // holds everything
	x.add("c", []uint64{102, 103, 104}, 100, 0)      // misses block 0
	x.add("d", []uint64{101, 102, 103, 104}, 100, 0) // same as b: three holders per hash
	x.add("e", []uint64{101}, 100, 0)                // first block only
	got := matchMap(x, h)
	want := map[string]int{"a": 2, "b": 4, "d": 4, "e": 1}
	if len(got) != len(want) {
		t.Fatalf("match = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("match[%s] = %d, want %d", k, got[k], v)
		}
	}
	if got := matchMap(x, []uint64{999, 101}); got != nil {
		t.Errorf("a miss on the first block matched %v", got)
	}
	// The scratch counters are reset between calls.
	if got := matchMap(x, h); got["a"] != 2 || got["b"] != 4 {
		t.Errorf("second match = %v", got)
	}
}

// TestMatchAgainstReference compares match with a direct computation from
// the endpoint LRUs, over random traffic that makes holder sets grow past
// smallSetMax, shrink and get evicted.
func TestMatchAgainstReference(t *testing.T) {
	for _, tc := range []struct {
		endpoints, capacity, prefixes int
	}{
		{endpoints: 5, capacity: 30, prefixes: 3},
		{endpoints: 40, capacity: 40, prefixes: 4},
		{endpoints: 150, capacity: 25, prefixes: 6},
	} {
		t.Run(fmt.Sprintf("endpoints=%d", tc.endpoints), func(t *testing.T) {
			x := newIndex()
			rng := rand.New(rand.NewPCG(uint64(tc.endpoints), 9))
			// chain returns a hash chain: a shared prefix family, a shared
			// length, then a private tail.
			chain := func() []uint64 {
				fam := uint64(rng.IntN(tc.prefixes)) + 1
				shared := 1 + rng.IntN(12)
				out := make([]uint64, 0, shared+4)
				for i := range shared {
					out = append(out, fam<<32|uint64(i))
				}
				tail := rng.Uint64() | 1<<63
				for i := range rng.IntN(4) {
					out = append(out, tail+uint64(i))
				}
				return out
			}
			for round := range 3000 {
				key := fmt.Sprintf("e%d", rng.IntN(tc.endpoints))
				x.add(key, chain(), tc.capacity, 0)
				if round%500 == 499 {
					x.remove(fmt.Sprintf("e%d", rng.IntN(tc.endpoints)))
				}
				if round%10 != 0 {
					continue
				}
				q := chain()
				got := matchMap(x, q)
				want := referenceMatch(x, q)
				if len(got) != len(want) {
					t.Fatalf("round %d: match = %v, want %v", round, got, want)
				}
				for k, v := range want {
					if got[k] != v {
						t.Fatalf("round %d: match[%s] = %d, want %d", round, k, got[k], v)
					}
				}
			}
			checkConsistent(t, x)
		})
	}
}

func TestMatchLargeSets(t *testing.T) {
	x := newIndex()
	const a0, a1, a2, a3, a4, x1 = 10, 11, 12, 13, 14, 20
	key := func(i int) string { return fmt.Sprintf("e%02d", i) }
	for i := range 40 {
		x.add(key(i), []uint64{a0, a1, a2}, 100, 0)
	}
	for i := range 10 {
		x.add(key(i), []uint64{a3}, 100, 0) // ten holders: a list
	}
	for i := range 2 {
		x.add(key(i), []uint64{a4}, 100, 0) // two holders: packed
	}
	for i := 40; i < 60; i++ {
		x.add(key(i), []uint64{x1}, 100, 0) // a bitset that shares no endpoint with a0
	}
	for _, q := range [][]uint64{
		{a0, a1, a2, a3, a4},
		{a0, x1},
		{a0, a1, a2, 999},
		{a0, a1, a2},
	} {
		got, want := matchMap(x, q), referenceMatch(x, q)
		if len(got) != len(want) {
			t.Fatalf("match(%v) = %v, want %v", q, got, want)
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("match(%v)[%s] = %d, want %d", q, k, got[k], v)
			}
		}
	}
	if got := matchMap(x, []uint64{a0, a1, a2, a3, a4}); got[key(0)] != 5 || got[key(5)] != 4 || got[key(30)] != 3 {
		t.Errorf("match = %v", got)
	}

	// Shrinking an endpoint's capacity evicts its oldest entries.
	x.add(key(0), []uint64{a0}, 2, 0)
	if l := x.endpoint(key(0), false); l.pos.len() != 2 {
		t.Errorf("after shrinking to 2 the LRU holds %d", l.pos.len())
	}
	checkConsistent(t, x)
}

// referenceMatch counts, for every endpoint holding the first hash, the
// leading hashes its LRU holds.
func referenceMatch(x *index, hashes []uint64) map[string]int {
	var out map[string]int
	for _, l := range x.ids.Load().byID {
		if l == nil {
			continue
		}
		l.mu.Lock()
		n := 0
		for n < len(hashes) {
			if _, ok := l.pos.get(hashes[n]); !ok {
				break
			}
			n++
		}
		l.mu.Unlock()
		if n > 0 {
			if out == nil {
				out = map[string]int{}
			}
			out[l.key] = n
		}
	}
	return out
}

func TestAutoTune(t *testing.T) {
	text := promptText(blocks("p", 8)...) // 512 bytes
	tests := []struct {
		name          string
		raw           string
		first         func(b *schedulingtest.EndpointBuilder)
		wantBlockSize int
		wantTotal     int
		wantCapacity  int
	}{
		{name: "engine block size and capacity", raw: "", first: func(b *schedulingtest.EndpointBuilder) { b.BlockSize(32).NumBlocks(3) },
			wantBlockSize: 32, wantTotal: 4, wantCapacity: 3},
		{name: "metrics unknown", raw: `{"lruCapacityPerServer": 5}`, wantBlockSize: 16, wantTotal: 8, wantCapacity: 5},
		{name: "autoTune off ignores metrics", raw: `{"autoTune": false, "lruCapacityPerServer": 6}`, first: func(b *schedulingtest.EndpointBuilder) { b.BlockSize(32).NumBlocks(3) },
			wantBlockSize: 16, wantTotal: 8, wantCapacity: 6},
		{name: "token cap uses the tuned block size", raw: `{"maxPrefixTokensToMatch": 64}`, first: func(b *schedulingtest.EndpointBuilder) { b.BlockSize(32) },
			wantBlockSize: 32, wantTotal: 2, wantCapacity: 31250},
		{name: "block cap", raw: `{"maxPrefixBlocksToMatch": 3}`, wantBlockSize: 16, wantTotal: 3, wantCapacity: 31250},
		{name: "blockSizeTokens 0 and no engine block size", raw: `{"blockSizeTokens": 0}`, wantBlockSize: 0, wantTotal: 0, wantCapacity: 31250},
		{name: "engine sizes beyond the limits", raw: "", first: func(b *schedulingtest.EndpointBuilder) { b.BlockSize(MaxBlockSizeTokens + 1).NumBlocks(1 << 40) },
			wantBlockSize: 16, wantTotal: 8, wantCapacity: MaxLRUCapacityPerServer},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eps := schedulingtest.Endpoints(2, func(i int, b *schedulingtest.EndpointBuilder) {
				if i == 0 && tt.first != nil {
					tt.first(b)
				}
			})
			p := newProducer(t, tt.raw)
			pm := route(p, newRequest("m", text), eps, eps[0])
			if pm.BlockSizeTokens != tt.wantBlockSize || pm.TotalBlocks != tt.wantTotal {
				t.Errorf("block size, total = %d, %d; want %d, %d", pm.BlockSizeTokens, pm.TotalBlocks, tt.wantBlockSize, tt.wantTotal)
			}
			l := p.idx.endpoint(eps[0].Key(), false)
			if tt.wantTotal == 0 {
				if l != nil {
					t.Error("an unhashed prompt created index state")
				}
				return
			}
			if l == nil {
				t.Fatal("target not in the index")
			}
			if l.capacity != tt.wantCapacity {
				t.Errorf("capacity = %d, want %d", l.capacity, tt.wantCapacity)
			}
			if want := min(tt.wantTotal, tt.wantCapacity); l.pos.len() != want {
				t.Errorf("entries = %d, want %d", l.pos.len(), want)
			}
			checkConsistent(t, p.idx)
		})
	}
}

func TestEvictionKeepsLeadingBlocks(t *testing.T) {
	p := newProducer(t, `{"autoTune": false, "lruCapacityPerServer": 4}`)
	eps := schedulingtest.Endpoints(1, nil)
	text := promptText(blocks("p", 6)...)
	route(p, newRequest("m", text), eps, eps[0])
	// Six blocks into four slots: the two tail blocks go, the head stays
	// matchable.
	req := newRequest("m", text)
	p.Produce(t.Context(), req, eps)
	pm, _ := scheduling.PrefixMatchKey.Get(req)
	if got := pm.MatchedBlocks(eps[0]); got != 4 {
		t.Errorf("matched = %d, want 4", got)
	}
	if p.IndexSize() != 4 {
		t.Errorf("IndexSize = %d, want 4", p.IndexSize())
	}
	checkConsistent(t, p.idx)
}

// lruOrder returns an endpoint's hashes from the most to the least
// recently used, the order in which they are evicted last to first.
func lruOrder(t *testing.T, x *index, key string) []uint64 {
	t.Helper()
	l := x.endpoint(key, false)
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []uint64
	for i := l.head; i != noNode; i = l.nodes[i].next {
		out = append(out, l.nodes[i].hash)
	}
	return out
}

// TestEvictionOrder pins the order in which an endpoint's blocks are
// evicted. A prompt's blocks are inserted last block first, so its head
// ends up most recently used and its tail is evicted first. GIE v1.5
// inserts the first block first and so evicts the head first, after which
// its match (which starts at block 0) finds nothing of the prompt.
func TestEvictionOrder(t *testing.T) {
	x := newIndex()
	const capacity = 6
	step := func(name string, hashes []uint64, wantOrder []uint64) {
		t.Helper()
		x.add("a", hashes, capacity, 0)
		if got := lruOrder(t, x, "a"); !slices.Equal(got, wantOrder) {
			t.Errorf("%s: LRU order (most recent first) = %v, want %v", name, got, wantOrder)
		}
	}
	step("first prompt", []uint64{1, 2, 3, 4}, []uint64{1, 2, 3, 4})
	// Four more blocks into two free slots: the first prompt's last two
	// blocks go, 4 before 3.
	step("second prompt", []uint64{11, 12, 13, 14}, []uint64{11, 12, 13, 14, 1, 2})
	if got := matchMap(x, []uint64{1, 2, 3, 4}); got["a"] != 2 {
		t.Errorf("first prompt matches %v, want a: 2 (its head)", got)
	}
	if got := matchMap(x, []uint64{11, 12, 13, 14}); got["a"] != 4 {
		t.Errorf("second prompt matches %v, want a: 4", got)
	}
	// Sending the first prompt's head again makes it the most recent; the
	// next eviction takes the second prompt's tail.
	step("head again", []uint64{1, 2}, []uint64{1, 2, 11, 12, 13, 14})
	step("one new block", []uint64{21}, []uint64{21, 1, 2, 11, 12, 13})
	if got := matchMap(x, []uint64{11, 12, 13, 14}); got["a"] != 3 {
		t.Errorf("second prompt matches %v, want a: 3", got)
	}
	// A prompt longer than the capacity keeps its leading blocks.
	step("long prompt", []uint64{31, 32, 33, 34, 35, 36, 37, 38}, []uint64{31, 32, 33, 34, 35, 36})
	if got := matchMap(x, []uint64{31, 32, 33, 34, 35, 36, 37, 38}); got["a"] != 6 {
		t.Errorf("long prompt matches %v, want a: 6", got)
	}
	checkConsistent(t, x)
}

func TestPreRequestTargets(t *testing.T) {
	eps := schedulingtest.Endpoints(3, nil)
	decode, prefill, other := eps[0], eps[1], eps[2]
	text := promptText(blocks("p", 4)...)
	tests := []struct {
		name    string
		result  *scheduling.Result
		learned []string
	}{
		{name: "primary target only", result: resultFor(decode, other), learned: []string{decode.Key()}},
		{name: "prefill profile too", result: &scheduling.Result{
			ProfileResults: map[string]*scheduling.ProfileResult{"decode": {Targets: []*scheduling.Endpoint{decode}}, "prefill": {Targets: []*scheduling.Endpoint{prefill}}},
			PrimaryProfile: "decode",
		}, learned: []string{decode.Key(), prefill.Key()}},
		{name: "failed prefill profile", result: &scheduling.Result{
			ProfileResults: map[string]*scheduling.ProfileResult{"decode": {Targets: []*scheduling.Endpoint{decode}}, "prefill": nil},
			PrimaryProfile: "decode",
		}, learned: []string{decode.Key()}},
		{name: "no targets", result: &scheduling.Result{ProfileResults: map[string]*scheduling.ProfileResult{"default": nil}, PrimaryProfile: "default"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newProducer(t, "")
			req := newRequest("m", text)
			p.Produce(t.Context(), req, eps)
			p.PreRequest(t.Context(), req, tt.result)
			got := p.idx.keys()
			slices.Sort(got)
			want := slices.Clone(tt.learned)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("learned %v, want %v", got, want)
			}
			// A second PreRequest for the same request is a no-op.
			before := p.IndexSize()
			p.PreRequest(t.Context(), req, resultFor(other))
			if p.IndexSize() != before {
				t.Error("PreRequest ran twice for one request")
			}
		})
	}
	t.Run("without Produce", func(t *testing.T) {
		p := newProducer(t, "")
		p.PreRequest(t.Context(), newRequest("m", text), resultFor(decode))
		if p.IndexSize() != 0 {
			t.Error("PreRequest without Produce changed the index")
		}
	})
}

func TestPruneAndReuse(t *testing.T) {
	p := newProducer(t, `{"autoTune": false}`)
	eps := schedulingtest.Endpoints(3, nil)
	text := promptText(blocks("p", 4)...)
	for _, e := range eps {
		route(p, newRequest("m", text), eps, e)
	}
	if p.IndexSize() != 12 {
		t.Fatalf("IndexSize = %d, want 12", p.IndexSize())
	}
	removed := p.Prune(func(key string) bool { return key != eps[1].Key() })
	if removed != 1 || p.IndexSize() != 8 {
		t.Fatalf("Prune removed %d, size %d; want 1, 8", removed, p.IndexSize())
	}
	checkConsistent(t, p.idx)
	req := newRequest("m", text)
	p.Produce(t.Context(), req, eps)
	pm, _ := scheduling.PrefixMatchKey.Get(req)
	if got := hitMap(pm); len(got) != 2 || got[eps[0].Key()] != 4 || pm.MatchedBlocks(eps[1]) != 0 {
		t.Errorf("after prune hits = %v", got)
	}
	// A new endpoint reuses the freed id without inheriting its entries.
	fresh := schedulingtest.Endpoint("fresh").Build()
	route(p, newRequest("m", promptText(blocks("q", 2)...)), eps, fresh)
	if l := p.idx.endpoint(fresh.Key(), false); l == nil || l.id != 1 {
		t.Errorf("fresh endpoint did not reuse id 1: %+v", l)
	}
	req = newRequest("m", text)
	p.Produce(t.Context(), req, eps)
	pm, _ = scheduling.PrefixMatchKey.Get(req)
	if pm.MatchedBlocks(fresh) != 0 || hitMap(pm)[fresh.Key()] != 0 {
		t.Error("the new endpoint inherited the pruned endpoint's entries")
	}
	checkConsistent(t, p.idx)
	if p.Prune(func(string) bool { return true }) != 0 {
		t.Error("Prune removed an endpoint it was told to keep")
	}
}

func TestStaleEndpointsAreSwept(t *testing.T) {
	p := newProducer(t, "")
	clock := time.Unix(1_700_000_000, 0)
	p.now = func() time.Time { return clock }
	eps := schedulingtest.Endpoints(2, nil)
	text := promptText(blocks("p", 2)...)
	route(p, newRequest("m", text), eps, eps[0])
	route(p, newRequest("m", text), eps, eps[1])

	// Within the interval nothing is sampled; after staleAfter, a request
	// whose candidates no longer include ep-1 sweeps it.
	clock = clock.Add(staleAfter + seenSampleInterval)
	p.Produce(t.Context(), newRequest("m", text), eps[:1])
	got := p.idx.keys()
	if !slices.Equal(got, []string{eps[0].Key()}) {
		t.Errorf("index holds %v after the sweep, want only %s", got, eps[0].Key())
	}
	checkConsistent(t, p.idx)
}

func TestHolderPacking(t *testing.T) {
	x := newIndex()
	const h = 42
	keys := []string{"a", "b", "c", "d", "e"}
	for _, k := range keys {
		x.add(k, []uint64{h}, 10, 0)
		checkConsistent(t, x)
	}
	if got := matchMap(x, []uint64{h}); len(got) != 5 {
		t.Fatalf("match = %v", got)
	}
	for i, k := range keys {
		x.remove(k)
		checkConsistent(t, x)
		if got := matchMap(x, []uint64{h}); len(got) != len(keys)-i-1 {
			t.Fatalf("after removing %s match = %v", k, got)
		}
	}
	s := x.shardOf(h)
	if s.holders.len() != 0 || len(s.overflow) != 0 {
		t.Errorf("shard not empty: %d %v", s.holders.len(), s.overflow)
	}
}

// TestIndexBounded checks on a small scale what BenchmarkIndexBounded shows
// at scale: the index never holds more than endpoints × capacity entries.
func TestIndexBounded(t *testing.T) {
	const endpoints, capacity = 20, 50
	p := newProducer(t, fmt.Sprintf(`{"autoTune": false, "lruCapacityPerServer": %d}`, capacity))
	eps := schedulingtest.Endpoints(endpoints, nil)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 5000 {
		text := promptText(blocks(fmt.Sprintf("r%d", i), 1+rng.IntN(6))...)
		route(p, newRequest("m", text), eps, eps[rng.IntN(endpoints)])
		if p.IndexSize() > endpoints*capacity {
			t.Fatalf("after %d prompts IndexSize = %d > %d", i, p.IndexSize(), endpoints*capacity)
		}
	}
	if p.IndexSize() != endpoints*capacity {
		t.Errorf("IndexSize = %d, want the cap %d", p.IndexSize(), endpoints*capacity)
	}
	checkConsistent(t, p.idx)
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := scheduling.NewHandle(scheduling.HandleOptions{Registerer: reg, Seed: 1})
	pl, err := ProducerRegistration.Factory("p1", json.RawMessage(`{"autoTune": false}`), h)
	if err != nil {
		t.Fatal(err)
	}
	// A second instance on the same registry reuses the collectors.
	pl2, err := ProducerRegistration.Factory("p2", nil, h)
	if err != nil {
		t.Fatalf("second instance: %v", err)
	}
	p, p2 := pl.(*Producer), pl2.(*Producer)
	eps := schedulingtest.Endpoints(2, nil)
	text := promptText(blocks("p", 4)...)
	route(p, newRequest("m", text), eps, eps[0])                              // miss: ratio 0, 0 bytes
	route(p, newRequest("m", text), eps, eps[0])                              // full hit: ratio 1, 256 bytes
	route(p, newRequest("m", promptText(blocks("p", 4)[:2]...)), eps, eps[1]) // chose a non-holder: ratio 0
	// The second instance updates its own gauge, not the first one's. It
	// adds one sample per histogram: a miss.
	route(p2, newRequest("m", promptText(blocks("q", 3)...)), eps, eps[0])
	// A reload builds an instance of the same name again: it reuses the
	// vector and reports under the same label.
	if _, err := ProducerRegistration.Factory("p2", nil, h); err != nil {
		t.Fatalf("reloaded instance: %v", err)
	}

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		got[mf.GetName()] = mf
	}
	// Each instance reports the size of its own index under its name.
	sizes := map[string]float64{}
	for _, m := range got["inference_extension_prefix_indexer_size"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "plugin_name" {
				sizes[l.GetValue()] = m.GetGauge().GetValue()
			}
		}
	}
	if want := map[string]float64{"p1": 6, "p2": 3}; !maps.Equal(sizes, want) {
		t.Errorf("size gauges by plugin_name = %v, want %v", sizes, want)
	}
	ratio := got["inference_extension_prefix_indexer_hit_ratio"]
	if ratio == nil || ratio.GetMetric()[0].GetHistogram().GetSampleCount() != 4 || ratio.GetMetric()[0].GetHistogram().GetSampleSum() != 1 {
		t.Errorf("hit ratio = %v, want 4 samples summing to 1", ratio)
	}
	hitBytes := got["inference_extension_prefix_indexer_hit_bytes"]
	if hitBytes == nil || hitBytes.GetMetric()[0].GetHistogram().GetSampleSum() != 4*blockBytes {
		t.Errorf("hit bytes = %v, want a sum of %d", hitBytes, 4*blockBytes)
	}
}

func TestMetricsConflict(t *testing.T) {
	reg := prometheus.NewRegistry()
	// Something else already owns the name with another type.
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "inference_extension_prefix_indexer_size", Help: "x"}))
	h := scheduling.NewHandle(scheduling.HandleOptions{Registerer: reg, Seed: 1})
	if _, err := ProducerRegistration.Factory("p", nil, h); err == nil {
		t.Error("no error for a conflicting collector")
	}
}

func TestConcurrentUse(t *testing.T) {
	const capacity = 64
	p := newProducer(t, fmt.Sprintf(`{"autoTune": false, "lruCapacityPerServer": %d}`, capacity))
	s := newScorer(t, "")
	eps := schedulingtest.Endpoints(16, nil)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			scores := make([]float64, len(eps))
			for i := range 400 {
				// A few shared system prompts with a varying tail.
				parts := append(blocks(fmt.Sprintf("sys%d", rng.IntN(4)), 1+rng.IntN(6)), blocks(fmt.Sprintf("g%d-%d", g, i), rng.IntN(3))...)
				req := newRequest("m", promptText(parts...))
				p.Produce(t.Context(), req, eps)
				clear(scores)
				s.Score(t.Context(), req, eps, scores)
				for _, v := range scores {
					if v < 0 || v > 1 {
						t.Errorf("score %v out of range", v)
					}
				}
				p.PreRequest(t.Context(), req, resultFor(eps[rng.IntN(len(eps))]))
			}
		})
	}
	wg.Go(func() {
		for i := range 50 {
			drop := eps[i%len(eps)].Key()
			p.Prune(func(key string) bool { return key != drop })
		}
	})
	wg.Wait()
	if p.IndexSize() > len(eps)*capacity {
		t.Errorf("IndexSize = %d > %d", p.IndexSize(), len(eps)*capacity)
	}
	checkConsistent(t, p.idx)
}

// checkConsistent verifies the index invariants: every LRU entry is in the
// reverse map and vice versa, LRU lists match their maps and capacities,
// and size is the sum of the LRUs.
func checkConsistent(t *testing.T, x *index) {
	t.Helper()
	ids := x.ids.Load().byID
	total := 0
	held := map[uint64]map[uint32]bool{}
	for id, l := range ids {
		if l == nil {
			continue
		}
		l.mu.Lock()
		if int(l.id) != id {
			t.Errorf("endpoint %s has id %d at slot %d", l.key, l.id, id)
		}
		if l.pos.len() > l.capacity {
			t.Errorf("endpoint %s holds %d > capacity %d", l.key, l.pos.len(), l.capacity)
		}
		n := 0
		for i := l.head; i != noNode; i = l.nodes[i].next {
			h := l.nodes[i].hash
			if j, _ := l.pos.get(h); j != i {
				t.Errorf("endpoint %s: list and map disagree on %d", l.key, h)
			}
			if held[h] == nil {
				held[h] = map[uint32]bool{}
			}
			held[h][l.id] = true
			n++
		}
		if n != l.pos.len() {
			t.Errorf("endpoint %s: list has %d nodes, map %d", l.key, n, l.pos.len())
		}
		total += n
		l.mu.Unlock()
	}
	if got := x.size.Load(); got != int64(total) {
		t.Errorf("size = %d, sum of LRUs = %d", got, total)
	}
	reverse := 0
	for i := range x.shards {
		s := &x.shards[i]
		s.mu.RLock()
		for h, v := range s.holders.all {
			var hs []uint32
			if v == overflowMark {
				set := s.overflow[h]
				hs = set.appendIDs(nil)
				if len(hs) <= 2 || len(hs) != set.n {
					t.Errorf("hash %d overflows with %d holders, n = %d", h, len(hs), set.n)
				}
				if (set.bits == nil) != (len(set.ids) == set.n) {
					t.Errorf("hash %d: set representation is inconsistent", h)
				}
			} else {
				if v&slotMask == 0 {
					t.Errorf("hash %d has an empty first slot", h)
				}
				for _, slot := range []uint64{v & slotMask, v >> 32} {
					if slot != 0 {
						hs = append(hs, uint32(slot-1))
					}
				}
			}
			for _, id := range hs {
				if !held[h][id] {
					t.Errorf("reverse map says id %d holds %d, its LRU does not", id, h)
				}
				reverse++
			}
		}
		if len(s.overflow) > 0 {
			for h := range s.overflow {
				if v, _ := s.holders.get(h); v != overflowMark {
					t.Errorf("stray overflow entry %d", h)
				}
			}
		}
		s.mu.RUnlock()
	}
	if reverse != total {
		t.Errorf("reverse map has %d entries, LRUs %d", reverse, total)
	}
}
