package usageweight_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-ai/switchyard/pkg/config"
	"github.com/switchyard-ai/switchyard/pkg/plugins"
	"github.com/switchyard-ai/switchyard/pkg/plugins/scorer/usageweight"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	st "github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

// defaultWithUsage is config/default.yaml's profile plus the usage-weight
// term with quota-aware observation.
const defaultWithUsage = `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: prefix-cache-scorer
- type: usage-weight-scorer
  parameters: {quotaAware: {enabled: true}}
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
    weight: 2
  - pluginRef: kv-cache-utilization-scorer
    weight: 2
  - pluginRef: prefix-cache-scorer
    weight: 3
  - pluginRef: usage-weight-scorer
  - pluginRef: max-score-picker
`

// BenchmarkDefaultProfileWithUsageWeight schedules requests (producers,
// profile, PreRequest) with the default profile plus the usage term, over
// endpoints that all declare limits and have metered usage and a quota
// snapshot; compare with pkg/config's BenchmarkDefaultProfile.
func BenchmarkDefaultProfileWithUsageWeight(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			loaded, err := config.Load([]byte(defaultWithUsage), config.Options{Registry: plugins.InTree(), Context: ctx, Registerer: prometheus.NewRegistry(), Seed: 1})
			if err != nil {
				b.Fatal(err)
			}
			defer loaded.Close()
			eps := st.Endpoints(n, func(i int, e *st.EndpointBuilder) {
				e.Queue(i%7).KVCache(float64(i%10)/10).Attr(usageweight.ProviderTPMAttribute, 100000).Attr(usageweight.ProviderRPMAttribute, 100)
			})
			for i, e := range eps {
				resp := &scheduling.Response{StatusCode: 200, Usage: scheduling.Usage{TotalTokens: i + 1},
					Headers: map[string]string{"x-ratelimit-limit-requests": "100", "x-ratelimit-remaining-requests": fmt.Sprint(i % 100)}}
				req := &scheduling.Request{ID: "warm"}
				loaded.Scheduler.ResponseReceived(ctx, req, resp, e)
				loaded.Scheduler.ResponseComplete(ctx, req, resp, e)
			}
			// As pkg/config's BenchmarkDefaultProfile: 4 KB prompts of 64
			// groups sharing a 2 KB prefix, each group routed once before.
			prompts := make([][]byte, 64)
			for g := range prompts {
				prompts[g] = append(prompt(fmt.Sprintf("group-%d", g), 2048), prompt(fmt.Sprintf("tail-%d", g), 2048)...)
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

func prompt(seed string, n int) []byte {
	var b strings.Builder
	for b.Len() < n {
		b.WriteString(seed)
		b.WriteString(strings.Repeat("-", 63-len(seed)))
		b.WriteByte('\n')
	}
	return []byte(b.String()[:n])
}
