package runningrequests

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

func TestFactory(t *testing.T) {
	tests := []struct {
		name    string
		raw     string
		wantErr string
	}{
		{name: "no parameters", raw: ""},
		{name: "null", raw: "null"},
		{name: "empty object", raw: "{}"},
		{name: "unknown key", raw: `{"threshold": 3}`, wantErr: "threshold"},
		{name: "wrong type", raw: `[1]`, wantErr: "expected an object"},
		{name: "trailing data", raw: `{} {}`, wantErr: "after top-level value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Registration.Factory("my-running", json.RawMessage(tt.raw), schedulingtest.NewHandle(t))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if got, want := p.TypedName(), (scheduling.TypedName{Type: Type, Name: "my-running"}); got != want {
				t.Errorf("TypedName() = %v, want %v", got, want)
			}
			s, ok := p.(scheduling.Scorer)
			if !ok {
				t.Fatalf("%T is not a scheduling.Scorer", p)
			}
			if s.Category() != scheduling.Distribution {
				t.Errorf("Category() = %v, want Distribution", s.Category())
			}
		})
	}
}

func TestNewDefaultsName(t *testing.T) {
	s, err := New("", DefaultParams(), schedulingtest.NewHandle(t))
	if err != nil {
		t.Fatal(err)
	}
	if s.TypedName().Name != Type {
		t.Errorf("name = %q, want %q", s.TypedName().Name, Type)
	}
}

// TestScore reproduces GIE v1.5.0's running-requests scorer cases and more.
func TestScore(t *testing.T) {
	tests := []struct {
		name    string
		running []int
		want    []float64
	}{
		{name: "different running counts", running: []int{10, 5, 0}, want: []float64{0, 0.5, 1}},
		{name: "same running counts", running: []int{5, 5}, want: []float64{1, 1}},
		{name: "zero running counts", running: []int{0, 0}, want: []float64{1, 1}},
		{name: "single endpoint", running: []int{42}, want: []float64{1}},
		{name: "uneven spread", running: []int{3, 7, 11, 4}, want: []float64{1, 0.5, 0, 0.875}},
		{name: "no endpoints", running: nil, want: []float64{}},
	}
	s, err := New(Type, DefaultParams(), schedulingtest.NewHandle(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eps := schedulingtest.Endpoints(len(tt.running), func(i int, b *schedulingtest.EndpointBuilder) { b.Running(tt.running[i]) })
			scores := make([]float64, len(eps))
			s.Score(t.Context(), &scheduling.Request{}, eps, scores)
			for i := range tt.want {
				if scores[i] != tt.want[i] {
					t.Errorf("score[%d] (running %d) = %v, want %v", i, tt.running[i], scores[i], tt.want[i])
				}
			}
		})
	}
}

// TestProfilePicksLeastBusy runs the scorer inside a profile.
func TestProfilePicksLeastBusy(t *testing.T) {
	s, err := New(Type, DefaultParams(), schedulingtest.NewHandle(t))
	if err != nil {
		t.Fatal(err)
	}
	picker := &schedulingtest.FakePicker{Name: "picker"}
	prof, err := scheduling.NewProfile("default", nil, []scheduling.WeightedScorer{{Scorer: s, Weight: 2}}, picker, nil)
	if err != nil {
		t.Fatal(err)
	}
	eps := schedulingtest.Endpoints(3, func(i int, b *schedulingtest.EndpointBuilder) { b.Running([]int{4, 1, 9}[i]) })
	res, err := prof.Run(context.Background(), &scheduling.Request{}, eps)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Targets[0].Name(); got != "ep-1" {
		t.Errorf("picked %s, want ep-1", got)
	}
}

func TestReadme(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	if !strings.HasPrefix(doc, "# "+Type+"\n") {
		t.Errorf("README does not start with %q", "# "+Type)
	}
	last := -1
	for _, h := range []string{"## Type", "## Description", "## Parameters", "## Metrics", "## Example"} {
		i := strings.Index(doc, "\n"+h+"\n")
		if i <= last {
			t.Errorf("section %q missing or out of order", h)
		}
		last = i
	}
	if n := strings.Count(doc, "```yaml"); n != 1 {
		t.Errorf("README has %d yaml blocks, want 1", n)
	}
	if !strings.Contains(doc, "type: "+Type) {
		t.Errorf("README example does not use %s", Type)
	}
}
