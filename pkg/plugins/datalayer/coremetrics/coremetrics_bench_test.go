package coremetrics

import (
	"encoding/json"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

// The extractor does no per-request work. These benchmarks measure what it
// does run: building it from configuration (once per load), the engine
// lookup the scraper makes for each endpoint on each scrape, and spec
// parsing.

func BenchmarkFactory(b *testing.B) {
	raw := json.RawMessage(`{"defaultEngine": "triton", "engineConfigs": [
		{"name": "triton", "queuedRequestsSpec": "nv_trt_llm_request_metrics{request_type=waiting}",
		 "runningRequestsSpec": "nv_trt_llm_request_metrics{request_type=scheduled}",
		 "kvUsageSpec": "nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=fraction}"}]}`)
	h := schedulingtest.NewHandle(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Registration.Factory("cme", raw, h); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMappingFor(b *testing.B) {
	x, err := build(b, "")
	if err != nil {
		b.Fatal(err)
	}
	labels := map[string]string{"app": "vllm", DefaultEngineLabelKey: "sglang"}
	b.ReportAllocs()
	for b.Loop() {
		_ = x.MappingFor(labels)
	}
}

func BenchmarkParseMetricSpec(b *testing.B) {
	for _, s := range []string{
		"vllm:num_requests_waiting",
		`nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction", model="llama"}`,
	} {
		b.Run(s, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ParseMetricSpec(s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
