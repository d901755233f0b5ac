// Package schedulingtest provides builders and fakes for testing plugins
// and the scheduling framework, in the spirit of net/http/httptest. Only
// tests import it.
package schedulingtest

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// EndpointBuilder builds a *scheduling.Endpoint.
type EndpointBuilder struct {
	meta    scheduling.EndpointMetadata
	metrics scheduling.Metrics
	attrs   map[string]any
}

// Endpoint starts an endpoint named name on 127.10.0.1:8000.
func Endpoint(name string) *EndpointBuilder {
	return &EndpointBuilder{
		meta:    scheduling.EndpointMetadata{Name: name, PodName: name, Address: "127.10.0.1", Port: 8000},
		metrics: scheduling.Metrics{UpdateTime: time.Unix(1_700_000_000, 0)},
	}
}

// Address sets the IP address.
func (b *EndpointBuilder) Address(a string) *EndpointBuilder { b.meta.Address = a; return b }

// Port sets the port.
func (b *EndpointBuilder) Port(p int) *EndpointBuilder { b.meta.Port = p; return b }

// Namespace sets the namespace.
func (b *EndpointBuilder) Namespace(ns string) *EndpointBuilder { b.meta.Namespace = ns; return b }

// Site sets the site.
func (b *EndpointBuilder) Site(s string) *EndpointBuilder { b.meta.Site = s; return b }

// Label sets one label.
func (b *EndpointBuilder) Label(k, v string) *EndpointBuilder {
	if b.meta.Labels == nil {
		b.meta.Labels = map[string]string{}
	}
	b.meta.Labels[k] = v
	return b
}

// Queue sets the waiting queue size.
func (b *EndpointBuilder) Queue(n int) *EndpointBuilder { b.metrics.WaitingQueueSize = n; return b }

// Running sets the running requests.
func (b *EndpointBuilder) Running(n int) *EndpointBuilder {
	b.metrics.RunningRequestsSize = n
	return b
}

// KVCache sets the KV cache usage fraction.
func (b *EndpointBuilder) KVCache(f float64) *EndpointBuilder {
	b.metrics.KVCacheUsagePercent = f
	return b
}

// ActiveModels sets the active LoRA adapters.
func (b *EndpointBuilder) ActiveModels(names ...string) *EndpointBuilder {
	b.metrics.ActiveModels = set(names)
	return b
}

// WaitingModels sets the waiting LoRA adapters.
func (b *EndpointBuilder) WaitingModels(names ...string) *EndpointBuilder {
	b.metrics.WaitingModels = set(names)
	return b
}

// MaxModels sets the number of LoRA slots.
func (b *EndpointBuilder) MaxModels(n int) *EndpointBuilder { b.metrics.MaxActiveModels = n; return b }

// BlockSize sets the KV cache block size in tokens.
func (b *EndpointBuilder) BlockSize(n int) *EndpointBuilder { b.metrics.CacheBlockSize = n; return b }

// NumBlocks sets the number of KV cache blocks.
func (b *EndpointBuilder) NumBlocks(n int) *EndpointBuilder { b.metrics.CacheNumBlocks = n; return b }

// UpdateTime sets when the metrics were scraped.
func (b *EndpointBuilder) UpdateTime(t time.Time) *EndpointBuilder {
	b.metrics.UpdateTime = t
	return b
}

// Attr sets a data-layer attribute.
func (b *EndpointBuilder) Attr(name string, v any) *EndpointBuilder {
	if b.attrs == nil {
		b.attrs = map[string]any{}
	}
	b.attrs[name] = v
	return b
}

// Weight sets the endpoint's weight (scheduling.WeightKey).
func (b *EndpointBuilder) Weight(w int) *EndpointBuilder {
	return b.Attr(scheduling.WeightKey.Name(), w)
}

// Load sets the endpoint's live accounting (scheduling.LoadKey).
func (b *EndpointBuilder) Load(l scheduling.EndpointLoad) *EndpointBuilder {
	return b.Attr(scheduling.LoadKey.Name(), l)
}

// Models sets the models the endpoint declares (scheduling.ModelsKey).
func (b *EndpointBuilder) Models(entries ...scheduling.ModelEntry) *EndpointBuilder {
	return b.Attr(scheduling.ModelsKey.Name(), &scheduling.EndpointModels{Entries: entries})
}

// Internal marks the endpoint as reserved for internal callers.
func (b *EndpointBuilder) Internal() *EndpointBuilder {
	return b.Attr(scheduling.InternalKey.Name(), true)
}

// Health sets the endpoint's health state (scheduling.HealthKey).
func (b *EndpointBuilder) Health(h *scheduling.EndpointHealth) *EndpointBuilder {
	return b.Attr(scheduling.HealthKey.Name(), h)
}

// Build returns the endpoint.
func (b *EndpointBuilder) Build() *scheduling.Endpoint {
	return scheduling.NewEndpoint(b.meta, b.metrics, b.attrs)
}

func set(names []string) map[string]int {
	m := make(map[string]int, len(names))
	for _, n := range names {
		m[n] = 1
	}
	return m
}

// Endpoints builds n endpoints named ep-0 … ep-(n-1) on loopback addresses
// 127.10.x.y:8000; configure, if not nil, adjusts each builder.
func Endpoints(n int, configure func(i int, b *EndpointBuilder)) []*scheduling.Endpoint {
	out := make([]*scheduling.Endpoint, n)
	for i := range n {
		b := Endpoint(fmt.Sprintf("ep-%d", i)).Address(fmt.Sprintf("127.10.%d.%d", i/250, i%250+1))
		if configure != nil {
			configure(i, b)
		}
		out[i] = b.Build()
	}
	return out
}

// NewHandle returns a handle with a fixed seed and a fresh registry.
func NewHandle(tb testing.TB) *scheduling.BasicHandle {
	tb.Helper()
	return scheduling.NewHandle(scheduling.HandleOptions{Context: context.Background(), Registerer: prometheus.NewRegistry(), Seed: 1})
}

// Names returns the endpoints' names, in order.
func Names(eps []*scheduling.Endpoint) []string {
	out := make([]string, len(eps))
	for i, e := range eps {
		out[i] = e.Name()
	}
	return out
}

// FakeFilter keeps the endpoints Keep accepts.
type FakeFilter struct {
	Name string
	Keep func(*scheduling.Endpoint) bool
}

// TypedName implements scheduling.Plugin.
func (f *FakeFilter) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: "fake-filter", Name: f.Name}
}

// Filter implements scheduling.Filter.
func (f *FakeFilter) Filter(_ context.Context, _ *scheduling.Request, eps []*scheduling.Endpoint) []*scheduling.Endpoint {
	var out []*scheduling.Endpoint
	for _, e := range eps {
		if f.Keep(e) {
			out = append(out, e)
		}
	}
	return out
}

// FakeScorer gives fixed scores by endpoint name (0 when absent).
type FakeScorer struct {
	Name   string
	Scores map[string]float64
}

// TypedName implements scheduling.Plugin.
func (f *FakeScorer) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: "fake-scorer", Name: f.Name}
}

// Category implements scheduling.Scorer.
func (f *FakeScorer) Category() scheduling.ScorerCategory { return scheduling.Distribution }

// Score implements scheduling.Scorer.
func (f *FakeScorer) Score(_ context.Context, _ *scheduling.Request, eps []*scheduling.Endpoint, scores []float64) {
	for i, e := range eps {
		scores[i] = f.Scores[e.Name()]
	}
}

// FakePicker picks the first endpoint with the highest score (ties go to
// the earliest) and records what it was given.
type FakePicker struct {
	Name string
	Last []scheduling.ScoredEndpoint
}

// TypedName implements scheduling.Plugin.
func (f *FakePicker) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: "fake-picker", Name: f.Name}
}

// Pick implements scheduling.Picker.
func (f *FakePicker) Pick(_ context.Context, _ *scheduling.Request, scored []scheduling.ScoredEndpoint) *scheduling.ProfileResult {
	f.Last = append(f.Last[:0], scored...)
	best := 0
	for i := range scored {
		if scored[i].Score > scored[best].Score {
			best = i
		}
	}
	return &scheduling.ProfileResult{Targets: []*scheduling.Endpoint{scored[best].Endpoint}}
}

var (
	_ scheduling.Filter = (*FakeFilter)(nil)
	_ scheduling.Scorer = (*FakeScorer)(nil)
	_ scheduling.Picker = (*FakePicker)(nil)
)

// Scored returns endpoints named like Endpoints' with the given scores,
// in order, for picker tests.
func Scored(scores ...float64) []scheduling.ScoredEndpoint {
	eps := Endpoints(len(scores), nil)
	out := make([]scheduling.ScoredEndpoint, len(scores))
	for i, e := range eps {
		out[i] = scheduling.ScoredEndpoint{Endpoint: e, Score: scores[i]}
	}
	return out
}

// WithinBinomial fails unless count is within five standard deviations of
// the binomial expectation n·p, for tests of random choices (with a fixed
// seed they are deterministic; the margin keeps them valid for any seed).
func WithinBinomial(t testing.TB, what string, count, n int, p float64) {
	t.Helper()
	mean := float64(n) * p
	sd := math.Sqrt(float64(n) * p * (1 - p))
	if math.Abs(float64(count)-mean) > 5*sd+1e-9 {
		t.Errorf("%s: count %d, want %.0f ± %.0f", what, count, mean, 5*sd)
	}
}

// FakeLoad is an EndpointLoad whose values tests set directly. Its fields
// are atomics, so a test may change them while requests run.
type FakeLoad struct {
	InFlightN, InFlightTokensN atomic.Int64
	ServedN, ErrorsN           atomic.Uint64
	TTFTD, E2ED                atomic.Int64 // nanoseconds
}

// NewFakeLoad returns a FakeLoad with in-flight requests and an end-to-end
// latency average.
func NewFakeLoad(inFlight int64, e2e time.Duration) *FakeLoad {
	l := &FakeLoad{}
	l.InFlightN.Store(inFlight)
	l.E2ED.Store(int64(e2e))
	return l
}

// InFlight implements scheduling.EndpointLoad.
func (l *FakeLoad) InFlight() int64 { return l.InFlightN.Load() }

// InFlightTokens implements scheduling.EndpointLoad.
func (l *FakeLoad) InFlightTokens() int64 { return l.InFlightTokensN.Load() }

// Served implements scheduling.EndpointLoad.
func (l *FakeLoad) Served() uint64 { return l.ServedN.Load() }

// Errors implements scheduling.EndpointLoad.
func (l *FakeLoad) Errors() uint64 { return l.ErrorsN.Load() }

// TTFT implements scheduling.EndpointLoad.
func (l *FakeLoad) TTFT() time.Duration { return time.Duration(l.TTFTD.Load()) }

// E2E implements scheduling.EndpointLoad.
func (l *FakeLoad) E2E() time.Duration { return time.Duration(l.E2ED.Load()) }

var _ scheduling.EndpointLoad = (*FakeLoad)(nil)

// StaticEnv is a scheduling.RunEnv over a fixed endpoint list.
type StaticEnv []*scheduling.Endpoint

// Endpoints implements scheduling.RunEnv.
func (e StaticEnv) Endpoints() []*scheduling.Endpoint { return e }

// Changed implements scheduling.RunEnv: the list never changes.
func (e StaticEnv) Changed() <-chan struct{} { return nil }

// poolRunner is a Runner that reads its pool through
// scheduling.PoolWatcher.
type poolRunner interface {
	Run(ctx context.Context, env scheduling.RunEnv)
	Pool() ([]*scheduling.Endpoint, bool)
}

// RunWithPool runs p, as the host would, over a fixed pool and returns
// once p sees it; the run ends with the test.
func RunWithPool(tb testing.TB, p poolRunner, pool []*scheduling.Endpoint) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Run(ctx, StaticEnv(pool))
	}()
	tb.Cleanup(func() {
		cancel()
		<-done
	})
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, ok := p.Pool(); ok {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatal("the plugin did not take the pool")
		}
		time.Sleep(time.Millisecond)
	}
}
