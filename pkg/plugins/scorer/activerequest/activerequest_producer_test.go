package activerequest_test

import (
	"encoding/json"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/plugins"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

// TestWithProducer checks that the scorer reads the request counts of the
// inflight-load-producer, built through the in-tree registry as the
// configuration loader builds it, whatever the producer's token accounting:
// each request counts once, on its primary target (where the EPP forwards
// it), from PreRequest until its response completes.
func TestWithProducer(t *testing.T) {
	for _, params := range []string{"", `{"tokenAccounting": "llm-d", "addEstimatedOutputTokens": true}`} {
		t.Run("producer parameters "+params, func(t *testing.T) {
			reg := plugins.InTree()
			h := schedulingtest.NewHandle(t)
			build := func(typ, raw string) scheduling.Plugin {
				t.Helper()
				r, ok := reg.Lookup(typ)
				if !ok {
					t.Fatalf("type %q not registered", typ)
				}
				var p json.RawMessage
				if raw != "" {
					p = json.RawMessage(raw)
				}
				pl, err := r.Factory(typ, p, h)
				if err != nil {
					t.Fatalf("%s: %v", typ, err)
				}
				return pl
			}
			scorer := build("active-request-scorer", "").(scheduling.Scorer)
			typ, _, ok := scorer.(scheduling.DefaultProducer).DefaultProducer(scheduling.InFlightLoadKey.Name())
			if !ok {
				t.Fatal("active-request-scorer names no producer")
			}
			producer := build(typ, params)
			produce := producer.(scheduling.DataProducer)
			preRequest := producer.(scheduling.PreRequest)
			streaming := producer.(scheduling.ResponseStreaming)
			complete := producer.(scheduling.ResponseComplete)

			eps := schedulingtest.Endpoints(3, nil)
			a, b := eps[0], eps[1]
			result := func(targets ...*scheduling.Endpoint) *scheduling.Result {
				return &scheduling.Result{PrimaryProfile: "default", ProfileResults: map[string]*scheduling.ProfileResult{"default": {Targets: targets}}}
			}
			send := func(req *scheduling.Request, targets ...*scheduling.Endpoint) {
				produce.Produce(t.Context(), req, eps)
				preRequest.PreRequest(t.Context(), req, result(targets...))
				// A streamed chunk releases no request.
				streaming.ResponseStreaming(t.Context(), req, &scheduling.Response{}, []byte("data: {}\n\n"), targets[0])
			}
			check := func(stage string, want ...float64) {
				t.Helper()
				req := &scheduling.Request{}
				produce.Produce(t.Context(), req, eps)
				scores := make([]float64, len(eps))
				scorer.Score(t.Context(), req, eps, scores)
				for i, w := range want {
					if d := scores[i] - w; d > 1e-12 || d < -1e-12 {
						t.Errorf("%s: scores = %v, want %v", stage, scores, want)
						return
					}
				}
			}
			r1 := &scheduling.Request{PromptTokens: 100}
			r2 := &scheduling.Request{PromptTokens: 10}
			r3 := &scheduling.Request{PromptTokens: 1000}
			send(r1, a)
			send(r2, a)
			send(r3, b, a) // b primary, a fallback: b charged
			// Counts a 2, b 1, c 0: (2−2)/2, (2−1)/2, idle.
			check("three requests", 0, 0.5, 1)
			complete.ResponseComplete(t.Context(), r3, &scheduling.Response{EndOfStream: true}, b)
			// Counts a 2, b 0, c 0.
			check("r3 complete", 0, 1, 1)
			complete.ResponseComplete(t.Context(), r1, &scheduling.Response{Disconnected: true}, a)
			complete.ResponseComplete(t.Context(), r1, &scheduling.Response{EndOfStream: true}, a) // once only
			// Counts a 1.
			check("r1 complete", 0, 1, 1)
			complete.ResponseComplete(t.Context(), r2, &scheduling.Response{EndOfStream: true}, a)
			check("all complete", 1, 1, 1)
		})
	}
}
