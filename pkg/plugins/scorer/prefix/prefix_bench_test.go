package prefix

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

// benchPromptBytes is the prompt size of the request-path benchmarks.
const benchPromptBytes = 4096

// benchSetup returns a producer whose index has seen traffic on every
// endpoint, a 4 KB prompt whose first half (a shared system prompt) is held
// by three endpoints and whose whole is held by one, and the endpoints.
func benchSetup(b *testing.B, n int) (*Producer, []byte, []*scheduling.Endpoint) {
	b.Helper()
	p := newProducer(b, `{"autoTune": false}`)
	eps := schedulingtest.Endpoints(n, nil)
	rng := rand.New(rand.NewPCG(3, 4))
	system := promptText(blocks("system", benchPromptBytes/blockBytes/2)...)
	prompt := append(append([]byte(nil), system...), promptText(blocks("user", benchPromptBytes/blockBytes/2)...)...)
	ctx := context.Background()
	// Background traffic: unrelated prompts on every endpoint.
	for i := range max(4*n, 200) {
		text := promptText(blocks("bg"+strconv.Itoa(i), 8)...)
		req := newRequest("m", text)
		p.Produce(ctx, req, eps)
		p.PreRequest(ctx, req, resultFor(eps[rng.IntN(n)]))
	}
	for i := range min(3, n) {
		route(p, newRequest("m", append(append([]byte(nil), system...), promptText(blocks("other"+strconv.Itoa(i), 4)...)...)), eps, eps[(i*7)%n])
	}
	route(p, newRequest("m", prompt), eps, eps[n/2])
	return p, prompt, eps
}

var benchSizes = []int{10, 100, 1000}

// BenchmarkProduce hashes a 4 KB prompt and matches it against a warm index.
func BenchmarkProduce(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			p, prompt, eps := benchSetup(b, n)
			req := newRequest("m", prompt)
			ctx := b.Context()
			b.ReportAllocs()
			for b.Loop() {
				p.Produce(ctx, req, eps)
			}
		})
	}
}

// BenchmarkProduceMiss hashes a 4 KB prompt no endpoint holds.
func BenchmarkProduceMiss(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			p, _, eps := benchSetup(b, n)
			req := newRequest("m", promptText(blocks("cold", benchPromptBytes/blockBytes)...))
			ctx := b.Context()
			b.ReportAllocs()
			for b.Loop() {
				p.Produce(ctx, req, eps)
			}
		})
	}
}

// BenchmarkScore scores the endpoints from a produced match.
func BenchmarkScore(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			p, prompt, eps := benchSetup(b, n)
			s := newScorer(b, "")
			req := newRequest("m", prompt)
			ctx := b.Context()
			p.Produce(ctx, req, eps)
			scores := make([]float64, n)
			b.ReportAllocs()
			for b.Loop() {
				s.Score(ctx, req, eps, scores)
			}
		})
	}
}

// BenchmarkProduceScore is the request-path cost of the pair: Produce then
// Score, 4 KB prompt.
func BenchmarkProduceScore(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			p, prompt, eps := benchSetup(b, n)
			s := newScorer(b, "")
			req := newRequest("m", prompt)
			ctx := b.Context()
			scores := make([]float64, n)
			b.ReportAllocs()
			for b.Loop() {
				p.Produce(ctx, req, eps)
				clear(scores)
				s.Score(ctx, req, eps, scores)
			}
		})
	}
}

// BenchmarkProduceScoreShared is the worst case for the match: every
// endpoint holds the 2 KB system prompt that starts the 4 KB prompt, so
// every endpoint has a hit. The match result is one int32 per endpoint id
// and the scorer resolves the candidates by pointer, so the cost stays
// within a few times that of a request with few hits.
func BenchmarkProduceScoreShared(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			p, prompt, eps := benchSetup(b, n)
			system := prompt[:benchPromptBytes/2]
			for i, e := range eps {
				route(p, newRequest("m", append(append([]byte(nil), system...), promptText(blocks("u"+strconv.Itoa(i), 2)...)...)), eps, e)
			}
			s := newScorer(b, "")
			req := newRequest("m", prompt)
			ctx := b.Context()
			scores := make([]float64, n)
			b.ReportAllocs()
			for b.Loop() {
				p.Produce(ctx, req, eps)
				clear(scores)
				s.Score(ctx, req, eps, scores)
			}
		})
	}
}

// BenchmarkRoute is Produce plus PreRequest for distinct 4 KB prompts
// spread over the endpoints, with lruCapacityPerServer 1024 so the index
// keeps evicting.
func BenchmarkRoute(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			p := newProducer(b, `{"autoTune": false, "lruCapacityPerServer": 1024}`)
			eps := schedulingtest.Endpoints(n, nil)
			text := promptText(blocks("route", benchPromptBytes/blockBytes)...)
			req := newRequest("m", text)
			ctx := b.Context()
			results := make([]*scheduling.Result, n)
			for i, e := range eps {
				results[i] = resultFor(e)
			}
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				i++
				copy(text, strconv.Itoa(i))
				p.Produce(ctx, req, eps)
				p.PreRequest(ctx, req, results[i%n])
			}
		})
	}
}

// BenchmarkProduceParallel matches from all CPUs at once, to show the index
// has no lock that every request contends on.
func BenchmarkProduceParallel(b *testing.B) {
	p, prompt, eps := benchSetup(b, 1000)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req := newRequest("m", prompt)
		ctx := context.Background()
		for pb.Next() {
			p.Produce(ctx, req, eps)
		}
	})
}

// indexBoundedResult is BenchmarkIndexBounded's measurement. The feed does
// not depend on b.N, so it runs once per process.
type indexBoundedResult struct {
	entries, maxEntries, capEntries int
	elapsed                         time.Duration
	prompts                         int
}

var indexBounded = sync.OnceValue(func() indexBoundedResult {
	const (
		endpoints = 100
		capacity  = 500
		prompts   = 1_000_000
	)
	p, err := NewProducer(ProducerType, Params{BlockSizeTokens: 16, MaxPrefixBlocksToMatch: 256, LRUCapacityPerServer: capacity},
		scheduling.NewHandle(scheduling.HandleOptions{Seed: 1}))
	if err != nil {
		panic(err)
	}
	eps := schedulingtest.Endpoints(endpoints, nil)
	results := make([]*scheduling.Result, endpoints)
	for i, e := range eps {
		results[i] = resultFor(e)
	}
	text := promptText(blocks("prompt", 2)...) // the first block is rewritten per prompt
	req := newRequest("m", text)
	ctx := context.Background()
	maxSize := 0
	start := time.Now()
	for i := range prompts {
		copy(text, strconv.Itoa(i))
		p.Produce(ctx, req, eps)
		p.PreRequest(ctx, req, results[i%endpoints])
		if i%1000 == 0 {
			maxSize = max(maxSize, p.IndexSize())
		}
	}
	return indexBoundedResult{
		entries:    p.IndexSize(),
		maxEntries: max(maxSize, p.IndexSize()),
		capEntries: endpoints * capacity,
		elapsed:    time.Since(start),
		prompts:    prompts,
	}
})

// BenchmarkIndexBounded feeds 1,000,000 distinct two-block prompts over 100
// endpoints with lruCapacityPerServer 500 and reports the index size: it
// stays at endpoints × capacity (50,000) however many prompts arrive. The
// feed runs once whatever b.N is; ns/prompt is its cost per routed prompt.
func BenchmarkIndexBounded(b *testing.B) {
	r := indexBounded()
	if r.maxEntries > r.capEntries {
		b.Fatalf("index grew to %d entries, cap is %d", r.maxEntries, r.capEntries)
	}
	b.ReportMetric(float64(r.entries), "entries")
	b.ReportMetric(float64(r.maxEntries), "max-entries")
	b.ReportMetric(float64(r.capEntries), "cap-entries")
	b.ReportMetric(float64(r.elapsed.Nanoseconds())/float64(r.prompts), "ns/prompt")
}
