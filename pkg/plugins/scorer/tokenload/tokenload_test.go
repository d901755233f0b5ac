package tokenload

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

func TestFactory(t *testing.T) {
	tests := []struct {
		name      string
		raw       string
		wantErr   string
		threshold float64
	}{
		{name: "defaults", raw: "", threshold: 4194304},
		{name: "empty object", raw: "{}", threshold: 4194304},
		{name: "custom threshold", raw: `{"queueThresholdTokens": 1000}`, threshold: 1000},
		{name: "zero threshold", raw: `{"queueThresholdTokens": 0}`, wantErr: "queueThresholdTokens: must be > 0, got 0"},
		{name: "negative threshold", raw: `{"queueThresholdTokens": -4}`, wantErr: "queueThresholdTokens: must be > 0, got -4"},
		{name: "unknown key", raw: `{"threshold": 10}`, wantErr: "threshold"},
		{name: "wrong type", raw: `{"queueThresholdTokens": "4Mi"}`, wantErr: "queueThresholdTokens: expected an integer"},
		{name: "fraction", raw: `{"queueThresholdTokens": 1.5}`, wantErr: "queueThresholdTokens"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Registration.Factory("tokens", json.RawMessage(tt.raw), schedulingtest.NewHandle(t))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			s := p.(*Scorer)
			if s.threshold != tt.threshold {
				t.Errorf("threshold = %v, want %v", s.threshold, tt.threshold)
			}
			if got := s.TypedName(); got != (scheduling.TypedName{Type: Type, Name: "tokens"}) {
				t.Errorf("TypedName() = %v", got)
			}
			if s.Category() != scheduling.Distribution {
				t.Errorf("Category() = %v", s.Category())
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
	typ, params, ok := s.DefaultProducer(key)
	if !ok || typ != "inflight-load-producer" || params != nil {
		t.Errorf("DefaultProducer(%q) = %q, %q, %v", key, typ, params, ok)
	}
	if _, _, ok := s.DefaultProducer("something-else"); ok {
		t.Error("DefaultProducer gives a producer for an unknown key")
	}
}

// fakeLoad is an in-flight view with fixed counts by endpoint key.
type fakeLoad map[string][2]int64

func (f fakeLoad) InFlight(key string) (int64, int64) { v := f[key]; return v[0], v[1] }

// TestScore reproduces GIE v1.5.0's token load scores.
func TestScore(t *testing.T) {
	eps := schedulingtest.Endpoints(5, nil)
	load := fakeLoad{}
	for i, tok := range []int64{0, 1000, 2500, 4000, 9000} {
		load[eps[i].Key()] = [2]int64{1, tok}
	}
	tests := []struct {
		name      string
		threshold int64
		load      scheduling.InFlightLoad
		want      []float64
	}{
		{name: "threshold 4000", threshold: 4000, load: load, want: []float64{1, 0.75, 0.375, 0, 0}},
		{name: "default threshold", threshold: DefaultQueueThresholdTokens, load: load,
			want: []float64{1, 1 - 1000.0/4194304, 1 - 2500.0/4194304, 1 - 4000.0/4194304, 1 - 9000.0/4194304}},
		{name: "no in-flight view is neutral", threshold: 4000, load: nil, want: []float64{1, 1, 1, 1, 1}},
		{name: "negative tokens count as none", threshold: 10, load: fakeLoad{eps[0].Key(): {0, -5}}, want: []float64{1, 1, 1, 1, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(Type, Params{QueueThresholdTokens: tt.threshold}, schedulingtest.NewHandle(t))
			if err != nil {
				t.Fatal(err)
			}
			req := &scheduling.Request{}
			if tt.load != nil {
				scheduling.InFlightLoadKey.Set(req, tt.load)
			}
			scores := make([]float64, len(eps))
			s.Score(t.Context(), req, eps, scores)
			for i, w := range tt.want {
				if scores[i] != w {
					t.Errorf("score[%d] = %v, want %v", i, scores[i], w)
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
