package scheduling_test

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

// eventLog is a shared, ordered record of plugin calls.
type eventLog struct {
	mu     sync.Mutex
	events []string
}

func (l *eventLog) add(e string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	l.events = append(l.events, e)
	l.mu.Unlock()
}

func (l *eventLog) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.events...)
}

type fakeProducer struct {
	name     string
	produces []string
	consumes []string
	log      *eventLog
}

func (p *fakeProducer) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: "fake-producer", Name: p.name}
}
func (p *fakeProducer) Produces() []string { return p.produces }
func (p *fakeProducer) Consumes() []string { return p.consumes }
func (p *fakeProducer) Produce(context.Context, *scheduling.Request, []*scheduling.Endpoint) {
	p.log.add("produce " + p.name)
}

type fakeAdmitter struct {
	name    string
	refusal *scheduling.Refusal
	log     *eventLog
}

func (a *fakeAdmitter) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: "fake-admitter", Name: a.name}
}

func (a *fakeAdmitter) Admit(context.Context, *scheduling.Request, []*scheduling.Endpoint) *scheduling.Refusal {
	a.log.add("admit " + a.name)
	return a.refusal
}

type fakeDetector struct{ saturation float64 }

func (fakeDetector) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: "fake-detector", Name: "detector"}
}

func (d fakeDetector) Saturation(context.Context, *scheduling.Request, []*scheduling.Endpoint) float64 {
	return d.saturation
}

// fakeHooks implements every request and response hook and records what
// it was given.
type fakeHooks struct {
	name string
	log  *eventLog

	mu        sync.Mutex
	preReq    []*scheduling.Result
	received  []*scheduling.Response
	chunks    []string
	targets   []*scheduling.Endpoint
	completes atomic.Int32
}

func (h *fakeHooks) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: "fake-hooks", Name: h.name}
}

func (h *fakeHooks) PreRequest(_ context.Context, _ *scheduling.Request, res *scheduling.Result) {
	h.log.add("pre-request " + h.name)
	h.mu.Lock()
	h.preReq = append(h.preReq, res)
	h.mu.Unlock()
}

func (h *fakeHooks) ResponseReceived(_ context.Context, _ *scheduling.Request, resp *scheduling.Response, target *scheduling.Endpoint) {
	h.log.add("received " + h.name)
	h.mu.Lock()
	h.received = append(h.received, resp)
	h.targets = append(h.targets, target)
	h.mu.Unlock()
}

func (h *fakeHooks) ResponseStreaming(_ context.Context, _ *scheduling.Request, _ *scheduling.Response, chunk []byte, target *scheduling.Endpoint) {
	h.log.add("streaming " + h.name)
	h.mu.Lock()
	h.chunks = append(h.chunks, string(chunk))
	h.targets = append(h.targets, target)
	h.mu.Unlock()
}

func (h *fakeHooks) ResponseComplete(context.Context, *scheduling.Request, *scheduling.Response, *scheduling.Endpoint) {
	h.completes.Add(1)
}

// roundsHandler runs the named profiles round after round and makes
// primary the primary profile. It records the results it saw at each Pick.
type roundsHandler struct {
	rounds  [][]string
	primary string
	err     error
	// nilResult makes ProcessResults return (nil, nil).
	nilResult bool
	log       *eventLog

	mu   sync.Mutex
	seen []map[string]*scheduling.ProfileResult
}

func (h *roundsHandler) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: "rounds-handler", Name: "rounds"}
}

func (h *roundsHandler) Pick(_ context.Context, _ *scheduling.Request, profiles map[string]*scheduling.Profile, results map[string]*scheduling.ProfileResult) []*scheduling.Profile {
	h.mu.Lock()
	defer h.mu.Unlock()
	round := len(h.seen)
	h.seen = append(h.seen, maps.Clone(results))
	h.log.add("pick")
	if round >= len(h.rounds) {
		return nil
	}
	var out []*scheduling.Profile
	for _, name := range h.rounds[round] {
		out = append(out, profiles[name])
	}
	return out
}

func (h *roundsHandler) ProcessResults(_ context.Context, _ *scheduling.Request, results map[string]*scheduling.ProfileResult) (*scheduling.Result, error) {
	h.log.add("process-results")
	if h.err != nil {
		return nil, h.err
	}
	if h.nilResult {
		return nil, nil
	}
	return &scheduling.Result{ProfileResults: results, PrimaryProfile: h.primary}, nil
}

func singleProfileHandler(name string, log *eventLog) *roundsHandler {
	return &roundsHandler{rounds: [][]string{{name}}, primary: name, log: log}
}

// scoredProfile is a profile whose one scorer gives the named scores and
// whose picker takes the maximum.
func scoredProfile(t testing.TB, name string, scores map[string]float64) *scheduling.Profile {
	t.Helper()
	return mustProfile(t, name, nil, []scheduling.WeightedScorer{{Scorer: &schedulingtest.FakeScorer{Name: name + "-scorer", Scores: scores}, Weight: 1}}, maxPicker{name: name + "-picker"})
}

func mustScheduler(t testing.TB, cfg scheduling.SchedulerConfig) *scheduling.Scheduler {
	t.Helper()
	s, err := scheduling.NewScheduler(cfg)
	if err != nil {
		t.Fatalf("NewScheduler: %v", err)
	}
	return s
}

func producerNames(ps []scheduling.DataProducer) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.TypedName().Name
	}
	return out
}

func TestNewScheduler(t *testing.T) {
	t.Parallel()
	p1 := scoredProfile(t, "p1", nil)
	p1again := scoredProfile(t, "p1", nil)
	p2 := scoredProfile(t, "p2", nil)
	tests := []struct {
		name    string
		cfg     scheduling.SchedulerConfig
		wantErr string
	}{
		{name: "no profile handler", cfg: scheduling.SchedulerConfig{Profiles: []*scheduling.Profile{p1}}, wantErr: "no profile handler"},
		{name: "no profiles", cfg: scheduling.SchedulerConfig{ProfileHandler: singleProfileHandler("p1", nil)}, wantErr: "no scheduling profile"},
		{
			name:    "duplicate profile names",
			cfg:     scheduling.SchedulerConfig{ProfileHandler: singleProfileHandler("p1", nil), Profiles: []*scheduling.Profile{p1, p2, p1again}},
			wantErr: `duplicate profile "p1"`,
		},
		{
			name: "producer cycle",
			cfg: scheduling.SchedulerConfig{ProfileHandler: singleProfileHandler("p1", nil), Profiles: []*scheduling.Profile{p1}, Producers: []scheduling.DataProducer{
				&fakeProducer{name: "a", produces: []string{"ka"}, consumes: []string{"kb"}},
				&fakeProducer{name: "b", produces: []string{"kb"}, consumes: []string{"ka"}},
			}},
			wantErr: "cycle",
		},
		{name: "valid", cfg: scheduling.SchedulerConfig{ProfileHandler: singleProfileHandler("p1", nil), Profiles: []*scheduling.Profile{p2, p1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := scheduling.NewScheduler(tt.cfg)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("NewScheduler error = %v, want one containing %q", err, tt.wantErr)
				}
				if s != nil {
					t.Errorf("NewScheduler returned a scheduler with its error")
				}
				return
			}
			if err != nil {
				t.Fatalf("NewScheduler: %v", err)
			}
			var names []string
			for _, p := range s.Profiles() {
				names = append(names, p.Name())
			}
			if want := []string{"p1", "p2"}; !reflect.DeepEqual(names, want) {
				t.Errorf("Profiles() = %q, want %q (sorted by name)", names, want)
			}
		})
	}
}

func TestOrderProducers(t *testing.T) {
	t.Parallel()
	prod := func(name string, produces, consumes []string) scheduling.DataProducer {
		return &fakeProducer{name: name, produces: produces, consumes: consumes}
	}
	k := func(keys ...string) []string { return keys }
	tests := []struct {
		name      string
		producers []scheduling.DataProducer
		want      []string
		// wantErr are substrings the error must contain.
		wantErr []string
	}{
		{name: "none", producers: nil, want: []string{}},
		{
			name:      "independent producers keep their order",
			producers: []scheduling.DataProducer{prod("x", k("kx"), nil), prod("y", k("ky"), nil), prod("z", nil, nil)},
			want:      []string{"x", "y", "z"},
		},
		{
			name:      "consumer configured before its producer runs after it",
			producers: []scheduling.DataProducer{prod("consumer", nil, k("k")), prod("producer", k("k"), nil)},
			want:      []string{"producer", "consumer"},
		},
		{
			name:      "already ordered stays",
			producers: []scheduling.DataProducer{prod("producer", k("k"), nil), prod("consumer", nil, k("k"))},
			want:      []string{"producer", "consumer"},
		},
		{
			name: "chain in reverse order",
			producers: []scheduling.DataProducer{
				prod("c", nil, k("kb")),
				prod("b", k("kb"), k("ka")),
				prod("a", k("ka"), nil),
			},
			want: []string{"a", "b", "c"},
		},
		{
			name: "independent producers around a dependency stay stable",
			producers: []scheduling.DataProducer{
				prod("x", k("kx"), nil),
				prod("c", nil, k("k")),
				prod("y", k("ky"), nil),
				prod("p", k("k"), nil),
			},
			// Among producers whose dependencies are met, the earliest configured runs first.
			want: []string{"x", "y", "p", "c"},
		},
		{
			name: "consumer of several keys",
			producers: []scheduling.DataProducer{
				prod("c", nil, k("k1", "k2")),
				prod("p1", k("k1"), nil),
				prod("p2", k("k2"), nil),
			},
			want: []string{"p1", "p2", "c"},
		},
		{
			name:      "consuming its own key is not a cycle",
			producers: []scheduling.DataProducer{prod("self", k("k"), k("k"))},
			want:      []string{"self"},
		},
		{
			name:      "consumed key without producer is ignored",
			producers: []scheduling.DataProducer{prod("c", nil, k("missing")), prod("x", k("kx"), nil)},
			want:      []string{"c", "x"},
		},
		{
			name: "two-producer cycle",
			producers: []scheduling.DataProducer{
				prod("a", k("ka"), k("kb")),
				prod("b", k("kb"), k("ka")),
			},
			wantErr: []string{"cycle", "a -> b -> a"},
		},
		{
			name: "three-producer cycle",
			producers: []scheduling.DataProducer{
				prod("x", k("kx"), nil),
				prod("a", k("ka"), k("kc")),
				prod("b", k("kb"), k("ka")),
				prod("c", k("kc"), k("kb")),
			},
			wantErr: []string{"cycle", "a -> c -> b -> a"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := scheduling.OrderProducers(tt.producers)
			if len(tt.wantErr) > 0 {
				if err == nil {
					t.Fatalf("OrderProducers = %q, want an error", producerNames(got))
				}
				for _, s := range tt.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not contain %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("OrderProducers: %v", err)
			}
			if names := producerNames(got); !reflect.DeepEqual(names, tt.want) {
				t.Errorf("OrderProducers = %q, want %q", names, tt.want)
			}
		})
	}
}

// TestOrderProducersKeepsIndependentOrder: OrderProducers documents "a
// stable topological sort: independent producers keep their configured
// order". Here p1 and p2 are independent and configured p1 first; the
// order p1, p2, c satisfies every dependency and keeps it.
func TestOrderProducersKeepsIndependentOrder(t *testing.T) {
	got, err := scheduling.OrderProducers([]scheduling.DataProducer{
		&fakeProducer{name: "c", consumes: []string{"k2", "k1"}},
		&fakeProducer{name: "p1", produces: []string{"k1"}},
		&fakeProducer{name: "p2", produces: []string{"k2"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if names, want := producerNames(got), []string{"p1", "p2", "c"}; !reflect.DeepEqual(names, want) {
		t.Errorf("OrderProducers = %q, want %q", names, want)
	}
}

func TestProcessRunsStagesInOrder(t *testing.T) {
	t.Parallel()
	log := &eventLog{}
	hooks := &fakeHooks{name: "hooks", log: log}
	s := mustScheduler(t, scheduling.SchedulerConfig{
		ProfileHandler: singleProfileHandler("default", log),
		Profiles:       []*scheduling.Profile{scoredProfile(t, "default", map[string]float64{"b": 1})},
		Producers: []scheduling.DataProducer{
			&fakeProducer{name: "consumer", consumes: []string{"k"}, log: log},
			&fakeProducer{name: "producer", produces: []string{"k"}, log: log},
		},
		Admitters: []scheduling.Admitter{
			&fakeAdmitter{name: "a1", log: log},
			&fakeAdmitter{name: "a2", log: log},
		},
		SaturationDetector: fakeDetector{saturation: 0},
		PreRequest:         []scheduling.PreRequest{hooks},
	})
	res, err := s.Process(t.Context(), &scheduling.Request{ID: "r1", Priority: -1}, namedEndpoints("a", "b"))
	if err != nil {
		t.Fatalf("Process: %v", err)
	}
	if got := schedulingtest.Names(res.Targets()); !reflect.DeepEqual(got, []string{"b"}) {
		t.Errorf("targets = %q, want [b]", got)
	}
	want := []string{"produce producer", "produce consumer", "admit a1", "admit a2", "pick", "pick", "process-results", "pre-request hooks"}
	if got := log.list(); !reflect.DeepEqual(got, want) {
		t.Errorf("events = %q, want %q", got, want)
	}
}

func TestProcessAdmitterRefusal(t *testing.T) {
	t.Parallel()
	log := &eventLog{}
	refusal := &scheduling.Refusal{StatusCode: http.StatusForbidden, Reason: "denied", Message: "tenant over quota"}
	hooks := &fakeHooks{name: "hooks", log: log}
	picker := &schedulingtest.FakePicker{Name: "never"}
	s := mustScheduler(t, scheduling.SchedulerConfig{
		ProfileHandler: singleProfileHandler("default", log),
		Profiles:       []*scheduling.Profile{mustProfile(t, "default", nil, nil, picker)},
		Producers:      []scheduling.DataProducer{&fakeProducer{name: "p", log: log}},
		Admitters: []scheduling.Admitter{
			&fakeAdmitter{name: "ok", log: log},
			&fakeAdmitter{name: "refuse", refusal: refusal, log: log},
			&fakeAdmitter{name: "after", log: log},
		},
		PreRequest: []scheduling.PreRequest{hooks},
	})
	res, err := s.Process(t.Context(), &scheduling.Request{ID: "r1"}, namedEndpoints("a"))
	var re *scheduling.RefusalError
	if !errors.As(err, &re) {
		t.Fatalf("Process error = %v (%T), want *RefusalError", err, err)
	}
	if res != nil {
		t.Errorf("Process result = %+v, want nil", res)
	}
	if re.Refusal != *refusal {
		t.Errorf("refusal = %+v, want %+v", re.Refusal, *refusal)
	}
	for _, s := range []string{"403", "denied", "tenant over quota"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not contain %q", err, s)
		}
	}
	if want := []string{"produce p", "admit ok", "admit refuse"}; !reflect.DeepEqual(log.list(), want) {
		t.Errorf("events = %q, want %q (no profile handler, profile or PreRequest after a refusal)", log.list(), want)
	}
	if picker.Last != nil {
		t.Errorf("the profile's picker ran after a refusal")
	}
}

func TestProcessSaturationShedding(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		priority   int
		detector   scheduling.SaturationDetector
		skip       bool
		wantRefuse bool
	}{
		{name: "sheddable and saturated", priority: -1, detector: fakeDetector{saturation: 1.0}, wantRefuse: true},
		{name: "sheddable and over-saturated", priority: -5, detector: fakeDetector{saturation: 3.5}, wantRefuse: true},
		{name: "sheddable and half saturated", priority: -1, detector: fakeDetector{saturation: 0.5}},
		{name: "sheddable just below saturation", priority: -1, detector: fakeDetector{saturation: 0.999}},
		{name: "sheddable without a detector", priority: -1, detector: nil},
		{name: "priority 0 is never shed", priority: 0, detector: fakeDetector{saturation: 1.0}},
		{name: "positive priority is never shed", priority: 3, detector: fakeDetector{saturation: 10}},
		{name: "multi-site: the site stage sheds, not the detector", priority: -1, detector: fakeDetector{saturation: 5}, skip: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			log := &eventLog{}
			s := mustScheduler(t, scheduling.SchedulerConfig{
				ProfileHandler:     singleProfileHandler("default", log),
				Profiles:           []*scheduling.Profile{scoredProfile(t, "default", nil)},
				SaturationDetector: tt.detector,
				Admitters:          []scheduling.Admitter{&fakeAdmitter{name: "a", log: log}},
			})
			res, err := s.Process(t.Context(), &scheduling.Request{ID: "r", Priority: tt.priority, SkipSaturationShedding: tt.skip}, namedEndpoints("a"))
			if !tt.wantRefuse {
				if err != nil {
					t.Fatalf("Process: %v, want admitted", err)
				}
				if len(res.Targets()) != 1 {
					t.Errorf("targets = %v, want one", res.Targets())
				}
				return
			}
			var re *scheduling.RefusalError
			if !errors.As(err, &re) {
				t.Fatalf("Process error = %v, want *RefusalError", err)
			}
			if re.Refusal.StatusCode != http.StatusTooManyRequests || re.Refusal.Reason != "saturated" {
				t.Errorf("refusal = %+v, want 429 saturated", re.Refusal)
			}
			if got := log.list(); len(got) != 0 {
				t.Errorf("events after shedding = %q, want none", got)
			}
		})
	}
}

func TestProcessPreRequestGetsResult(t *testing.T) {
	t.Parallel()
	h1 := &fakeHooks{name: "h1"}
	h2 := &fakeHooks{name: "h2"}
	s := mustScheduler(t, scheduling.SchedulerConfig{
		ProfileHandler: singleProfileHandler("default", nil),
		Profiles:       []*scheduling.Profile{scoredProfile(t, "default", map[string]float64{"c": 1})},
		PreRequest:     []scheduling.PreRequest{h1, h2},
	})
	res, err := s.Process(t.Context(), &scheduling.Request{ID: "r"}, namedEndpoints("a", "b", "c"))
	if err != nil {
		t.Fatalf("Process: %v", err)
	}
	for _, h := range []*fakeHooks{h1, h2} {
		if len(h.preReq) != 1 || h.preReq[0] != res {
			t.Errorf("%s PreRequest got %v, want exactly the returned result %p", h.name, h.preReq, res)
		}
	}
	if got := schedulingtest.Names(h1.preReq[0].Targets()); !reflect.DeepEqual(got, []string{"c"}) {
		t.Errorf("PreRequest targets = %q, want [c]", got)
	}

	// A failed schedule runs no PreRequest hook.
	if _, err := s.Process(t.Context(), &scheduling.Request{ID: "r2"}, nil); !errors.Is(err, scheduling.ErrNoEndpoints) {
		t.Fatalf("Process without candidates = %v, want ErrNoEndpoints", err)
	}
	if len(h1.preReq) != 1 {
		t.Errorf("PreRequest ran %d times, want 1 (not after a failed schedule)", len(h1.preReq))
	}
}

func TestResponseCompleteRunsOnceConcurrently(t *testing.T) {
	t.Parallel()
	h1 := &fakeHooks{name: "h1"}
	h2 := &fakeHooks{name: "h2"}
	s := mustScheduler(t, scheduling.SchedulerConfig{
		ProfileHandler:   singleProfileHandler("default", nil),
		Profiles:         []*scheduling.Profile{scoredProfile(t, "default", nil)},
		ResponseComplete: []scheduling.ResponseComplete{h1, h2},
	})
	req := &scheduling.Request{ID: "r"}
	target := namedEndpoints("a")[0]

	const callers = 50
	var ran atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range callers {
		wg.Go(func() {
			<-start
			resp := &scheduling.Response{StatusCode: http.StatusOK, Disconnected: i%2 == 0}
			if s.ResponseComplete(context.Background(), req, resp, target) {
				ran.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()

	if got := ran.Load(); got != 1 {
		t.Errorf("ResponseComplete returned true %d times, want 1", got)
	}
	for _, h := range []*fakeHooks{h1, h2} {
		if got := h.completes.Load(); got != 1 {
			t.Errorf("%s ran %d times, want 1", h.name, got)
		}
	}

	// Another request gets its own completion.
	if !s.ResponseComplete(t.Context(), &scheduling.Request{ID: "other"}, &scheduling.Response{}, target) {
		t.Errorf("ResponseComplete for a new request returned false")
	}
	if got := h1.completes.Load(); got != 2 {
		t.Errorf("h1 ran %d times after a second request, want 2", got)
	}
}

func TestResponseHooksPassThrough(t *testing.T) {
	t.Parallel()
	log := &eventLog{}
	h1 := &fakeHooks{name: "h1", log: log}
	h2 := &fakeHooks{name: "h2", log: log}
	s := mustScheduler(t, scheduling.SchedulerConfig{
		ProfileHandler:    singleProfileHandler("default", nil),
		Profiles:          []*scheduling.Profile{scoredProfile(t, "default", nil)},
		ResponseReceived:  []scheduling.ResponseReceived{h1, h2},
		ResponseStreaming: []scheduling.ResponseStreaming{h1, h2},
	})
	req := &scheduling.Request{ID: "r"}
	target := namedEndpoints("a")[0]
	resp := &scheduling.Response{StatusCode: http.StatusOK, Headers: map[string]string{"content-type": "text/event-stream"}}

	s.ResponseReceived(t.Context(), req, resp, target)
	s.ResponseStreaming(t.Context(), req, resp, []byte("data: 1"), target)
	s.ResponseStreaming(t.Context(), req, resp, []byte("data: [DONE]"), target)

	wantEvents := []string{"received h1", "received h2", "streaming h1", "streaming h2", "streaming h1", "streaming h2"}
	if got := log.list(); !reflect.DeepEqual(got, wantEvents) {
		t.Errorf("events = %q, want %q", got, wantEvents)
	}
	for _, h := range []*fakeHooks{h1, h2} {
		if len(h.received) != 1 || h.received[0] != resp {
			t.Errorf("%s ResponseReceived got %v, want the response %p", h.name, h.received, resp)
		}
		if want := []string{"data: 1", "data: [DONE]"}; !reflect.DeepEqual(h.chunks, want) {
			t.Errorf("%s chunks = %q, want %q", h.name, h.chunks, want)
		}
		for i, tg := range h.targets {
			if tg != target {
				t.Errorf("%s call %d target = %v, want %v", h.name, i, tg, target)
			}
		}
	}
}

func TestScheduleTwoRounds(t *testing.T) {
	t.Parallel()
	handler := &roundsHandler{rounds: [][]string{{"prefill"}, {"decode"}}, primary: "decode"}
	s := mustScheduler(t, scheduling.SchedulerConfig{
		ProfileHandler: handler,
		Profiles: []*scheduling.Profile{
			scoredProfile(t, "prefill", map[string]float64{"a": 1}),
			scoredProfile(t, "decode", map[string]float64{"b": 1}),
		},
	})
	res, err := s.Process(t.Context(), &scheduling.Request{ID: "r"}, namedEndpoints("a", "b", "c"))
	if err != nil {
		t.Fatalf("Process: %v", err)
	}
	if len(handler.seen) != 3 {
		t.Fatalf("handler Pick called %d times, want 3 (two rounds and the final empty one)", len(handler.seen))
	}
	if len(handler.seen[0]) != 0 {
		t.Errorf("round one saw results %v, want none", handler.seen[0])
	}
	round2 := handler.seen[1]
	if len(round2) != 1 || round2["prefill"] == nil {
		t.Fatalf("round two saw results %v, want only prefill's", round2)
	}
	if got := schedulingtest.Names(round2["prefill"].Targets); !reflect.DeepEqual(got, []string{"a"}) {
		t.Errorf("round two saw prefill targets %q, want [a]", got)
	}
	if got := schedulingtest.Names(res.Targets()); !reflect.DeepEqual(got, []string{"b"}) {
		t.Errorf("primary targets = %q, want [b]", got)
	}
	if got := schedulingtest.Names(res.ProfileResults["prefill"].Targets); !reflect.DeepEqual(got, []string{"a"}) {
		t.Errorf("prefill targets = %q, want [a]", got)
	}
}

func TestScheduleErrors(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	dropAll := &schedulingtest.FakeFilter{Name: "drop-all", Keep: func(*scheduling.Endpoint) bool { return false }}
	tests := []struct {
		name       string
		handler    *roundsHandler
		candidates []*scheduling.Endpoint
		// wantIs are errors the result must wrap.
		wantIs  []error
		wantMsg []string
	}{
		{
			name:       "ProcessResults error is returned",
			handler:    &roundsHandler{rounds: [][]string{{"ok"}}, err: boom},
			candidates: namedEndpoints("a"),
			wantIs:     []error{boom},
		},
		{
			name:       "ProcessResults error is joined with profile failures",
			handler:    &roundsHandler{rounds: [][]string{{"ok", "empty"}}, err: boom},
			candidates: namedEndpoints("a"),
			wantIs:     []error{boom, scheduling.ErrNoEndpoints},
			wantMsg:    []string{"drop-all"},
		},
		{
			name:       "no candidates",
			handler:    &roundsHandler{rounds: [][]string{{"ok"}}, primary: "ok"},
			candidates: nil,
			wantIs:     []error{scheduling.ErrNoEndpoints},
		},
		{
			name:       "handler runs no profile",
			handler:    &roundsHandler{primary: "ok"},
			candidates: namedEndpoints("a"),
			wantIs:     []error{scheduling.ErrNoEndpoints},
			wantMsg:    []string{"ran no profile"},
		},
		{
			name:       "primary profile failed",
			handler:    &roundsHandler{rounds: [][]string{{"ok", "empty"}}, primary: "empty"},
			candidates: namedEndpoints("a"),
			wantIs:     []error{scheduling.ErrNoEndpoints},
			wantMsg:    []string{`primary profile "empty"`, "drop-all"},
		},
		{
			name:       "primary profile never ran",
			handler:    &roundsHandler{rounds: [][]string{{"ok"}}, primary: "missing"},
			candidates: namedEndpoints("a"),
			wantIs:     []error{scheduling.ErrNoEndpoints},
			wantMsg:    []string{`primary profile "missing"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := mustScheduler(t, scheduling.SchedulerConfig{
				ProfileHandler: tt.handler,
				Profiles: []*scheduling.Profile{
					scoredProfile(t, "ok", nil),
					mustProfile(t, "empty", []scheduling.Filter{dropAll}, nil, maxPicker{}),
				},
			})
			res, err := s.Process(t.Context(), &scheduling.Request{ID: "r"}, tt.candidates)
			if err == nil {
				t.Fatalf("Process = %+v, want an error", res)
			}
			if res != nil {
				t.Errorf("Process result = %+v, want nil with the error", res)
			}
			for _, target := range tt.wantIs {
				if !errors.Is(err, target) {
					t.Errorf("error %q does not wrap %q", err, target)
				}
			}
			for _, s := range tt.wantMsg {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
		})
	}
}

// TestScheduleNilResult: a handler that returns (nil, nil) from
// ProcessResults breaks its contract, but Result.Targets is nil-safe and
// the failure should surface as ErrNoEndpoints, not a panic.
func TestScheduleNilResult(t *testing.T) {
	s := mustScheduler(t, scheduling.SchedulerConfig{
		ProfileHandler: &roundsHandler{rounds: [][]string{{"ok"}}, nilResult: true},
		Profiles:       []*scheduling.Profile{scoredProfile(t, "ok", nil)},
	})
	if _, err := s.Process(t.Context(), &scheduling.Request{ID: "r"}, namedEndpoints("a")); !errors.Is(err, scheduling.ErrNoEndpoints) {
		t.Errorf("Process error = %v, want ErrNoEndpoints", err)
	}
}
