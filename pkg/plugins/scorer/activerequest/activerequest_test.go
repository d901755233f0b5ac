package activerequest

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

func TestFactory(t *testing.T) {
	tests := []struct {
		name     string
		raw      string
		wantErrs []string
		idle     int64
		maxBusy  float64
		warns    bool
	}{
		{name: "defaults", raw: "", idle: 0, maxBusy: 1},
		{name: "custom", raw: `{"idleThreshold": 2, "maxBusyScore": 0.5}`, idle: 2, maxBusy: 0.5},
		{name: "explicit zero maxBusyScore", raw: `{"maxBusyScore": 0}`, idle: 0, maxBusy: 0},
		{name: "deprecated requestTimeout accepted with a warning", raw: `{"requestTimeout": "2m"}`, idle: 0, maxBusy: 1, warns: true},
		{
			name:     "every invalid field is reported",
			raw:      `{"idleThreshold": -1, "maxBusyScore": 1.5}`,
			wantErrs: []string{"idleThreshold: must be >= 0, got -1", "maxBusyScore: must be in [0, 1], got 1.5"},
		},
		{name: "negative maxBusyScore", raw: `{"maxBusyScore": -0.1}`, wantErrs: []string{"maxBusyScore"}},
		{name: "unknown key", raw: `{"threshold": 1}`, wantErrs: []string{"threshold"}},
		{name: "wrong type", raw: `{"idleThreshold": "1"}`, wantErrs: []string{"idleThreshold: expected an integer"}},
		{name: "wrong type for requestTimeout", raw: `{"requestTimeout": 120}`, wantErrs: []string{"requestTimeout: expected a string"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			var logs []string
			h := scheduling.NewHandle(scheduling.HandleOptions{Seed: 1, Logger: funcr.New(func(prefix, args string) {
				mu.Lock()
				logs = append(logs, args)
				mu.Unlock()
			}, funcr.Options{})})
			p, err := Registration.Factory("active", json.RawMessage(tt.raw), h)
			if len(tt.wantErrs) > 0 {
				if err == nil {
					t.Fatalf("no error, want %q", tt.wantErrs)
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
			s := p.(*Scorer)
			if s.idleThreshold != tt.idle || s.maxBusyScore != tt.maxBusy {
				t.Errorf("idle=%d maxBusy=%v, want %d %v", s.idleThreshold, s.maxBusyScore, tt.idle, tt.maxBusy)
			}
			if got := s.TypedName(); got != (scheduling.TypedName{Type: Type, Name: "active"}) {
				t.Errorf("TypedName() = %v", got)
			}
			warned := len(logs) > 0 && strings.Contains(logs[0], "deprecated")
			if warned != tt.warns {
				t.Errorf("deprecation warning logged = %v, want %v (logs %q)", warned, tt.warns, logs)
			}
		})
	}
}

func TestDataDependencies(t *testing.T) {
	s, err := New(Type, DefaultParams(), schedulingtest.NewHandle(t))
	if err != nil {
		t.Fatal(err)
	}
	key := scheduling.InFlightLoadKey.Name()
	if got := s.Consumes(); len(got) != 1 || got[0] != key {
		t.Errorf("Consumes() = %v, want [%s]", got, key)
	}
	if typ, params, ok := s.DefaultProducer(key); !ok || typ != "inflight-load-producer" || params != nil {
		t.Errorf("DefaultProducer(%q) = %q, %q, %v", key, typ, params, ok)
	}
	if _, _, ok := s.DefaultProducer("other"); ok {
		t.Error("DefaultProducer gives a producer for an unknown key")
	}
	if s.Category() != scheduling.Distribution {
		t.Errorf("Category() = %v", s.Category())
	}
}

type fakeLoad map[string]int64

func (f fakeLoad) InFlight(key string) (int64, int64) { return f[key], 0 }

// TestScore reproduces llm-d's active-request-scorer formula.
func TestScore(t *testing.T) {
	tests := []struct {
		name    string
		params  Params
		counts  []int64
		noLoad  bool
		want    []float64
		epsilon float64
	}{
		{name: "defaults", params: DefaultParams(), counts: []int64{0, 3, 5}, want: []float64{1, 0.4, 0}},
		{name: "all idle", params: DefaultParams(), counts: []int64{0, 0}, want: []float64{1, 1}},
		{name: "all equally busy", params: DefaultParams(), counts: []int64{4, 4}, want: []float64{0, 0}},
		{name: "busy only", params: DefaultParams(), counts: []int64{2, 8, 4}, want: []float64{0.75, 0, 0.5}},
		{name: "idle threshold", params: Params{IdleThreshold: 2, MaxBusyScore: 1}, counts: []int64{2, 1, 3, 6}, want: []float64{1, 1, 0.5, 0}},
		{name: "max busy score gap", params: Params{IdleThreshold: 1, MaxBusyScore: 0.5}, counts: []int64{1, 2, 4}, want: []float64{1, 0.25, 0}},
		{name: "max busy score zero", params: Params{MaxBusyScore: 0}, counts: []int64{0, 1, 9}, want: []float64{1, 0, 0}},
		{name: "negative counts read as idle", params: DefaultParams(), counts: []int64{-3, 2}, want: []float64{1, 0}},
		{name: "no in-flight data is idle", params: DefaultParams(), counts: []int64{7, 9}, noLoad: true, want: []float64{1, 1}},
		{name: "no endpoints", params: DefaultParams(), counts: nil, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(Type, tt.params, schedulingtest.NewHandle(t))
			if err != nil {
				t.Fatal(err)
			}
			eps := schedulingtest.Endpoints(len(tt.counts), nil)
			load := fakeLoad{}
			for i, c := range tt.counts {
				load[eps[i].Key()] = c
			}
			req := &scheduling.Request{}
			if !tt.noLoad {
				scheduling.InFlightLoadKey.Set(req, load)
			}
			scores := make([]float64, len(eps))
			s.Score(t.Context(), req, eps, scores)
			for i, w := range tt.want {
				if d := scores[i] - w; d > 1e-12 || d < -1e-12 {
					t.Errorf("score[%d] (count %d) = %v, want %v", i, tt.counts[i], scores[i], w)
				}
			}
		})
	}
}

func TestScoreNilRequest(t *testing.T) {
	s, _ := New(Type, DefaultParams(), schedulingtest.NewHandle(t))
	scores := make([]float64, 2)
	s.Score(t.Context(), nil, schedulingtest.Endpoints(2, nil), scores)
	if scores[0] != 1 || scores[1] != 1 {
		t.Errorf("scores = %v, want [1 1]", scores)
	}
}
