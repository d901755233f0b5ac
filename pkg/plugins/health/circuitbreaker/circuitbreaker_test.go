package circuitbreaker

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

func TestFactory(t *testing.T) {
	schedulingtest.RunFactoryCases(t, Registration, append([]schedulingtest.FactoryCase{
		{Name: "defaults", Check: func(t *testing.T, p scheduling.Plugin) {
			b := p.(*Breaker)
			if b.p.ConsecutiveFailures != 5 || b.p.OpenDuration.Duration != 30*time.Second || b.p.HalfOpenRequests != 1 ||
				b.p.SuccessThreshold != 2 || b.ttft != 0 || b.total != 0 {
				t.Errorf("defaults = %+v", b.p)
			}
		}},
		{Name: "every parameter", Params: `{"consecutiveFailures": 2, "openDuration": "1s", "halfOpenRequests": 3, "successThreshold": 1, "latencyAsFailure": {"ttftMs": 500, "totalMs": 2000}}`,
			Check: func(t *testing.T, p scheduling.Plugin) {
				b := p.(*Breaker)
				if b.ttft != 500*time.Millisecond || b.total != 2*time.Second || b.p.HalfOpenRequests != 3 {
					t.Errorf("params = %+v", b.p)
				}
			}},
		{Name: "every problem", Params: `{"consecutiveFailures": 0, "openDuration": "1ms", "halfOpenRequests": 101, "successThreshold": -1, "latencyAsFailure": {"ttftMs": -1, "totalMs": 3600001}}`,
			WantErrs: []string{
				"consecutiveFailures: must be 1..1000, got 0",
				"halfOpenRequests: must be 1..100, got 101",
				"successThreshold: must be 1..1000, got -1",
				"openDuration: must be between 10ms and 1h0m0s, got 1ms",
				"latencyAsFailure.ttftMs: must be 0 (off) or 1..3600000, got -1",
				"latencyAsFailure.totalMs: must be 0 (off) or 1..3600000, got 3600001",
			}},
		{Name: "bad duration", Params: `{"openDuration": "half a minute"}`, WantErr: `openDuration: invalid duration "half a minute"`},
		{Name: "misspelled nested key", Params: `{"latencyAsFailure": {"ttft": 1}}`, WantErr: `unknown field "latencyAsFailure.ttft"`},
	}, schedulingtest.DecodeErrorCases()...))
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type rig struct {
	t     *testing.T
	b     *Breaker
	clock *clock
	reg   *prometheus.Registry
	eps   []*scheduling.Endpoint
	hs    []*scheduling.EndpointHealth
}

func newRig(t *testing.T, params string, n int) *rig {
	t.Helper()
	reg := prometheus.NewRegistry()
	h := scheduling.NewHandle(scheduling.HandleOptions{Registerer: reg, Seed: 1})
	pl, err := Registration.Factory("cb", []byte(params), h)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, b: pl.(*Breaker), clock: &clock{t: time.Unix(1_700_000_000, 0)}, reg: reg}
	r.b.now = r.clock.Now
	r.eps = schedulingtest.Endpoints(n, func(i int, e *schedulingtest.EndpointBuilder) {
		h := &scheduling.EndpointHealth{}
		r.hs = append(r.hs, h)
		e.Health(h)
	})
	return r
}

// req is one request's life through the plugin.
type req struct {
	r    *rig
	req  *scheduling.Request
	kept []*scheduling.Endpoint
}

// start filters the candidates and schedules the request on target (and
// fallbacks), as the framework does.
func (r *rig) start(stream bool, target int, fallbacks ...int) *req {
	q := &req{r: r, req: &scheduling.Request{Stream: stream}}
	q.kept = r.b.Filter(context.Background(), q.req, r.eps)
	targets := []*scheduling.Endpoint{r.eps[target]}
	for _, f := range fallbacks {
		targets = append(targets, r.eps[f])
	}
	r.b.PreRequest(context.Background(), q.req, &scheduling.Result{PrimaryProfile: "p", ProfileResults: map[string]*scheduling.ProfileResult{"p": {Targets: targets}}})
	return q
}

func (q *req) chunk(target int) {
	q.r.b.ResponseStreaming(context.Background(), q.req, &scheduling.Response{}, []byte("data: x\n\n"), q.r.eps[target])
}

// end completes the request with status, served by served (-1: the primary,
// as the gateway reports no fallback).
func (q *req) end(status, served int) {
	resp := &scheduling.Response{StatusCode: status, EndOfStream: true}
	target := q.r.eps[0]
	if served >= 0 {
		resp.Served = q.r.eps[served].HostPort()
		target = q.r.eps[served]
	}
	q.r.b.ResponseComplete(context.Background(), q.req, resp, target)
}

// send runs a whole request on endpoint 0.
func (r *rig) send(status int) { r.start(false, 0).end(status, -1) }

func (r *rig) breaker(i int) scheduling.BreakerState { return r.hs[i].Breaker(r.clock.Now()) }

func (r *rig) transitions(to string) float64 {
	m := &dto.Metric{}
	_ = r.b.m.transitions.WithLabelValues(to).Write(m)
	return m.GetCounter().GetValue()
}

func TestOpensAfterConsecutiveFailures(t *testing.T) {
	r := newRig(t, "", 2) // 5 failures
	for range 4 {
		r.send(500)
	}
	r.send(200) // a success resets the count
	for range 4 {
		r.send(503)
	}
	r.send(404) // the endpoint answered: a client error resets the count, as a success does
	for range 4 {
		r.send(504)
	}
	r.start(false, 0).end(0, -1) // no status: counts neither way
	if got := r.breaker(0); got != scheduling.BreakerClosed {
		t.Fatalf("after 4+4+4 failures with a success and a 404 between: %v, want closed", got)
	}
	r.send(502)
	if got := r.breaker(0); got != scheduling.BreakerOpen {
		t.Fatalf("after 5 failures in a row: %v, want open", got)
	}
	if want := r.clock.Now().Add(30 * time.Second); !r.hs[0].OpenUntil().Equal(want) {
		t.Errorf("open until %v, want %v (openDuration)", r.hs[0].OpenUntil(), want)
	}
	if ok, reason := r.hs[0].Eligible(r.clock.Now()); ok || reason != scheduling.IneligibleBreakerOpen {
		t.Errorf("Eligible = %v, %q; want false, breaker_open", ok, reason)
	}
	if r.transitions("open") != 1 {
		t.Errorf("open transitions = %v", r.transitions("open"))
	}
	if r.breaker(1) != scheduling.BreakerClosed {
		t.Error("another endpoint's breaker changed")
	}
	// The Filter drops an open endpoint a lagging snapshot still lists.
	if kept := r.b.Filter(context.Background(), &scheduling.Request{}, r.eps); len(kept) != 1 || kept[0] != r.eps[1] {
		t.Errorf("Filter kept %v, want only ep-1", schedulingtest.Names(kept))
	}
}

// A connect failure surfaces as a fallback: the endpoint that served
// differs from the primary. It is the primary's failure; the endpoint
// that served answered for itself.
func TestFallbackIsThePrimarysFailure(t *testing.T) {
	r := newRig(t, `{"consecutiveFailures": 3}`, 2)
	for range 3 {
		r.start(false, 0, 1).end(200, 1)
	}
	if got := r.breaker(0); got != scheduling.BreakerOpen {
		t.Fatalf("primary after 3 fallbacks: %v, want open", got)
	}
	if got := r.breaker(1); got != scheduling.BreakerClosed {
		t.Fatalf("the endpoint that served: %v, want closed", got)
	}
	// The fallback's own failures count for it.
	for range 3 {
		r.start(false, 0, 1).end(500, 1)
	}
	if got := r.breaker(1); got != scheduling.BreakerOpen {
		t.Errorf("fallback after 3 failures it served: %v, want open", got)
	}
}

func TestLatencyAsFailure(t *testing.T) {
	t.Run("streams: time to first token", func(t *testing.T) {
		r := newRig(t, `{"consecutiveFailures": 2, "latencyAsFailure": {"ttftMs": 100}}`, 1)
		slow := func(ttft time.Duration) {
			q := r.start(true, 0)
			r.clock.Advance(ttft)
			q.chunk(0)
			r.clock.Advance(5 * time.Second) // a long answer after a quick first token is fine
			q.end(200, -1)
		}
		slow(50 * time.Millisecond)
		slow(150 * time.Millisecond)
		slow(100 * time.Millisecond) // at the limit: a success, resets
		slow(101 * time.Millisecond)
		if got := r.breaker(0); got != scheduling.BreakerClosed {
			t.Fatalf("%v after one slow stream in a row, want closed", got)
		}
		slow(time.Second)
		if got := r.breaker(0); got != scheduling.BreakerOpen {
			t.Fatalf("%v after two slow first tokens in a row, want open", got)
		}
	})
	t.Run("buffered: total time", func(t *testing.T) {
		r := newRig(t, `{"consecutiveFailures": 2, "latencyAsFailure": {"totalMs": 1000, "ttftMs": 10}}`, 1)
		buffered := func(d time.Duration) {
			q := r.start(false, 0)
			r.clock.Advance(d)
			q.end(200, -1)
		}
		buffered(900 * time.Millisecond)
		buffered(1500 * time.Millisecond)
		buffered(999 * time.Millisecond)
		buffered(1001 * time.Millisecond)
		if got := r.breaker(0); got != scheduling.BreakerClosed {
			t.Fatalf("%v, want closed", got)
		}
		buffered(2 * time.Second)
		if got := r.breaker(0); got != scheduling.BreakerOpen {
			t.Fatalf("%v after two slow responses in a row, want open", got)
		}
	})
	t.Run("off", func(t *testing.T) {
		r := newRig(t, `{"consecutiveFailures": 1}`, 1)
		q := r.start(true, 0)
		r.clock.Advance(time.Hour)
		q.chunk(0)
		q.end(200, -1)
		if got := r.breaker(0); got != scheduling.BreakerClosed {
			t.Fatalf("%v, want closed: slowness counts only with latencyAsFailure", got)
		}
	})
}

// open trips endpoint 0's breaker and waits out the open interval.
func (r *rig) openAndWait() {
	r.t.Helper()
	for range r.b.p.ConsecutiveFailures {
		r.send(500)
	}
	if r.breaker(0) != scheduling.BreakerOpen {
		r.t.Fatal("not open")
	}
	r.clock.Advance(r.b.p.OpenDuration.Duration)
	if r.breaker(0) != scheduling.BreakerHalfOpen {
		r.t.Fatal("the health does not read half-open once the interval ended")
	}
}

func names(eps []*scheduling.Endpoint) []string { return schedulingtest.Names(eps) }

func TestHalfOpen(t *testing.T) {
	t.Run("at most halfOpenRequests trials at a time; successThreshold closes", func(t *testing.T) {
		r := newRig(t, `{"consecutiveFailures": 1, "halfOpenRequests": 2, "successThreshold": 3}`, 2)
		r.openAndWait()
		a := r.start(false, 0)
		b := r.start(false, 0)
		c := &scheduling.Request{}
		if kept := r.b.Filter(context.Background(), c, r.eps); len(kept) != 1 || kept[0] != r.eps[1] {
			t.Fatalf("third request while two trials run: kept %v, want only ep-1", names(kept))
		}
		if len(a.kept) != 2 || len(b.kept) != 2 {
			t.Fatalf("trials kept %v and %v", names(a.kept), names(b.kept))
		}
		a.end(200, -1)
		// A slot is free again.
		d := r.start(false, 0)
		if len(d.kept) != 2 {
			t.Fatalf("after a trial ended: kept %v", names(d.kept))
		}
		b.end(200, -1)
		if got := r.breaker(0); got != scheduling.BreakerHalfOpen {
			t.Fatalf("after 2 of 3 successes: %v", got)
		}
		d.end(200, -1)
		if got := r.breaker(0); got != scheduling.BreakerClosed {
			t.Fatalf("after 3 successes: %v, want closed", got)
		}
		if r.transitions("half_open") != 1 || r.transitions("closed") != 1 {
			t.Errorf("transitions: half_open %v, closed %v", r.transitions("half_open"), r.transitions("closed"))
		}
		if int64(r.b.hotLen()) != 0 {
			t.Errorf("notClosed = %d", int64(r.b.hotLen()))
		}
	})
	t.Run("a failed trial opens again", func(t *testing.T) {
		r := newRig(t, `{"consecutiveFailures": 2}`, 1)
		r.openAndWait()
		r.start(false, 0).end(200, -1)
		r.start(false, 0).end(500, -1)
		if got := r.breaker(0); got != scheduling.BreakerOpen {
			t.Fatalf("%v, want open again", got)
		}
		if want := r.clock.Now().Add(30 * time.Second); !r.hs[0].OpenUntil().Equal(want) {
			t.Errorf("reopened until %v, want %v", r.hs[0].OpenUntil(), want)
		}
	})
	t.Run("a slot reserved for a request that went elsewhere is freed", func(t *testing.T) {
		r := newRig(t, `{"consecutiveFailures": 1}`, 2)
		r.openAndWait()
		other := r.start(false, 1) // the filter reserved ep-0's slot; the picker chose ep-1
		if len(other.kept) != 2 {
			t.Fatalf("kept %v", names(other.kept))
		}
		if trial := r.start(false, 0); len(trial.kept) != 2 {
			t.Errorf("the slot was not freed: kept %v", names(trial.kept))
		}
	})
	t.Run("a reservation whose scheduling failed expires", func(t *testing.T) {
		r := newRig(t, `{"consecutiveFailures": 1}`, 2)
		r.openAndWait()
		r.b.Filter(context.Background(), &scheduling.Request{}, r.eps) // never scheduled
		if kept := r.b.Filter(context.Background(), &scheduling.Request{}, r.eps); len(kept) != 1 {
			t.Fatalf("a second trial while the first is reserved: kept %v", names(kept))
		}
		r.clock.Advance(reservationTTL + time.Millisecond)
		if kept := r.b.Filter(context.Background(), &scheduling.Request{}, r.eps); len(kept) != 2 {
			t.Errorf("after the reservation expired: kept %v", names(kept))
		}
	})
	t.Run("outcomes of requests from another generation are ignored", func(t *testing.T) {
		r := newRig(t, `{"consecutiveFailures": 1, "successThreshold": 1}`, 1)
		old := r.start(false, 0) // started while closed
		r.send(500)              // opens
		r.clock.Advance(30 * time.Second)
		old.end(500, -1) // a closed-state request failing now says nothing of the trials
		if got := r.breaker(0); got != scheduling.BreakerHalfOpen {
			t.Fatalf("%v, want half-open", got)
		}
		r.start(false, 0).end(200, -1)
		if got := r.breaker(0); got != scheduling.BreakerClosed {
			t.Fatalf("%v, want closed", got)
		}
	})
}

func TestClientGoneAwayDecidesNothing(t *testing.T) {
	r := newRig(t, `{"consecutiveFailures": 1}`, 1)
	q := r.start(false, 0)
	r.b.ResponseComplete(context.Background(), q.req, &scheduling.Response{StatusCode: 500, Disconnected: true}, r.eps[0])
	if got := r.breaker(0); got != scheduling.BreakerClosed {
		t.Fatalf("%v, want closed", got)
	}
	// A second completion of the same request counts nothing either.
	q.end(500, -1)
	if got := r.breaker(0); got != scheduling.BreakerClosed {
		t.Fatalf("a completion counted twice: %v", got)
	}
}

func TestForgetAndNewIdentity(t *testing.T) {
	r := newRig(t, `{"consecutiveFailures": 2}`, 1)
	r.send(500)
	r.b.Forget(r.eps[0].Key())
	r.send(500)
	if got := r.breaker(0); got != scheduling.BreakerClosed {
		t.Fatalf("failures counted across Forget: %v", got)
	}
	r.send(500)
	if got := r.breaker(0); got != scheduling.BreakerOpen {
		t.Fatalf("%v, want open", got)
	}
	// The same key with a new health (a new identity) starts closed.
	fresh := &scheduling.EndpointHealth{}
	r.eps[0] = schedulingtest.Endpoint(r.eps[0].Name()).Health(fresh).Build()
	r.hs[0] = fresh
	if kept := r.b.Filter(context.Background(), &scheduling.Request{}, r.eps); len(kept) != 1 {
		t.Fatalf("the old endpoint's open breaker filtered the new one: kept %v", names(kept))
	}
	r.send(500)
	if got := r.breaker(0); got != scheduling.BreakerClosed || int64(r.b.hotLen()) != 0 {
		t.Fatalf("new identity: %v, notClosed %d; want closed, 0", got, int64(r.b.hotLen()))
	}
}

// A new instance adopts what the endpoints' health shows (a reload that
// changed the parameters), and one closed without a successor closes its
// breakers.
func TestReloadAndClose(t *testing.T) {
	r := newRig(t, `{"consecutiveFailures": 1}`, 1)
	r.send(500)
	r.b.Close(scheduling.CloseInfo{Successor: true})
	if r.breaker(0) != scheduling.BreakerOpen {
		t.Fatal("a Close with a successor changed the state")
	}
	pl, err := Registration.Factory("cb", []byte(`{"consecutiveFailures": 1, "successThreshold": 1}`), scheduling.NewHandle(scheduling.HandleOptions{Seed: 1}))
	if err != nil {
		t.Fatal(err)
	}
	next := pl.(*Breaker)
	next.now = r.clock.Now
	r.clock.Advance(30 * time.Second)
	r.b = next
	r.start(false, 0).end(200, -1)
	if got := r.breaker(0); got != scheduling.BreakerClosed {
		t.Fatalf("the successor did not continue from half-open: %v", got)
	}
	r.send(500)
	next.Close(scheduling.CloseInfo{})
	if got := r.breaker(0); got != scheduling.BreakerClosed {
		t.Fatalf("after Close without a successor: %v, want closed", got)
	}
	r.send(500) // a closed instance counts nothing
	if got := r.breaker(0); got != scheduling.BreakerClosed {
		t.Fatalf("a closed instance opened a breaker: %v", got)
	}
	if kept := next.Filter(context.Background(), &scheduling.Request{}, r.eps); len(kept) != 1 {
		t.Error("a closed instance filtered")
	}
}

// TestCloseResetsAdoptedStates: a reload replaces the breaker (new
// parameters: the successor adopts the open breaker from the endpoint's
// health, but never sees the endpoint, which gets no request while open),
// then a reload drops it (Close without a successor): the endpoint comes
// back into rotation, although this instance never held its state.
func TestCloseResetsAdoptedStates(t *testing.T) {
	r := newRig(t, `{"consecutiveFailures": 1, "openDuration": "1h"}`, 2)
	r.send(500)
	if r.breaker(0) != scheduling.BreakerOpen {
		t.Fatal("not open")
	}
	r.b.Close(scheduling.CloseInfo{Successor: true})
	pl, err := Registration.Factory("cb", []byte(`{"consecutiveFailures": 2, "openDuration": "1h"}`), scheduling.NewHandle(scheduling.HandleOptions{Seed: 1}))
	if err != nil {
		t.Fatal(err)
	}
	next := pl.(*Breaker)
	next.now = r.clock.Now
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		next.Run(ctx, schedulingtest.StaticEnv(r.eps))
	}()
	for next.pool.Load() == nil {
		time.Sleep(time.Millisecond)
	}
	// Requests go to the other endpoint only: ep 0 stays open, untouched.
	r.b = next
	r.start(false, 1).end(200, -1)
	if ok, why := r.hs[0].Eligible(r.clock.Now()); ok {
		t.Fatal("the adopted open breaker was lost before the reload")
	} else if why != scheduling.IneligibleBreakerOpen {
		t.Fatalf("ineligible for %q", why)
	}
	cancel() // the reload stops the instance's Run, then closes it
	<-done
	next.Close(scheduling.CloseInfo{})
	if ok, why := r.hs[0].Eligible(r.clock.Now()); !ok {
		t.Fatalf("after the breaker was removed the endpoint is still out of rotation (%s)", why)
	}
	if got := r.breaker(0); got != scheduling.BreakerClosed {
		t.Fatalf("breaker %v, want closed", got)
	}
}

// The Filter costs nothing while every breaker is closed.
func TestFilterFastPath(t *testing.T) {
	r := newRig(t, "", 100)
	for range 10 {
		r.start(false, 3).end(200, -1)
	}
	req := &scheduling.Request{}
	allocs := testing.AllocsPerRun(100, func() {
		if kept := r.b.Filter(context.Background(), req, r.eps); len(kept) != 100 {
			t.Fatal("filtered")
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per Filter while closed, want 0", allocs)
	}
}

// TestConcurrent drives one breaker from many goroutines through every
// state; run with -race. The breaker ends closed with no slot held.
func TestConcurrent(t *testing.T) {
	r := newRig(t, `{"consecutiveFailures": 3, "openDuration": "10ms", "halfOpenRequests": 2, "successThreshold": 2}`, 4)
	r.b.now = time.Now
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 300 {
				q := &scheduling.Request{Stream: i%2 == 0}
				kept := r.b.Filter(context.Background(), q, r.eps)
				if len(kept) == 0 {
					continue
				}
				target := kept[(w+i)%len(kept)]
				r.b.PreRequest(context.Background(), q, &scheduling.Result{PrimaryProfile: "p", ProfileResults: map[string]*scheduling.ProfileResult{"p": {Targets: kept[:1]}}})
				r.b.ResponseStreaming(context.Background(), q, &scheduling.Response{}, []byte("x"), target)
				status := 200
				if (w+i)%4 == 0 {
					status = 500
				}
				r.b.ResponseComplete(context.Background(), q, &scheduling.Response{StatusCode: status}, kept[0])
			}
		})
	}
	wg.Wait()
	r.b.states.Range(func(_, v any) bool {
		s := v.(*state)
		s.mu.Lock()
		defer s.mu.Unlock()
		for i, sl := range s.slots {
			if sl == slotRunning {
				t.Errorf("%s: slot %d still running", s.key, i)
			}
		}
		return true
	})
	n := int64(0)
	r.b.states.Range(func(_, v any) bool {
		s := v.(*state)
		s.mu.Lock()
		if s.st != scheduling.BreakerClosed {
			n++
		}
		s.mu.Unlock()
		return true
	})
	if got := int64(r.b.hotLen()); got != n {
		t.Errorf("notClosed = %d, but %d breakers are not closed", got, n)
	}
}

// TestCloseLeavesStatesToAnotherBreaker: a reload that renames the
// breaker (no successor of its name, but a circuit-breaker serves on:
// TypeServes) leaves the open breaker on the endpoint's health, which
// the serving instance adopted; resetting it would put the endpoint back
// in rotation behind the serving breaker's back.
func TestCloseLeavesStatesToAnotherBreaker(t *testing.T) {
	r := newRig(t, `{"consecutiveFailures": 1, "openDuration": "1h"}`, 2)
	r.send(500)
	if r.breaker(0) != scheduling.BreakerOpen {
		t.Fatal("not open")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.b.Run(ctx, schedulingtest.StaticEnv(r.eps))
	}()
	for r.b.pool.Load() == nil {
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	r.b.Close(scheduling.CloseInfo{TypeServes: true})
	if ok, why := r.hs[0].Eligible(r.clock.Now()); ok || why != scheduling.IneligibleBreakerOpen {
		t.Fatalf("the open breaker was reset although another breaker serves (eligible %v, %q)", ok, why)
	}
}
