package engineload

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/plugins/scorer/prefix"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

// BenchmarkScore scores n candidates, half of them holding the prompt's
// prefix in the real producer's index, all declaring slots, with the
// deadband open.
func BenchmarkScore(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) { benchScore(b, n) })
	}
}

func benchScore(b *testing.B, n int) {
	spec := make([]ep, n)
	for i := range spec {
		spec[i] = ep{name: fmt.Sprintf("e%d", i), wait: (i * 37) % 200, kv: float64(i%100) / 100, slots: 256}
	}
	eps := build(spec)
	pl, err := prefix.ProducerRegistration.Factory(prefix.ProducerType, json.RawMessage(`{"autoTune": false}`), schedulingtest.NewHandle(b))
	if err != nil {
		b.Fatal(err)
	}
	p := pl.(*prefix.Producer)
	text := []byte(strings.Repeat("a shared system prompt of some length. ", 40))
	ctx := context.Background()
	for i := 0; i < len(eps); i += 2 {
		req := &scheduling.Request{ID: "w", Model: "m", TargetModel: "m", Prompt: scheduling.Prompt{Text: text}}
		p.Produce(ctx, req, eps)
		p.PreRequest(ctx, req, &scheduling.Result{ProfileResults: map[string]*scheduling.ProfileResult{"d": {Targets: []*scheduling.Endpoint{eps[i]}}}, PrimaryProfile: "d"})
	}
	req := &scheduling.Request{ID: "r", Model: "m", TargetModel: "m", Prompt: scheduling.Prompt{Text: text}}
	p.Produce(ctx, req, eps)
	s := newScorer(b, "")
	scores := make([]float64, len(eps))
	b.ReportAllocs()
	for b.Loop() {
		clear(scores)
		s.Score(ctx, req, eps, scores)
	}
	if scores[0] == 0 {
		b.Fatal("no term")
	}
}
