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
	"github.com/switchyard-ai/switchyard/pkg/plugins/admitter/kvsaturation"
	"github.com/switchyard-ai/switchyard/pkg/plugins/scorer/engineload"
	"github.com/switchyard-ai/switchyard/pkg/plugins/scorer/usageweight"
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

// allTermsSample runs every term of issue 12 together.
const allTermsSample = "samples/strategies2-all-terms.yaml"

// TestAllTermsSampleHasEveryTerm pins that allTermsSample (which
// BenchmarkDefaultProfileWithAllIssue12Terms measures) really has every
// term of issue 12 in its profile: the served-model-filter, KV-saturation
// admission, the engine-load and usage-weight terms (quota-aware), model
// fallback chains and cache-control injection.
func TestAllTermsSampleHasEveryTerm(t *testing.T) {
	doc, err := configfiles.Samples.ReadFile(allTermsSample)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	loaded, err := config.Load(doc, config.Options{Registry: plugins.InTree(), Context: ctx, Registerer: prometheus.NewRegistry(), Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer loaded.Close()
	types := map[string]bool{}
	for _, prof := range loaded.Config.SchedulingProfiles {
		for _, ref := range prof.Plugins {
			if ref.Weight != nil && !(*ref.Weight > 0) {
				continue
			}
			switch p := loaded.Plugins[ref.PluginRef].(type) {
			case *usageweight.Scorer:
				if !p.QuotaAware() {
					t.Errorf("%s: quotaAware is off", ref.PluginRef)
				}
				types["usage-weight"] = true
			case *engineload.Scorer:
				types["engine-load"] = true
			}
			types[ref.PluginRef] = true
		}
	}
	for _, want := range []string{"served-model-filter", "queue-scorer", "kv-cache-utilization-scorer", "prefix-cache-scorer", "engine-load", "usage-weight"} {
		if !types[want] {
			t.Errorf("the profile lacks %s", want)
		}
	}
	admits := false
	for _, p := range loaded.Plugins {
		if _, ok := p.(*kvsaturation.Admitter); ok {
			admits = true
		}
	}
	if !admits {
		t.Error("no kv-saturation-admitter")
	}
	if len(loaded.Config.FallbackChains) == 0 {
		t.Error("no fallbackChains")
	}
	if pr := loaded.Config.PrefixRouting; pr == nil || !pr.AnthropicCacheControlInjection {
		t.Error("cache-control injection is off")
	}
}

// BenchmarkDefaultProfileWithAllIssue12Terms is
// BenchmarkDefaultProfileWithIssue12Terms with the usage-weight term
// (quota-aware) too: every term of issue 12 at once (allTermsSample).
// Half the endpoints front metered providers and declare TPM and RPM
// limits, with metered usage; half of those also have an observed quota
// snapshot from rate-limit headers; the other half are engines that
// declare nothing. Producers, admission, the profile and PreRequest run
// as the server runs them. The target is < 100 µs per request at 1000
// endpoints.
func BenchmarkDefaultProfileWithAllIssue12Terms(b *testing.B) {
	doc, err := configfiles.Samples.ReadFile(allTermsSample)
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
			defer loaded.Close()
			now := time.Now()
			eps := st.Endpoints(n, func(i int, e *st.EndpointBuilder) {
				e.UpdateTime(now).Queue((i%7)*40).KVCache(float64(i%10)/10).Label("switchyard.ai/total-slots", "256")
				if i%2 == 0 { // declared: a metered provider
					e.Attr(usageweight.ProviderTPMAttribute, 100000).Attr(usageweight.ProviderRPMAttribute, 100)
				}
			})
			for i, e := range eps {
				if i%2 != 0 {
					continue
				}
				resp := &scheduling.Response{StatusCode: 200, Usage: scheduling.Usage{TotalTokens: i + 1}}
				if i%4 == 0 { // observed: the provider's own quota headers
					resp.Headers = map[string]string{"x-ratelimit-limit-requests": "100", "x-ratelimit-remaining-requests": strconv.Itoa(i % 100)}
				}
				req := &scheduling.Request{ID: "warm"}
				loaded.Scheduler.ResponseReceived(ctx, req, resp, e)
				loaded.Scheduler.ResponseComplete(ctx, req, resp, e)
			}
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
