package config_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	configfiles "github.com/switchyard-ai/switchyard/config"
	"github.com/switchyard-ai/switchyard/pkg/config"
	"github.com/switchyard-ai/switchyard/pkg/plugins"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	st "github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

// BenchmarkDefaultProfileWithIssue12Terms is BenchmarkDefaultProfile with
// issue 12's terms added (config/samples/strategies2-engine-load-term.yaml:
// served-model-filter, kv-saturation-admitter, engine-load-scorer on top
// of the default scorers): producers, admission, the profile and PreRequest,
// as the server runs them. Endpoints have fresh metrics and waiting queues
// that open the engine-load deadband; prompts share 2 KB prefixes in 64
// groups. The target is < 100 µs per request at 1000 endpoints.
func BenchmarkDefaultProfileWithIssue12Terms(b *testing.B) {
	doc, err := configfiles.Samples.ReadFile("samples/strategies2-engine-load-term.yaml")
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			loaded, err := config.Load(doc, config.Options{Registry: plugins.InTree(), Context: ctx, Registerer: prometheus.NewRegistry(), Seed: 1})
			if err != nil {
				b.Fatal(err)
			}
			now := time.Now()
			eps := st.Endpoints(n, func(i int, e *st.EndpointBuilder) {
				e.UpdateTime(now).Queue((i%7)*40).KVCache(float64(i%10)/10).Label("switchyard.ai/total-slots", "256")
			})
			prompts := make([][]byte, 64)
			for g := range prompts {
				prompts[g] = append(prompt("group-"+strconv.Itoa(g), 2048), prompt("tail-"+strconv.Itoa(g), 2048)...)
			}
			for r := 0; r < 4; r++ {
				for g := range prompts {
					req := &scheduling.Request{ID: "warm", Model: "m", TargetModel: "m", Prompt: scheduling.Prompt{Text: prompts[g]}}
					if _, err := loaded.Scheduler.Process(ctx, req, eps); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				req := &scheduling.Request{ID: "r", Model: "m", TargetModel: "m", Prompt: scheduling.Prompt{Text: prompts[i%64]}}
				if _, err := loaded.Scheduler.Process(ctx, req, eps); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
