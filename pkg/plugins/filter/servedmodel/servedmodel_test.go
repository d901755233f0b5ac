package servedmodel

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

func TestFactory(t *testing.T) {
	schedulingtest.RunFactoryCases(t, Registration, append([]schedulingtest.FactoryCase{
		{Name: "defaults", Check: func(t *testing.T, p scheduling.Plugin) {
			if !p.(*Filter).refuse {
				t.Error("refuseUnknownModels defaults to true")
			}
		}},
		{Name: "no refusal", Params: `{"refuseUnknownModels": false}`, Check: func(t *testing.T, p scheduling.Plugin) {
			if p.(*Filter).refuse {
				t.Error("refuseUnknownModels false ignored")
			}
		}},
		{Name: "wrong type", Params: `{"refuseUnknownModels": "no"}`, WantErr: "refuseUnknownModels: expected a boolean"},
	}, schedulingtest.DecodeErrorCases()...))
}

func model(name string, aliases ...string) scheduling.ModelEntry {
	return scheduling.ModelEntry{Name: name, Aliases: aliases}
}

func newFilter(t testing.TB) *Filter {
	t.Helper()
	pl, err := Registration.Factory("f", nil, schedulingtest.NewHandle(t))
	if err != nil {
		t.Fatal(err)
	}
	return pl.(*Filter)
}

func TestFilter(t *testing.T) {
	type ep struct {
		name   string
		models []scheduling.ModelEntry // nil: declares nothing
	}
	tests := []struct {
		name    string
		eps     []ep
		model   string
		keep    []string
		target  string // req.TargetModel afterwards
		refused bool
	}{
		{
			name:  "none declares: every endpoint, every model",
			eps:   []ep{{name: "a"}, {name: "b"}},
			model: "anything", keep: []string{"a", "b"}, target: "anything",
		},
		{
			name:  "by name",
			eps:   []ep{{"a", []scheduling.ModelEntry{model("llama")}}, {"b", []scheduling.ModelEntry{model("mistral")}}, {"c", []scheduling.ModelEntry{model("mistral"), model("llama")}}},
			model: "llama", keep: []string{"a", "c"}, target: "llama",
		},
		{
			name:  "by alias: rewritten to the served name",
			eps:   []ep{{"a", []scheduling.ModelEntry{model("meta-llama/Llama-3.1-8B", "llama")}}, {"b", []scheduling.ModelEntry{model("mistral")}}},
			model: "llama", keep: []string{"a"}, target: "meta-llama/Llama-3.1-8B",
		},
		{
			name:  "an exact name wins over another endpoint's alias",
			eps:   []ep{{"a", []scheduling.ModelEntry{model("llama-70b", "llama")}}, {"b", []scheduling.ModelEntry{model("llama")}}},
			model: "llama", keep: []string{"b"}, target: "llama",
		},
		{
			name: "aliases of different served models: one consistent name, the most served",
			eps: []ep{
				{"a", []scheduling.ModelEntry{model("llama-8b", "llama")}},
				{"b", []scheduling.ModelEntry{model("llama-70b", "llama")}},
				{"c", []scheduling.ModelEntry{model("llama-70b", "llama")}},
			},
			model: "llama", keep: []string{"b", "c"}, target: "llama-70b",
		},
		{
			name:  "a tie goes to the smallest name",
			eps:   []ep{{"a", []scheduling.ModelEntry{model("z-model", "m")}}, {"b", []scheduling.ModelEntry{model("a-model", "m")}}},
			model: "m", keep: []string{"b"}, target: "a-model",
		},
		{
			name:  "endpoints declaring nothing serve every model and stay",
			eps:   []ep{{"a", []scheduling.ModelEntry{model("llama-8b", "llama")}}, {name: "open"}, {"b", []scheduling.ModelEntry{model("mistral")}}},
			model: "llama", keep: []string{"a", "open"}, target: "llama-8b",
		},
		{
			name:  "unknown model with an open endpoint: it serves",
			eps:   []ep{{"a", []scheduling.ModelEntry{model("llama")}}, {name: "open"}},
			model: "gpt-9", keep: []string{"open"}, target: "gpt-9",
		},
		{
			name:  "unknown model: refused",
			eps:   []ep{{"a", []scheduling.ModelEntry{model("llama")}}, {"b", []scheduling.ModelEntry{model("mistral", "m")}}},
			model: "gpt-9", keep: nil, target: "gpt-9", refused: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFilter(t)
			var eps []*scheduling.Endpoint
			for i, e := range tt.eps {
				b := schedulingtest.Endpoint(e.name).Port(8000 + i)
				if e.models != nil {
					b.Models(e.models...)
				}
				eps = append(eps, b.Build())
			}
			req := &scheduling.Request{Model: tt.model, TargetModel: tt.model}
			r := f.Admit(context.Background(), req, eps)
			if (r != nil) != tt.refused {
				t.Fatalf("Admit = %+v, want refused=%v", r, tt.refused)
			}
			if r != nil {
				if r.StatusCode != http.StatusNotFound || r.Reason != ReasonModelNotFound || !strings.Contains(r.Message, `"gpt-9"`) ||
					!strings.Contains(r.Message, "served models: llama, mistral") {
					t.Errorf("refusal = %+v", r)
				}
				if strings.HasSuffix(r.Message, ", m") {
					t.Errorf("aliases are not listed: %s", r.Message)
				}
			}
			kept := f.Filter(context.Background(), req, eps)
			if got := schedulingtest.Names(kept); strings.Join(got, ",") != strings.Join(tt.keep, ",") {
				t.Errorf("kept %v, want %v", got, tt.keep)
			}
			if req.TargetModel != tt.target {
				t.Errorf("TargetModel = %q, want %q", req.TargetModel, tt.target)
			}
			if req.Model != tt.model {
				t.Error("the client's model changed")
			}
		})
	}
}

// The model looked up is the target model (after the gateway's rewrite
// header), and refuseUnknownModels false admits.
func TestTargetModelAndNoRefusal(t *testing.T) {
	eps := []*scheduling.Endpoint{schedulingtest.Endpoint("a").Models(model("llama-8b", "llama")).Build()}
	f := newFilter(t)
	req := &scheduling.Request{Model: "client-name", TargetModel: "llama"}
	if r := f.Admit(context.Background(), req, eps); r != nil {
		t.Fatalf("refused %+v", r)
	}
	if kept := f.Filter(context.Background(), req, eps); len(kept) != 1 || req.TargetModel != "llama-8b" {
		t.Errorf("kept %v, TargetModel %q", schedulingtest.Names(kept), req.TargetModel)
	}
	pl, err := Registration.Factory("f", []byte(`{"refuseUnknownModels": false}`), schedulingtest.NewHandle(t))
	if err != nil {
		t.Fatal(err)
	}
	unknown := &scheduling.Request{Model: "gpt-9"}
	if r := pl.(*Filter).Admit(context.Background(), unknown, eps); r != nil {
		t.Errorf("refused with refuseUnknownModels false: %+v", r)
	}
	if kept := pl.(*Filter).Filter(context.Background(), unknown, eps); len(kept) != 0 {
		t.Errorf("kept %v for a model none serves", schedulingtest.Names(kept))
	}
}

// The 404 message lists at most ten served models.
func TestRefusalListsFewModels(t *testing.T) {
	var entries []scheduling.ModelEntry
	for i := range 15 {
		entries = append(entries, model("m"+string(rune('a'+i))))
	}
	eps := []*scheduling.Endpoint{schedulingtest.Endpoint("a").Models(entries...).Build()}
	r := newFilter(t).Admit(context.Background(), &scheduling.Request{Model: strings.Repeat("x", 1000)}, eps)
	if r == nil || !strings.Contains(r.Message, "and 5 more") || len(r.Message) > 600 {
		t.Errorf("refusal = %+v", r)
	}
}

// Where no endpoint declares models the filter costs no allocation.
func TestNoDeclarationsNoAllocation(t *testing.T) {
	f := newFilter(t)
	eps := schedulingtest.Endpoints(100, nil)
	req := &scheduling.Request{Model: "m"}
	allocs := testing.AllocsPerRun(100, func() {
		f.Admit(context.Background(), req, eps)
		if len(f.Filter(context.Background(), req, eps)) != 100 {
			t.Fatal("filtered")
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations, want 0", allocs)
	}
}

// TestAdmitJudgesThePool: the admitter judges the model against the
// whole pool, not only the candidates: a model only endpoints out of
// rotation serve gets 503 model_unavailable, not 404; a model the pool
// does not serve still gets 404, listing every served model of the pool.
func TestAdmitJudgesThePool(t *testing.T) {
	llama := schedulingtest.Endpoint("a").Port(1).Models(model("llama", "l")).Build()
	mistral := schedulingtest.Endpoint("b").Port(2).Models(model("mistral")).Build()
	open := schedulingtest.Endpoint("c").Port(3).Build() // declares nothing: serves every model
	tests := []struct {
		name   string
		pool   []*scheduling.Endpoint // nil: the host does not run the plugin
		model  string
		status int // 0: admitted
		reason string
		msg    string
	}{
		{name: "served by a candidate", pool: []*scheduling.Endpoint{llama, mistral}, model: "mistral"},
		{name: "served only out of rotation", pool: []*scheduling.Endpoint{llama, mistral}, model: "llama",
			status: http.StatusServiceUnavailable, reason: ReasonModelUnavailable, msg: `"llama" is served by 1 endpoints of the pool`},
		{name: "alias served only out of rotation", pool: []*scheduling.Endpoint{llama, mistral}, model: "l",
			status: http.StatusServiceUnavailable, reason: ReasonModelUnavailable},
		{name: "an open endpoint out of rotation may serve it", pool: []*scheduling.Endpoint{mistral, open}, model: "gpt-9",
			status: http.StatusServiceUnavailable, reason: ReasonModelUnavailable},
		{name: "served nowhere: 404 listing the pool's models", pool: []*scheduling.Endpoint{llama, mistral}, model: "gpt-9",
			status: http.StatusNotFound, reason: ReasonModelNotFound, msg: "served models: llama, mistral"},
		{name: "not run by a host: the candidates stand for the pool", model: "llama",
			status: http.StatusNotFound, reason: ReasonModelNotFound, msg: "served models: mistral"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFilter(t)
			if tt.pool != nil {
				schedulingtest.RunWithPool(t, f, tt.pool)
			}
			cands := []*scheduling.Endpoint{mistral} // the only routable one
			r := f.Admit(context.Background(), &scheduling.Request{Model: tt.model, TargetModel: tt.model}, cands)
			if tt.status == 0 {
				if r != nil {
					t.Fatalf("refused: %+v", r)
				}
				return
			}
			if r == nil || r.StatusCode != tt.status || r.Reason != tt.reason || !strings.Contains(r.Message, tt.msg) {
				t.Errorf("refusal = %+v, want %d %s %q", r, tt.status, tt.reason, tt.msg)
			}
		})
	}
}
