package scheduling

import (
	"context"
	"fmt"
	"testing"
	"time"
)

func TestEndpointHealth(t *testing.T) {
	var h EndpointHealth
	notified := 0
	h.SetNotify(func() { notified++ })
	now := time.Unix(1000, 0)
	if ok, _ := h.Eligible(now); !ok {
		t.Fatal("a new endpoint is eligible")
	}
	if !h.SetProbe(ProbeUnhealthy) || h.SetProbe(ProbeUnhealthy) {
		t.Fatal("SetProbe reports changes only")
	}
	if ok, why := h.Eligible(now); ok || why != IneligibleUnhealthy {
		t.Fatalf("unhealthy: %v %q", ok, why)
	}
	h.SetProbe(ProbeHealthy)
	h.SetBreaker(BreakerOpen, now.Add(time.Second))
	if ok, why := h.Eligible(now); ok || why != IneligibleBreakerOpen {
		t.Fatalf("open: %v %q", ok, why)
	}
	if got := h.Breaker(now.Add(time.Second)); got != BreakerHalfOpen {
		t.Fatalf("after the open interval: %v, want half-open", got)
	}
	if ok, _ := h.Eligible(now.Add(time.Second)); !ok {
		t.Fatal("half-open is eligible")
	}
	if !h.SetBreaker(BreakerOpen, now.Add(time.Hour)) {
		t.Fatal("re-opening (a new interval) is a change")
	}
	if h.OpenUntil() != now.Add(time.Hour) {
		t.Fatal("OpenUntil")
	}
	h.SetBreaker(BreakerClosed, time.Time{})
	if h.SetBreaker(BreakerClosed, time.Time{}) || !h.OpenUntil().IsZero() {
		t.Fatal("closing twice is one change; a closed breaker has no interval")
	}
	if notified != 5 {
		t.Fatalf("notified %d times, want 5", notified)
	}
	var nilH *EndpointHealth
	if ok, _ := nilH.Eligible(now); !ok {
		t.Fatal("nil health is eligible")
	}
}

func TestCandidateSetHash(t *testing.T) {
	eps := make([]*Endpoint, 5)
	for i := range eps {
		eps[i] = NewEndpoint(EndpointMetadata{Name: fmt.Sprintf("e%d", i), Address: "127.10.0.1", Port: 8000 + i}, Metrics{}, nil)
	}
	a := CandidateSetHash(eps)
	rev := []*Endpoint{eps[4], eps[3], eps[2], eps[1], eps[0]}
	if CandidateSetHash(rev) != a {
		t.Fatal("order must not matter")
	}
	if CandidateSetHash(eps[:4]) == a || CandidateSetHash(append(eps[:4:4], eps[0])) == a {
		t.Fatal("another set must hash differently")
	}
	same := NewEndpoint(EndpointMetadata{Name: "e0", Address: "127.10.0.9", Port: 1}, Metrics{}, nil)
	if same.KeyHash() != eps[0].KeyHash() {
		t.Fatal("KeyHash depends on the key only")
	}
}

func TestTopScored(t *testing.T) {
	mk := func(name string, s float64) ScoredEndpoint {
		return ScoredEndpoint{Endpoint: NewEndpoint(EndpointMetadata{Name: name}, Metrics{}, nil), Score: s}
	}
	sc := []ScoredEndpoint{mk("a", 1), mk("b", 3), mk("c", 2), mk("d", 3), mk("e", 3)}
	n := TopScored(sc)
	if n != 3 || sc[0].Endpoint.Name() != "b" || sc[1].Endpoint.Name() != "d" || sc[2].Endpoint.Name() != "e" {
		t.Fatalf("top %d: %v %v %v", n, sc[0].Endpoint, sc[1].Endpoint, sc[2].Endpoint)
	}
	if TopScored(nil) != 0 {
		t.Fatal("empty")
	}
}

func TestModelsLookup(t *testing.T) {
	m := &EndpointModels{Entries: []ModelEntry{{Name: "llama", Aliases: []string{"l3", "meta"}}, {Name: "meta"}}}
	if e, ok := m.Lookup("l3"); !ok || e.Name != "llama" {
		t.Fatal("alias")
	}
	if e, ok := m.Lookup("meta"); !ok || e.Name != "meta" {
		t.Fatal("a served name wins over another entry's alias")
	}
	if _, ok := m.Lookup("gpt"); ok {
		t.Fatal("unknown")
	}
	var nilM *EndpointModels
	if _, ok := nilM.Lookup("x"); ok {
		t.Fatal("nil")
	}
}

type infoPicker struct{ got PickInfo }

func (p *infoPicker) TypedName() TypedName {
	return TypedName{Type: "info-picker", Name: "info-picker"}
}
func (p *infoPicker) Pick(context.Context, *Request, []ScoredEndpoint) *ProfileResult {
	panic("a ProfilePicker is called with PickInProfile")
}
func (p *infoPicker) PickInProfile(_ context.Context, _ *Request, scored []ScoredEndpoint, info PickInfo) *ProfileResult {
	p.got = info
	return &ProfileResult{Targets: []*Endpoint{scored[0].Endpoint}}
}

type constScorer struct{ name string }

func (s constScorer) TypedName() TypedName   { return TypedName{Type: "const-scorer", Name: s.name} }
func (constScorer) Category() ScorerCategory { return Distribution }
func (constScorer) Score(_ context.Context, _ *Request, _ []*Endpoint, scores []float64) {
	for i := range scores {
		scores[i] = 0.5
	}
}

func TestProfilePickerGetsInfo(t *testing.T) {
	pk := &infoPicker{}
	p, err := NewProfile("prof", nil, []WeightedScorer{{Scorer: constScorer{"a"}, Weight: 2}, {Scorer: constScorer{"b"}, Weight: 0.5}}, pk, nil)
	if err != nil {
		t.Fatal(err)
	}
	ep := NewEndpoint(EndpointMetadata{Name: "e"}, Metrics{}, nil)
	if _, err := p.Run(context.Background(), &Request{}, []*Endpoint{ep}); err != nil {
		t.Fatal(err)
	}
	if pk.got != (PickInfo{Profile: "prof", TotalWeight: 2.5, Scorers: 2}) {
		t.Fatalf("info = %+v", pk.got)
	}
}

// TestPoolWatcher: the pool is seen while Run runs, not before nor after.
func TestPoolWatcher(t *testing.T) {
	var w PoolWatcher
	if _, ok := w.Pool(); ok {
		t.Fatal("a pool before Run")
	}
	pool := []*Endpoint{NewEndpoint(EndpointMetadata{Name: "a", Address: "127.0.0.1", Port: 1}, Metrics{}, nil)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx, staticEnv(pool))
	}()
	for {
		if got, ok := w.Pool(); ok {
			if len(got) != 1 || got[0] != pool[0] {
				t.Fatalf("Pool = %v", got)
			}
			break
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-done
	if _, ok := w.Pool(); ok {
		t.Error("a pool after Run returned")
	}
}

// TestPoolWatcherSetRunEnv: the host's SetRunEnv makes the pool known at
// once, before Run's goroutine starts; Run's end forgets it.
func TestPoolWatcherSetRunEnv(t *testing.T) {
	var w PoolWatcher
	var _ RunEnvSetter = &w
	pool := []*Endpoint{NewEndpoint(EndpointMetadata{Name: "a", Address: "127.0.0.1", Port: 1}, Metrics{}, nil)}
	w.SetRunEnv(staticEnv(pool))
	if got, ok := w.Pool(); !ok || len(got) != 1 {
		t.Fatalf("Pool = %v, %v after SetRunEnv", got, ok)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	w.Run(ctx, staticEnv(pool))
	if _, ok := w.Pool(); ok {
		t.Error("a pool after Run returned")
	}
}

type staticEnv []*Endpoint

func (e staticEnv) Endpoints() []*Endpoint   { return e }
func (e staticEnv) Changed() <-chan struct{} { return nil }
