package engineload

import (
	"context"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/pkg/plugins/scorer/prefix"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

var t0 = time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)

// fakeHits is a scheduling.PrefixHits by endpoint key.
type fakeHits map[string]int

func (h fakeHits) MatchedBlocks(e *scheduling.Endpoint) int { return h[e.Key()] }
func (h fakeHits) Len() int                                 { return len(h) }
func (h fakeHits) Range(f func(string, int) bool) {
	for k, v := range h {
		if !f(k, v) {
			return
		}
	}
}

// ep is a candidate: name, waiting queue, KV usage, scrape age (negative:
// never scraped), declared slots (0: none).
type ep struct {
	name  string
	wait  int
	kv    float64
	age   time.Duration
	slots int
}

func build(eps []ep) []*scheduling.Endpoint {
	out := make([]*scheduling.Endpoint, len(eps))
	for i, e := range eps {
		b := schedulingtest.Endpoint(e.name).Queue(e.wait).KVCache(e.kv)
		if e.age >= 0 {
			b = b.UpdateTime(t0.Add(-e.age))
		}
		if e.slots > 0 {
			b = b.Label(DefaultTotalSlotsLabel, strconv.Itoa(e.slots))
		}
		out[i] = b.Build()
	}
	return out
}

// request has a 10-block match where hits[name] = blocks held.
func request(hits map[string]int) *scheduling.Request {
	req := &scheduling.Request{ID: "r", Model: "m", TargetModel: "m"}
	scheduling.PrefixMatchKey.Set(req, &scheduling.PrefixMatch{TotalBlocks: 10, BlockSizeTokens: 16, Hits: fakeHits(hits)})
	return req
}

func newScorer(t testing.TB, raw string) *Scorer {
	t.Helper()
	var r json.RawMessage
	if raw != "" {
		r = json.RawMessage(raw)
	}
	pl, err := Registration.Factory(Type, r, schedulingtest.NewHandle(t))
	if err != nil {
		t.Fatalf("factory: %v", err)
	}
	s := pl.(*Scorer)
	s.now = func() time.Time { return t0 }
	return s
}

func score(s *Scorer, req *scheduling.Request, eps []*scheduling.Endpoint) []float64 {
	scores := make([]float64, len(eps))
	s.Score(context.Background(), req, eps, scores)
	return scores
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func assertScores(t *testing.T, got, want []float64) {
	t.Helper()
	for i := range want {
		if !near(got[i], want[i]) {
			t.Fatalf("scores = %v, want %v", got, want)
		}
	}
}

// C-30: only prefix holders (at least minOverlapThreshold) take part; a
// lower waiting queue and a lower KV usage earn more.
func TestC30_OnlyPrefixHoldersEarnTheTerm(t *testing.T) {
	s := newScorer(t, `{"minOverlapThreshold": 0.5}`)
	eps := build([]ep{
		{name: "a", wait: 0, kv: 0.2},   // holder, idle
		{name: "b", wait: 100, kv: 0.6}, // holder, busy
		{name: "c", wait: 0, kv: 0},     // idle, holds too little
		{name: "d", wait: 0, kv: 0},     // idle, holds nothing
	})
	got := score(s, request(map[string]int{"a": 10, "b": 5, "c": 4}), eps)
	// q by the largest waiting (100): a 0, b 1.
	assertScores(t, got, []float64{0.3 * (1 - 0.1), 0.3 * (1 - (0.5 + 0.3)), 0, 0})
	if !(got[0] > got[1]) {
		t.Fatalf("the idle holder must earn more: %v", got)
	}
	// No match data at all: no term.
	assertScores(t, score(s, &scheduling.Request{}, eps), []float64{0, 0, 0, 0})
}

// C-30 through the real prefix producer (its resolved fast path).
func TestC30_ReadsTheRealPrefixProducer(t *testing.T) {
	h := schedulingtest.NewHandle(t)
	pl, err := prefix.ProducerRegistration.Factory(prefix.ProducerType, json.RawMessage(`{"autoTune": false, "blockSizeTokens": 4}`), h)
	if err != nil {
		t.Fatal(err)
	}
	p := pl.(*prefix.Producer)
	eps := build([]ep{{name: "a", wait: 0}, {name: "b", wait: 200}, {name: "c", wait: 0}})
	text := []byte(strings.Repeat("the same long system prompt ", 20))
	ctx := context.Background()
	for _, target := range eps[:2] {
		req := &scheduling.Request{ID: "r", Model: "m", TargetModel: "m", Prompt: scheduling.Prompt{Text: text}}
		p.Produce(ctx, req, eps)
		p.PreRequest(ctx, req, &scheduling.Result{ProfileResults: map[string]*scheduling.ProfileResult{"d": {Targets: []*scheduling.Endpoint{target}}}, PrimaryProfile: "d"})
	}
	req := &scheduling.Request{ID: "r2", Model: "m", TargetModel: "m", Prompt: scheduling.Prompt{Text: text}}
	p.Produce(ctx, req, eps)
	got := score(newScorer(t, ""), req, eps)
	assertScores(t, got, []float64{0.3, 0.3 * 0.5, 0})
}

// C-31: normalised by total slots when every fresh participant declares
// them, else by the largest waiting queue among them.
func TestC31_QueueNormalisation(t *testing.T) {
	s := newScorer(t, "")
	hits := map[string]int{"a": 10, "b": 10}
	// Both declare 400 slots: q = 10/400 and 200/400.
	got := score(s, request(hits), build([]ep{{name: "a", wait: 10, slots: 400}, {name: "b", wait: 200, slots: 400}}))
	assertScores(t, got, []float64{0.3 * (1 - 0.5*10.0/400), 0.3 * (1 - 0.5*200.0/400)})
	// One does not declare: q = 10/200 and 1.
	got = score(s, request(hits), build([]ep{{name: "a", wait: 10, slots: 400}, {name: "b", wait: 200}}))
	assertScores(t, got, []float64{0.3 * (1 - 0.5*10.0/200), 0.3 * 0.5})
	// A queue beyond its slots counts as full, not more.
	got = score(s, request(hits), build([]ep{{name: "a", wait: 10, slots: 8}, {name: "b", wait: 200, slots: 100}}))
	assertScores(t, got, []float64{0.3 * 0.5, 0.3 * 0.5})
	// A non-holder that does not declare does not turn normalisation off.
	got = score(s, request(hits), build([]ep{{name: "a", wait: 10, slots: 400}, {name: "b", wait: 200, slots: 400}, {name: "c", wait: 0}}))
	assertScores(t, got, []float64{0.3 * (1 - 0.5*10.0/400), 0.3 * (1 - 0.5*200.0/400), 0})
	// A malformed declaration is none.
	if Slots(schedulingtest.Endpoint("x").Label(DefaultTotalSlotsLabel, "-3").Build(), DefaultTotalSlotsLabel) != 0 {
		t.Fatal("negative slots must count as undeclared")
	}
}

// C-32: a stale (or never scraped) snapshot is ignored: that candidate
// keeps its base score (term 0) and does not take part in the deadband.
func TestC32_StaleSnapshotsKeepTheBaseScore(t *testing.T) {
	s := newScorer(t, `{"scrapeInterval": "1s", "maxStalenessIntervals": 3}`)
	hits := map[string]int{"a": 10, "b": 10, "c": 10, "d": 10}
	eps := build([]ep{
		{name: "a", wait: 0, age: 3 * time.Second}, // exactly at the horizon: fresh
		{name: "b", wait: 300, age: time.Second},
		{name: "c", wait: 0, age: 3*time.Second + time.Millisecond}, // stale
		{name: "d", wait: 0, age: -1},                               // never scraped
	})
	assertScores(t, score(s, request(hits), eps), []float64{0.3, 0.3 * 0.5, 0, 0})
	// Without b, only fresh a is left: no spread, no term; the stale
	// zero queues do not open the deadband against b either.
	eps = build([]ep{{name: "b", wait: 300, age: 0}, {name: "c", wait: 0, age: time.Hour}})
	assertScores(t, score(s, request(hits), eps), []float64{0, 0})
	if s.Horizon() != 3*time.Second {
		t.Fatalf("horizon = %v", s.Horizon())
	}
}

// C-33: the deadband opens only when the waiting spread exceeds both
// thresholds; KV-only differences never open it; once open, KV counts.
func TestC33_Deadband(t *testing.T) {
	s := newScorer(t, "") // 64 and 1.5
	hits := map[string]int{"a": 10, "b": 10}
	for _, tc := range []struct {
		name   string
		wa, wb int
		open   bool
	}{
		{"equal", 10, 10, false},
		{"abs exceeded, rel not", 200, 290, false}, // 90 > 64, but 290 < 1.5×200
		{"rel exceeded, abs not", 10, 60, false},   // 60 > 15, but only 50 apart
		{"exactly abs apart", 0, 64, false},
		{"both exceeded", 0, 65, true},
		{"both exceeded large", 200, 301, true},
	} {
		got := score(s, request(hits), build([]ep{{name: "a", wait: tc.wa}, {name: "b", wait: tc.wb}}))
		if open := got[0] > 0; open != tc.open {
			t.Errorf("%s: open = %v, want %v (scores %v)", tc.name, open, tc.open, got)
		}
	}
	// KV-only difference: closed.
	got := score(s, request(hits), build([]ep{{name: "a", wait: 3, kv: 0}, {name: "b", wait: 3, kv: 0.99}}))
	assertScores(t, got, []float64{0, 0})
	// Open: KV counts (equal queues would not open, so b's queue differs).
	got = score(s, request(map[string]int{"a": 10, "b": 10, "c": 10}), build([]ep{{name: "a", wait: 0, kv: 0.8}, {name: "b", wait: 0, kv: 0.2}, {name: "c", wait: 100}}))
	if !(got[1] > got[0]) {
		t.Fatalf("with the deadband open the lower KV must earn more: %v", got)
	}
}

// C-34: KV clamped to [0,1]; the term never exceeds engineLoadWeight;
// zero inside the deadband; a non-holder reporting an idle engine earns
// nothing.
func TestC34_TrustLimits(t *testing.T) {
	s := newScorer(t, "")
	hits := map[string]int{"a": 10, "b": 10}
	got := score(s, request(hits), build([]ep{{name: "a", wait: 0, kv: -5}, {name: "b", wait: 100, kv: 7}}))
	assertScores(t, got, []float64{0.3, 0})
	for _, v := range got {
		if v > DefaultEngineLoadWeight {
			t.Fatalf("term %v above the cap", v)
		}
	}
	// A custom cap.
	got = score(newScorer(t, `{"engineLoadWeight": 0.1}`), request(hits), build([]ep{{name: "a", wait: 0}, {name: "b", wait: 100}}))
	assertScores(t, got, []float64{0.1, 0.05})
	// Through a profile: overlap scorer weight 1 plus the term (weight 1)
	// cannot overturn a large overlap difference.
	prof, err := scheduling.NewProfile("p", nil, []scheduling.WeightedScorer{
		{Scorer: ratioScorer{}, Weight: 1},
		{Scorer: s, Weight: 1},
	}, firstPicker{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	eps := build([]ep{{name: "full", wait: 500, kv: 1}, {name: "part", wait: 0, kv: 0}})
	scored, err := prof.Scores(context.Background(), request(map[string]int{"full": 10, "part": 6}), eps)
	if err != nil {
		t.Fatal(err)
	}
	if !(scored[0].Score > scored[1].Score) {
		t.Fatalf("a 0.4 overlap lead must survive the 0.3 cap: %v vs %v", scored[0].Score, scored[1].Score)
	}
	// engineLoadWeight 0 turns the term off.
	assertScores(t, score(newScorer(t, `{"engineLoadWeight": 0}`), request(hits), build([]ep{{name: "a"}, {name: "b", wait: 100}})), []float64{0, 0})
}

// ratioScorer is the KV overlap base: matched / total.
type ratioScorer struct{}

func (ratioScorer) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: "ratio", Name: "ratio"}
}
func (ratioScorer) Category() scheduling.ScorerCategory { return scheduling.Affinity }
func (ratioScorer) Score(_ context.Context, req *scheduling.Request, eps []*scheduling.Endpoint, scores []float64) {
	prefix.MatchRatios(req, eps, scores)
}

type firstPicker struct{}

func (firstPicker) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: "first", Name: "first"}
}
func (firstPicker) Pick(_ context.Context, _ *scheduling.Request, scored []scheduling.ScoredEndpoint) *scheduling.ProfileResult {
	return &scheduling.ProfileResult{Targets: []*scheduling.Endpoint{scored[0].Endpoint}}
}

func TestParams(t *testing.T) {
	for _, tc := range []struct {
		raw, want string
	}{
		{`{"engineLoadWeight": 1.5}`, "engineLoadWeight:"},
		{`{"minOverlapThreshold": 0}`, "minOverlapThreshold:"},
		{`{"balanceAbsThreshold": -1}`, "balanceAbsThreshold:"},
		{`{"balanceRelThreshold": 0.5}`, "balanceRelThreshold:"},
		{`{"maxStalenessIntervals": 0}`, "maxStalenessIntervals:"},
		{`{"scrapeInterval": "soon"}`, "scrapeInterval:"},
		{`{"scrapeInterval": "-1s"}`, "scrapeInterval:"},
		{`{"totalSlotsLabel": " "}`, "totalSlotsLabel:"},
		{`{"nope": 1}`, "nope"},
	} {
		_, err := Registration.Factory(Type, json.RawMessage(tc.raw), schedulingtest.NewHandle(t))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.raw, err, tc.want)
		}
	}
	s := newScorer(t, "")
	if typ, params, ok := s.DefaultProducer(scheduling.PrefixMatchKey.Name()); !ok || typ != prefix.ProducerType || params != nil {
		t.Fatalf("DefaultProducer = %q %s %v", typ, params, ok)
	}
	if s.Horizon() != 3*50*time.Millisecond {
		t.Fatalf("default horizon %v", s.Horizon())
	}
}

// C-34: a profile weight above the base weights lifts the cap, and says so.
func TestC34_WeightWarnings(t *testing.T) {
	s := newScorer(t, "")
	mk := func(base, term float64) *scheduling.Profile {
		scorers := []scheduling.WeightedScorer{{Scorer: s, Weight: term}}
		if base > 0 {
			scorers = append(scorers, scheduling.WeightedScorer{Scorer: ratioScorer{}, Weight: base})
		}
		p, err := scheduling.NewProfile("p", nil, scorers, firstPicker{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	if w := WeightWarnings([]*scheduling.Profile{mk(7, 7), mk(1, 0.5)}); len(w) != 0 {
		t.Fatalf("no warning expected: %v", w)
	}
	w := WeightWarnings([]*scheduling.Profile{mk(1, 2)})
	if len(w) != 1 || !strings.Contains(w[0], "adds up to 0.6 of the base scale instead of engineLoadWeight 0.3; set its weight to 1") {
		t.Fatalf("warnings = %v", w)
	}
	w = WeightWarnings([]*scheduling.Profile{mk(0, 1)})
	if len(w) != 1 || !strings.Contains(w[0], "no base scorer") {
		t.Fatalf("warnings = %v", w)
	}
}

// C-21: the horizon is the scrape interval (the host's, unless the
// parameters name one) × maxStalenessIntervals, the same rule as the
// engine-load-picker's and the kv-saturation-admitter's.
func TestC21_HorizonFollowsTheHostScrapeInterval(t *testing.T) {
	h := scheduling.NewHandle(scheduling.HandleOptions{Context: context.Background(), ScrapeInterval: 200 * time.Millisecond, Seed: 1})
	pl, err := Registration.Factory(Type, json.RawMessage(`{"maxStalenessIntervals": 5}`), h)
	if err != nil {
		t.Fatal(err)
	}
	if got := pl.(*Scorer).Horizon(); got != time.Second {
		t.Fatalf("horizon = %v, want 1s", got)
	}
	pl, err = Registration.Factory(Type, json.RawMessage(`{"scrapeInterval": "1s"}`), h)
	if err != nil {
		t.Fatal(err)
	}
	if got := pl.(*Scorer).Horizon(); got != 3*time.Second {
		t.Fatalf("horizon = %v, want 3s (the parameters' interval wins)", got)
	}
}
