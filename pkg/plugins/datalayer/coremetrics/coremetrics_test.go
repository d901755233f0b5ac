package coremetrics

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/scheduling/schedulingtest"
)

func build(t testing.TB, raw string) (*Extractor, error) {
	t.Helper()
	var params json.RawMessage
	if raw != "" {
		params = json.RawMessage(raw)
	}
	p, err := Registration.Factory("cme", params, schedulingtest.NewHandle(t))
	if err != nil {
		return nil, err
	}
	return p.(*Extractor), nil
}

var builtinNames = []string{"sglang", "triton-tensorrt-llm", "trtllm-serve", "vllm"}

func TestParams(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		raw         string
		wantErrs    []string
		wantLabel   string
		wantDefault string
		wantEngines []string
	}{
		{name: "no parameters gives the defaults", wantLabel: DefaultEngineLabelKey, wantDefault: "vllm", wantEngines: builtinNames},
		{name: "null parameters", raw: `null`, wantLabel: DefaultEngineLabelKey, wantDefault: "vllm", wantEngines: builtinNames},
		{name: "empty strings mean the defaults, as in GIE", raw: `{"engineLabelKey": "", "defaultEngine": ""}`, wantLabel: DefaultEngineLabelKey, wantDefault: "vllm", wantEngines: builtinNames},
		{name: "built-in default engine", raw: `{"defaultEngine": "sglang", "engineLabelKey": "engine"}`, wantLabel: "engine", wantDefault: "sglang", wantEngines: builtinNames},
		{name: "prefixed label key", raw: `{"engineLabelKey": "example.com/engine_type"}`, wantLabel: "example.com/engine_type", wantDefault: "vllm", wantEngines: builtinNames},
		{
			name:        "added engine as default",
			raw:         `{"defaultEngine": "triton", "engineConfigs": [{"name": "triton", "queuedRequestsSpec": "q{t=w}", "kvUsageSpec": "kv"}]}`,
			wantLabel:   DefaultEngineLabelKey,
			wantDefault: "triton",
			wantEngines: []string{"sglang", "triton", "triton-tensorrt-llm", "trtllm-serve", "vllm"},
		},
		{name: "replaced built-in", raw: `{"engineConfigs": [{"name": "vllm", "kvUsageSpec": "vllm:kv_cache_usage_perc"}]}`, wantLabel: DefaultEngineLabelKey, wantDefault: "vllm", wantEngines: builtinNames},
		{name: "unknown key", raw: `{"engines": []}`, wantErrs: []string{`unknown field "engines"`}},
		{name: "unknown key in an engine", raw: `{"engineConfigs": [{"name": "x", "kvSpec": "kv"}]}`, wantErrs: []string{`unknown field "engineConfigs[0].kvSpec"`}},
		{name: "wrong type", raw: `{"engineConfigs": {"name": "x"}}`, wantErrs: []string{"engineConfigs: expected a list"}},
		{name: "wrong type in an engine", raw: `{"engineConfigs": [{"name": 1}]}`, wantErrs: []string{"engineConfigs.name: expected a string"}},
		{name: "unknown default engine", raw: `{"defaultEngine": "tgi"}`, wantErrs: []string{`defaultEngine: "tgi" is not a known engine (known: sglang, triton-tensorrt-llm, trtllm-serve, vllm)`}},
		{name: "reserved default engine", raw: `{"defaultEngine": "default"}`, wantErrs: []string{`defaultEngine: "default" is not a known engine`}},
		{name: "invalid label key", raw: `{"engineLabelKey": "engine type"}`, wantErrs: []string{`engineLabelKey: invalid label key "engine type"`}},
		{name: "invalid label key prefix", raw: `{"engineLabelKey": "Example.com/engine"}`, wantErrs: []string{`engineLabelKey: invalid label key "Example.com/engine": the prefix`}},
		{name: "label key name too long", raw: `{"engineLabelKey": "` + strings.Repeat("a", 64) + `"}`, wantErrs: []string{"engineLabelKey: invalid label key"}},
		{name: "empty engine name", raw: `{"engineConfigs": [{"kvUsageSpec": "kv"}]}`, wantErrs: []string{"engineConfigs[0].name: must not be empty"}},
		{name: "reserved engine name", raw: `{"engineConfigs": [{"name": "default"}]}`, wantErrs: []string{`engineConfigs[0].name: "default" is reserved`}},
		{name: "duplicate engine", raw: `{"engineConfigs": [{"name": "a"}, {"name": "a"}]}`, wantErrs: []string{`engineConfigs[1].name: engine "a" is configured twice`}},
		{
			name:     "invalid spec",
			raw:      `{"engineConfigs": [{"name": "a"}, {"name": "b", "kvUsageSpec": "foo{"}]}`,
			wantErrs: []string{`engineConfigs[1].kvUsageSpec: invalid metric spec "foo{": missing "}" at offset 4`},
		},
		{name: "invalid cache label name", raw: `{"engineConfigs": [{"name": "a", "cacheBlockSizeLabelName": "page-size"}]}`, wantErrs: []string{`engineConfigs[0].cacheBlockSizeLabelName: must be a Prometheus label name`}},
		{
			name: "every problem is reported",
			raw: `{"engineLabelKey": "a b", "defaultEngine": "nope", "engineConfigs": [
				{"name": "x", "queuedRequestsSpec": "1q", "runningRequestsSpec": "r{a!=b}", "kvUsageSpec": "kv{", "loraSpec": "{}",
				 "cacheInfoSpec": "c{__x=1}", "cacheBlockSizeSpec": "b b", "cacheNumBlocksSpec": "n{a=1,a=2}",
				 "cacheBlockSizeLabelName": "1", "cacheNumBlocksLabelName": "a.b"},
				{"name": "default"}, {"name": ""}, {"name": "x"}]}`,
			wantErrs: []string{
				"engineLabelKey: invalid label key",
				"engineConfigs[0].queuedRequestsSpec: invalid metric spec",
				"engineConfigs[0].runningRequestsSpec: invalid metric spec",
				"engineConfigs[0].kvUsageSpec: invalid metric spec",
				"engineConfigs[0].loraSpec: invalid metric spec",
				"engineConfigs[0].cacheInfoSpec: invalid metric spec",
				"engineConfigs[0].cacheBlockSizeSpec: invalid metric spec",
				"engineConfigs[0].cacheNumBlocksSpec: invalid metric spec",
				"engineConfigs[0].cacheBlockSizeLabelName: must be a Prometheus label name",
				"engineConfigs[0].cacheNumBlocksLabelName: must be a Prometheus label name",
				`engineConfigs[1].name: "default" is reserved`,
				"engineConfigs[2].name: must not be empty",
				`engineConfigs[3].name: engine "x" is configured twice`,
				`defaultEngine: "nope" is not a known engine`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			x, err := build(t, tt.raw)
			if len(tt.wantErrs) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if x.EngineLabelKey() != tt.wantLabel || x.DefaultEngine() != tt.wantDefault {
					t.Errorf("label key, default engine = %q, %q; want %q, %q", x.EngineLabelKey(), x.DefaultEngine(), tt.wantLabel, tt.wantDefault)
				}
				if got := engineNames(x.Engines()); !slices.Equal(got, tt.wantEngines) {
					t.Errorf("engines = %v, want %v", got, tt.wantEngines)
				}
				if got := x.TypedName(); got != (scheduling.TypedName{Type: Type, Name: "cme"}) {
					t.Errorf("TypedName() = %v", got)
				}
				return
			}
			if err == nil {
				t.Fatalf("want errors %q, got none", tt.wantErrs)
			}
			leaves := scheduling.Errors(err)
			if len(leaves) != len(tt.wantErrs) {
				t.Fatalf("got %d errors, want %d:\n%v", len(leaves), len(tt.wantErrs), err)
			}
			for i, want := range tt.wantErrs {
				if !strings.Contains(leaves[i].Error(), want) {
					t.Errorf("error %d = %q, want it to contain %q", i, leaves[i], want)
				}
			}
		})
	}
}

func spec(name string, labels ...string) *MetricSpec {
	m := &MetricSpec{Name: name, Labels: map[string]string{}}
	for i := 0; i+1 < len(labels); i += 2 {
		m.Labels[labels[i]] = labels[i+1]
	}
	return m
}

func equalMappings(a, b EngineMapping) bool {
	return a.Name == b.Name &&
		equalSpecs(a.QueuedRequests, b.QueuedRequests) &&
		equalSpecs(a.RunningRequests, b.RunningRequests) &&
		equalSpecs(a.KVUsage, b.KVUsage) &&
		equalSpecs(a.KVUsageFallback, b.KVUsageFallback) &&
		equalSpecs(a.LoRA, b.LoRA) &&
		equalSpecs(a.CacheInfo, b.CacheInfo) &&
		a.CacheBlockSizeLabel == b.CacheBlockSizeLabel &&
		a.CacheNumBlocksLabel == b.CacheNumBlocksLabel &&
		equalSpecs(a.CacheBlockSize, b.CacheBlockSize) &&
		equalSpecs(a.CacheNumBlocks, b.CacheNumBlocks)
}

func TestBuiltinEngines(t *testing.T) {
	t.Parallel()
	x, err := build(t, "")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]EngineMapping{
		"vllm": {
			Name:                "vllm",
			QueuedRequests:      spec("vllm:num_requests_waiting"),
			RunningRequests:     spec("vllm:num_requests_running"),
			KVUsage:             spec("vllm:kv_cache_usage_perc"),
			KVUsageFallback:     spec("vllm:gpu_cache_usage_perc"),
			LoRA:                spec("vllm:lora_requests_info"),
			CacheInfo:           spec("vllm:cache_config_info"),
			CacheBlockSizeLabel: "block_size",
			CacheNumBlocksLabel: "num_gpu_blocks",
		},
		"sglang": {
			Name:                "sglang",
			QueuedRequests:      spec("sglang:num_queue_reqs"),
			RunningRequests:     spec("sglang:num_running_reqs"),
			KVUsage:             spec("sglang:token_usage"),
			CacheInfo:           spec("sglang:cache_config_info"),
			CacheBlockSizeLabel: "page_size",
			CacheNumBlocksLabel: "num_pages",
		},
		"trtllm-serve": {
			Name:                "trtllm-serve",
			QueuedRequests:      spec("trtllm_num_requests_waiting"),
			RunningRequests:     spec("trtllm_num_requests_running"),
			KVUsage:             spec("trtllm_kv_cache_utilization"),
			CacheBlockSizeLabel: "block_size",
			CacheNumBlocksLabel: "num_gpu_blocks",
			CacheBlockSize:      spec("trtllm_kv_cache_tokens_per_block"),
			CacheNumBlocks:      spec("trtllm_kv_cache_max_blocks"),
		},
		"triton-tensorrt-llm": {
			Name:                "triton-tensorrt-llm",
			QueuedRequests:      spec("nv_trt_llm_request_metrics", "request_type", "waiting"),
			RunningRequests:     spec("nv_trt_llm_request_metrics", "request_type", "scheduled"),
			KVUsage:             spec("nv_trt_llm_kv_cache_block_metrics", "kv_cache_block_type", "fraction"),
			CacheBlockSizeLabel: "block_size",
			CacheNumBlocksLabel: "num_gpu_blocks",
			CacheBlockSize:      spec("nv_trt_llm_kv_cache_block_metrics", "kv_cache_block_type", "tokens_per"),
			CacheNumBlocks:      spec("nv_trt_llm_kv_cache_block_metrics", "kv_cache_block_type", "max"),
		},
	}
	got := x.Engines()
	if len(got) != len(want) {
		t.Fatalf("Engines() has %v, want %v", engineNames(got), builtinNames)
	}
	for name, w := range want {
		if g := got[name]; !equalMappings(g, w) {
			t.Errorf("engine %s:\n got %+v\nwant %+v", name, g, w)
		}
	}
	// Engines returns a copy.
	delete(got, "vllm")
	if _, ok := x.Engines()["vllm"]; !ok {
		t.Error("Engines() returned the extractor's own map")
	}
}

func TestReplacedBuiltinHasNoFallbackAndDisablesOmittedSpecs(t *testing.T) {
	t.Parallel()
	x, err := build(t, `{"engineConfigs": [{"name": "vllm", "queuedRequestsSpec": "vllm:num_requests_waiting", "kvUsageSpec": "vllm:kv_cache_usage_perc", "loraSpec": ""}]}`)
	if err != nil {
		t.Fatal(err)
	}
	want := EngineMapping{
		Name:                "vllm",
		QueuedRequests:      spec("vllm:num_requests_waiting"),
		KVUsage:             spec("vllm:kv_cache_usage_perc"),
		CacheBlockSizeLabel: "block_size",
		CacheNumBlocksLabel: "num_gpu_blocks",
	}
	if got := x.Engines()["vllm"]; !equalMappings(got, want) {
		t.Errorf("vllm:\n got %+v\nwant %+v", got, want)
	}
	if got := x.Engines()["sglang"]; got.KVUsage == nil {
		t.Error("replacing vllm must keep the other built-ins")
	}
}

func TestMappingFor(t *testing.T) {
	t.Parallel()
	x, err := build(t, `{"engineLabelKey": "engine", "defaultEngine": "sglang", "engineConfigs": [{"name": "custom", "kvUsageSpec": "custom_kv"}]}`)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		labels map[string]string
		want   string
	}{
		{name: "no labels", labels: nil, want: "sglang"},
		{name: "label missing", labels: map[string]string{"app": "x"}, want: "sglang"},
		{name: "empty label", labels: map[string]string{"engine": ""}, want: "sglang"},
		{name: "unknown engine", labels: map[string]string{"engine": "tgi"}, want: "sglang"},
		{name: "reserved name", labels: map[string]string{"engine": "default"}, want: "sglang"},
		{name: "built-in", labels: map[string]string{"engine": "vllm"}, want: "vllm"},
		{name: "configured", labels: map[string]string{"engine": "custom"}, want: "custom"},
		{name: "other label key is ignored", labels: map[string]string{DefaultEngineLabelKey: "vllm"}, want: "sglang"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := x.MappingFor(tt.labels).Name; got != tt.want {
				t.Errorf("MappingFor(%v) = %q, want %q", tt.labels, got, tt.want)
			}
		})
	}
}

func TestIsDataExtractor(t *testing.T) {
	t.Parallel()
	x, err := build(t, "")
	if err != nil {
		t.Fatal(err)
	}
	var p scheduling.Plugin = x
	if _, ok := p.(scheduling.DataExtractor); !ok {
		t.Errorf("%T is not a scheduling.DataExtractor", p)
	}
}

// The loader records the effective parameters as JSON; they must load
// again to the same engines.
func TestParamsRoundTrip(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{`{}`, `{"defaultEngine": "x", "engineConfigs": [{"name": "x", "kvUsageSpec": "kv{a=b}", "cacheNumBlocksLabelName": "n"}]}`} {
		p := DefaultParams()
		if err := json.Unmarshal([]byte(raw), &p); err != nil {
			t.Fatal(err)
		}
		out, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		a, err := build(t, raw)
		if err != nil {
			t.Fatal(err)
		}
		b, err := build(t, string(out))
		if err != nil {
			t.Fatalf("effective parameters %s do not load: %v", out, err)
		}
		for name, m := range a.Engines() {
			if !equalMappings(m, b.Engines()[name]) {
				t.Errorf("%s: engine %s changed after a round trip through %s", raw, name, out)
			}
		}
	}
}
