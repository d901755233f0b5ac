package tokenload_test

import (
	"encoding/json"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/plugins"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

// TestGIEParity reproduces the token-load scores GIE v1.5 computes for a
// configuration that uses its type names without parameters: a
// token-load-scorer with the inflight-load-producer the loader adds for it.
// The plugins are built through the in-tree registry, as the configuration
// loader builds them, and their hooks are called in the framework's order.
//
// The expected token counts follow GIE v1.5's producer and estimator:
// PreRequest charges input + round(1.5 × input) tokens to the request's
// target, the end of the response releases them, and the scorer gives
// 1 − min(tokens, threshold) / threshold.
func TestGIEParity(t *testing.T) {
	reg := plugins.InTree()
	h := schedulingtest.NewHandle(t)
	build := func(typ, params string) scheduling.Plugin {
		t.Helper()
		r, ok := reg.Lookup(typ)
		if !ok {
			t.Fatalf("type %q not registered", typ)
		}
		var raw json.RawMessage
		if params != "" {
			raw = json.RawMessage(params)
		}
		p, err := r.Factory(typ, raw, h)
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		return p
	}
	defaultScorer := build("token-load-scorer", "").(scheduling.Scorer)
	smallScorer := build("token-load-scorer", `{"queueThresholdTokens": 5000}`).(scheduling.Scorer)

	// The producer the loader adds for the scorer.
	key := scheduling.InFlightLoadKey.Name()
	producerType, producerParams, ok := defaultScorer.(scheduling.DefaultProducer).DefaultProducer(key)
	if !ok {
		t.Fatalf("token-load-scorer names no producer for %q", key)
	}
	producer := build(producerType, string(producerParams))
	produce := producer.(scheduling.DataProducer)
	preRequest := producer.(scheduling.PreRequest)
	streaming := producer.(scheduling.ResponseStreaming)
	complete := producer.(scheduling.ResponseComplete)

	eps := schedulingtest.Endpoints(3, nil)
	a, b := eps[0], eps[1] // eps[2] gets no request
	result := func(target *scheduling.Endpoint) *scheduling.Result {
		return &scheduling.Result{PrimaryProfile: "default", ProfileResults: map[string]*scheduling.ProfileResult{"default": {Targets: []*scheduling.Endpoint{target}}}}
	}
	send := func(req *scheduling.Request, target *scheduling.Endpoint) {
		produce.Produce(t.Context(), req, eps)
		preRequest.PreRequest(t.Context(), req, result(target))
		// Streamed chunks release nothing with GIE's accounting.
		streaming.ResponseStreaming(t.Context(), req, &scheduling.Response{}, []byte("data: {}\n\n"), target)
	}
	// 1000 prompt tokens: 1000 + 1500 = 2500.
	r1 := &scheduling.Request{ID: "r1", PromptTokens: 1000}
	// No token estimate: the text's 13 bytes are round(13/4) = 3 tokens,
	// 3 + round(4.5) = 8.
	r2 := &scheduling.Request{ID: "r2", Prompt: scheduling.Prompt{Text: []byte("Hello, world!")}}
	// 333 prompt tokens: 333 + round(499.5) = 833.
	r3 := &scheduling.Request{ID: "r3", PromptTokens: 333}
	send(r1, a)
	send(r2, a)
	send(r3, b)

	// GIE's scores: with the default threshold 1 − tokens/4194304, with a
	// threshold of 5000 tokens the literal values below.
	check := func(stage string, tokens [3]int64, small [3]float64) {
		t.Helper()
		req := &scheduling.Request{ID: "probe", PromptTokens: 10}
		produce.Produce(t.Context(), req, eps)
		scores := make([]float64, len(eps))
		defaultScorer.Score(t.Context(), req, eps, scores)
		for i, tok := range tokens {
			if want := 1 - float64(tok)/4194304; scores[i] != want {
				t.Errorf("%s, default threshold: score(%s) = %v, want %v (%d tokens)", stage, eps[i].Name(), scores[i], want, tok)
			}
		}
		smallScorer.Score(t.Context(), req, eps, scores)
		for i, want := range small {
			if d := scores[i] - want; d > 1e-12 || d < -1e-12 {
				t.Errorf("%s, threshold 5000: score(%s) = %v, want %v (%d tokens)", stage, eps[i].Name(), scores[i], want, tokens[i])
			}
		}
	}
	check("three requests in flight", [3]int64{2500 + 8, 833, 0}, [3]float64{0.4984, 0.8334, 1})

	// The end of r1's stream releases its 2500 tokens: A now ranks above B.
	complete.ResponseComplete(t.Context(), r1, &scheduling.Response{EndOfStream: true}, a)
	check("r1 complete", [3]int64{8, 833, 0}, [3]float64{0.9984, 0.8334, 1})

	complete.ResponseComplete(t.Context(), r2, &scheduling.Response{EndOfStream: true}, a)
	complete.ResponseComplete(t.Context(), r3, &scheduling.Response{Disconnected: true}, b)
	check("all complete", [3]int64{0, 0, 0}, [3]float64{1, 1, 1})
}
