package scrape

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/plugins/datalayer/coremetrics"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// FuzzParseMetrics: ParseMetrics never panics (its recover would turn a
// parser panic into a "parser failure" error, which the fuzzer reports),
// returns one of its documented errors, keeps values in range, and never
// returns load values with a *LoadUnknownError.
func FuzzParseMetrics(f *testing.F) {
	if body, err := os.ReadFile("testdata/vllm.txt"); err == nil {
		f.Add(body, uint8(0))
	}
	f.Add([]byte(seedVLLM), uint8(0))
	f.Add([]byte("nv_trt_llm_request_metrics{request_type=\"waiting\"} 3 1700000000000\n"), uint8(3))
	f.Add([]byte("sglang:cache_config_info{page_size=\"x\"} 1\nsglang:token_usage NaN\n"), uint8(1))
	f.Add([]byte("# TYPE trtllm_kv_cache_utilization histogram\ntrtllm_kv_cache_utilization_bucket{le=\"1\"} 1\n"), uint8(2))
	f.Add([]byte("vllm:lora_requests_info{running_lora_adapters=\"a,b\",max_lora=\"-5\"} -Inf\n"), uint8(0))
	f.Add([]byte("vllm:num_requests_waiting NaN\nvllm:num_requests_running -3\nvllm:kv_cache_usage_perc -Inf\n"), uint8(0))
	f.Add([]byte("sglang:num_queue_reqs +Inf\nsglang:num_running_reqs -0\nsglang:token_usage 7\n"), uint8(1))
	f.Add([]byte{}, uint8(0))
	x, err := coremetrics.New("x", coremetrics.DefaultParams(), nil)
	if err != nil {
		f.Fatal(err)
	}
	engines := x.Engines()
	names := []string{"vllm", "sglang", "trtllm-serve", "triton-tensorrt-llm"}
	f.Fuzz(func(t *testing.T, body []byte, engine uint8) {
		if len(body) > 1<<20 {
			return
		}
		m := engines[names[int(engine)%len(names)]]
		met, err := ParseMetrics(bytes.NewReader(body), m)
		var pe *PartialError
		var lu *LoadUnknownError
		switch {
		case err == nil, errors.As(err, &pe):
		case errors.As(err, &lu):
			if len(lu.Problems) == 0 || lu.Reason() == "" {
				t.Fatalf("load unknown without a reason: %v", err)
			}
			for _, p := range lu.Problems {
				if !slices.Contains(loadMetrics, p.Metric) || !slices.Contains([]string{ProblemAbsent, ProblemWrongType, ProblemNaN, ProblemInf, ProblemNegative}, p.Kind) {
					t.Fatalf("problem outside the closed sets: %+v", p)
				}
			}
			if !reflect.DeepEqual(met, scheduling.Metrics{}) {
				t.Fatalf("metrics returned with an unknown load: %+v", met)
			}
		case errors.Is(err, ErrNoMetrics):
		case errors.Is(err, ErrMalformed):
			if strings.Contains(err.Error(), "parser failure") {
				t.Fatalf("parser panicked: %v", err)
			}
		default:
			t.Fatalf("undocumented error: %v", err)
		}
		if met.KVCacheUsagePercent < 0 || met.KVCacheUsagePercent > 1 || met.WaitingQueueSize < 0 ||
			met.RunningRequestsSize < 0 || met.CacheBlockSize < 0 || met.CacheNumBlocks < 0 || met.MaxActiveModels < 0 {
			t.Fatalf("value out of range: %+v", met)
		}
		if err != nil && pe == nil && (met.WaitingQueueSize != 0 || met.ActiveModels != nil) {
			t.Fatalf("metrics returned with a full failure: %+v", met)
		}
		// Remembering the last parse changes no answer: after another
		// body, and again for the same body (the remembered one).
		var last lastParse
		last.reset(lastParseKey{engine: "k"})
		_, _ = parseMetrics(strings.NewReader(seedVLLM), m, &last)
		for round := range 2 {
			got, gotErr := parseMetrics(bytes.NewReader(body), m, &last)
			if !reflect.DeepEqual(got, met) || fmt.Sprint(gotErr) != fmt.Sprint(err) {
				t.Fatalf("round %d with the last parse remembered: %+v, %v; want %+v, %v", round, got, gotErr, met, err)
			}
		}
	})
}

const seedVLLM = `# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 4
vllm:num_requests_running{model_name="m"} 2 1700000000000
vllm:kv_cache_usage_perc{model_name="m"} 0.75
vllm:gpu_cache_usage_perc 0.5
vllm:cache_config_info{block_size="16",num_gpu_blocks="100"} 1
`
