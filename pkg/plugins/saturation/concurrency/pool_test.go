package concurrency

import (
	"fmt"
	"math"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/plugins/producer/inflightload"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

func newInflight(t testing.TB, p inflightload.Params) *inflightload.Producer {
	t.Helper()
	pr, err := inflightload.New("load", p, schedulingtest.NewHandle(t))
	if err != nil {
		t.Fatal(err)
	}
	return pr
}

func charge(t testing.TB, p *inflightload.Producer, e *scheduling.Endpoint, n int, promptTokens int) {
	t.Helper()
	res := &scheduling.Result{PrimaryProfile: "default", ProfileResults: map[string]*scheduling.ProfileResult{"default": {Targets: []*scheduling.Endpoint{e}}}}
	for range n {
		p.PreRequest(t.Context(), &scheduling.Request{PromptTokens: promptTokens}, res)
	}
}

// TestPoolSaturation: the request-free pool view, with and without the
// producer handed over by the host, in both modes.
func TestPoolSaturation(t *testing.T) {
	t.Parallel()
	hosted := func() []*scheduling.Endpoint {
		loads := []int64{3, 1, 0, 4}
		return schedulingtest.Endpoints(len(loads), func(i int, b *schedulingtest.EndpointBuilder) {
			l := schedulingtest.NewFakeLoad(loads[i], 0)
			l.InFlightTokensN.Store(100 * loads[i])
			b.Load(l)
		})
	}
	tests := []struct {
		name   string
		params string
		eps    func() []*scheduling.Endpoint
		bind   bool
		want   float64
	}{
		{name: "no candidates: saturated", params: `{"maxConcurrency": 4}`, eps: func() []*scheduling.Endpoint { return nil }, want: 1},
		{name: "host accounting, no producer given", params: `{"maxConcurrency": 4}`, eps: hosted, want: 8.0 / 16},
		{name: "host accounting through the producer", params: `{"maxConcurrency": 4}`, eps: hosted, bind: true, want: 8.0 / 16},
		{name: "tokens, host accounting", params: `{"concurrencyMode": "tokens", "maxTokenConcurrency": 200}`, eps: hosted, want: 800.0 / 800},
		{name: "tokens through the producer", params: `{"concurrencyMode": "tokens", "maxTokenConcurrency": 200}`, eps: hosted, bind: true, want: 800.0 / 800},
		{name: "no accounting and no producer: idle", params: `{"maxConcurrency": 4}`, eps: func() []*scheduling.Endpoint { return schedulingtest.Endpoints(3, nil) }, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := mustBuild(t, tt.params)
			if tt.bind {
				d.UseInFlightLoad(newInflight(t, inflightload.DefaultParams()))
			}
			eps := tt.eps()
			if got := d.PoolSaturation(eps); math.Abs(got-tt.want) > 1e-12 {
				t.Errorf("PoolSaturation = %v, want %v", got, tt.want)
			}
			// The documented difference: unbound, Saturation without a
			// producer's view sees every endpoint idle, the pool view the
			// host's counts.
			if !tt.bind && len(eps) > 0 {
				if got := d.Saturation(t.Context(), nil, eps); got != 0 {
					t.Errorf("Saturation without a view = %v, want 0", got)
				}
			}
		})
	}
}

// TestPoolSaturationMatchesPerRequest: for the same state the pool view
// equals Saturation of a request the producer prepared, for endpoints the
// producer counts itself, endpoints the host counts, and llm-d's tokens
// (which only the producer knows); and it needs no Produce: a producer
// that never ran over the candidates gives the same value.
func TestPoolSaturationMatchesPerRequest(t *testing.T) {
	t.Parallel()
	accountings := map[string]inflightload.Params{
		"gie":   inflightload.DefaultParams(),
		"llm-d": {TokenAccounting: inflightload.AccountingLLMD},
	}
	for accName, acc := range accountings {
		for _, mode := range []string{`{"maxConcurrency": 3}`, `{"concurrencyMode": "tokens", "maxTokenConcurrency": 50}`} {
			t.Run(accName+" "+mode, func(t *testing.T) {
				t.Parallel()
				p := newInflight(t, acc)
				d := mustBuild(t, mode)
				d.UseInFlightLoad(p)
				// Two hosted endpoints, two counted by the producer alone.
				eps := schedulingtest.Endpoints(4, func(i int, b *schedulingtest.EndpointBuilder) {
					if i < 2 {
						b.Load(schedulingtest.NewFakeLoad(0, 0))
					}
				})
				for i, e := range eps {
					charge(t, p, e, i+1, 10*(i+1))
					if l, ok := scheduling.LoadKey.Get(e); ok {
						fl := l.(*schedulingtest.FakeLoad)
						fl.InFlightN.Add(int64(i + 1)) // the host counts when it forwards
						fl.InFlightTokensN.Add(int64(25 * (i + 1) * (i + 1)))
					}
				}
				pool := d.PoolSaturation(eps) // before any Produce
				req := &scheduling.Request{}
				p.Produce(t.Context(), req, eps)
				per := d.Saturation(t.Context(), req, eps)
				if per == 0 {
					t.Fatal("the per-request value is 0: the test charges nothing")
				}
				if math.Abs(pool-per) > 1e-12 {
					t.Errorf("PoolSaturation = %v, per-request Saturation = %v", pool, per)
				}
				if again := d.PoolSaturation(eps); math.Abs(again-per) > 1e-12 {
					t.Errorf("PoolSaturation after Produce = %v, want %v", again, per)
				}
			})
		}
	}
}

// TestPoolSaturationFollowsLoad: the pool view is live: it changes with
// the producer's counts and with a producer handed over later.
func TestPoolSaturationFollowsLoad(t *testing.T) {
	t.Parallel()
	d := mustBuild(t, `{"maxConcurrency": 2}`)
	eps := schedulingtest.Endpoints(2, nil)
	if got := d.PoolSaturation(eps); got != 0 {
		t.Fatalf("PoolSaturation = %v with no producer and no accounting, want 0", got)
	}
	p := newInflight(t, inflightload.DefaultParams())
	charge(t, p, eps[0], 2, 8)
	d.UseInFlightLoad(p)
	if got := d.PoolSaturation(eps); got != 0.5 {
		t.Errorf("PoolSaturation = %v, want 2/4", got)
	}
	charge(t, p, eps[1], 2, 8)
	if got := d.PoolSaturation(eps); got != 1 {
		t.Errorf("PoolSaturation = %v, want 4/4", got)
	}
	d.UseInFlightLoad(nil)
	if got := d.PoolSaturation(eps); got != 0 {
		t.Errorf("PoolSaturation = %v after the producer was taken away, want 0", got)
	}
}

func BenchmarkPoolSaturation(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			d, eps, _ := loaded(b, n)
			p := newInflight(b, inflightload.DefaultParams())
			for i, e := range eps {
				charge(b, p, e, i%10, 100)
			}
			d.UseInFlightLoad(p)
			b.ReportAllocs()
			for b.Loop() {
				d.PoolSaturation(eps)
			}
		})
	}
}
