package config_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	configfiles "github.com/switchyard-ai/switchyard/config"
	"github.com/switchyard-ai/switchyard/pkg/config"
	"github.com/switchyard-ai/switchyard/pkg/plugins"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	st "github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

// BenchmarkDefaultProfile schedules requests with the shipped default
// configuration (queue, KV cache and prefix scorers, max-score picker) the
// way the server does: data producers, admission, the profile, PreRequest
// (which updates the prefix index). Prompts are 4 KB and come from 64
// groups that share a 2 KB prefix, so the index holds real hits.
func BenchmarkDefaultProfile(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			loaded, err := config.Load(configfiles.Default, config.Options{Registry: plugins.InTree(), Context: ctx, Registerer: prometheus.NewRegistry(), Seed: 1})
			if err != nil {
				b.Fatal(err)
			}
			eps := st.Endpoints(n, func(i int, e *st.EndpointBuilder) {
				e.Queue(i % 7).KVCache(float64(i%10) / 10)
			})
			prompts := make([][]byte, 64)
			for g := range prompts {
				prompts[g] = append(prompt("group-"+strconv.Itoa(g), 2048), prompt("tail-"+strconv.Itoa(g), 2048)...)
			}
			// Warm the index: every group has been routed once.
			for g := range prompts {
				req := &scheduling.Request{ID: "warm", Model: "m", TargetModel: "m", Prompt: scheduling.Prompt{Text: prompts[g]}}
				if _, err := loaded.Scheduler.Process(ctx, req, eps); err != nil {
					b.Fatal(err)
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

// BenchmarkDefaultProfileSharedSystemPrompt is BenchmarkDefaultProfile when
// every endpoint already holds the same 2 KB system prompt, the worst case
// for the prefix match: every endpoint has a hit on every request. Before
// the timer starts, each endpoint is sent (as the only candidate) a 4 KB
// prompt that starts with the system prompt; the measured requests are the
// system prompt followed by one of 64 distinct 2 KB tails.
func BenchmarkDefaultProfileSharedSystemPrompt(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			loaded, err := config.Load(configfiles.Default, config.Options{Registry: plugins.InTree(), Context: ctx, Registerer: prometheus.NewRegistry(), Seed: 1})
			if err != nil {
				b.Fatal(err)
			}
			eps := st.Endpoints(n, func(i int, e *st.EndpointBuilder) {
				e.Queue(i % 7).KVCache(float64(i%10) / 10)
			})
			system := prompt("system", 2048)
			// Warm the index: every endpoint holds the system prompt (and a
			// private tail).
			for i := range eps {
				text := append(append([]byte(nil), system...), prompt("warm-"+strconv.Itoa(i), 2048)...)
				req := &scheduling.Request{ID: "warm", Model: "m", TargetModel: "m", Prompt: scheduling.Prompt{Text: text}}
				if _, err := loaded.Scheduler.Process(ctx, req, eps[i:i+1]); err != nil {
					b.Fatal(err)
				}
			}
			prompts := make([][]byte, 64)
			for g := range prompts {
				prompts[g] = append(append([]byte(nil), system...), prompt("tail-"+strconv.Itoa(g), 2048)...)
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
