package scrape

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/plugins/datalayer/coremetrics"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

func extractor(t testing.TB, p coremetrics.Params) *coremetrics.Extractor {
	t.Helper()
	x, err := coremetrics.New("core-metrics-extractor", p, nil)
	require.NoError(t, err)
	return x
}

func mapping(t testing.TB, engine string) coremetrics.EngineMapping {
	t.Helper()
	m, ok := extractor(t, coremetrics.DefaultParams()).Engines()[engine]
	require.True(t, ok, engine)
	return m
}

func TestParseMetricsEngines(t *testing.T) {
	vllm, err := os.ReadFile("testdata/vllm.txt")
	require.NoError(t, err)
	tests := []struct {
		name    string
		engine  string
		body    string
		want    scheduling.Metrics
		partial string // substring of the *PartialError, if any
	}{
		{
			name:   "vllm",
			engine: "vllm",
			body:   string(vllm),
			want: scheduling.Metrics{
				WaitingQueueSize: 3, RunningRequestsSize: 12, KVCacheUsagePercent: 0.4375,
				ActiveModels: map[string]int{"sql-lora": 0, "chat-lora": 0}, WaitingModels: map[string]int{}, MaxActiveModels: 4,
				CacheBlockSize: 16, CacheNumBlocks: 27000,
			},
		},
		{
			name:   "vllm before the kv_cache_usage_perc rename, without LoRA",
			engine: "vllm",
			body: `# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 1
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 2
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.25
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="32",num_gpu_blocks="1000"} 1
`,
			want:    scheduling.Metrics{WaitingQueueSize: 1, RunningRequestsSize: 2, KVCacheUsagePercent: 0.25, CacheBlockSize: 32, CacheNumBlocks: 1000},
			partial: "metric vllm:lora_requests_info not found",
		},
		{
			name:   "sglang",
			engine: "sglang",
			body: `# HELP sglang:num_queue_reqs The number of requests in the waiting queue
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="qwen",tp_rank="0"} 5.0
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="qwen",tp_rank="0"} 7.0
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="qwen",tp_rank="0"} 0.82
# TYPE sglang:cache_config_info gauge
sglang:cache_config_info{page_size="1",num_pages="500000"} 1.0
`,
			want: scheduling.Metrics{WaitingQueueSize: 5, RunningRequestsSize: 7, KVCacheUsagePercent: 0.82, CacheBlockSize: 1, CacheNumBlocks: 500000},
		},
		{
			name:   "trtllm-serve",
			engine: "trtllm-serve",
			body: `trtllm_num_requests_waiting 2
trtllm_num_requests_running 9
trtllm_kv_cache_utilization 0.5
trtllm_kv_cache_tokens_per_block 64
trtllm_kv_cache_max_blocks 4096
`,
			want: scheduling.Metrics{WaitingQueueSize: 2, RunningRequestsSize: 9, KVCacheUsagePercent: 0.5, CacheBlockSize: 64, CacheNumBlocks: 4096},
		},
		{
			name:   "triton tensorrt-llm labels",
			engine: "triton-tensorrt-llm",
			body: `# TYPE nv_trt_llm_request_metrics gauge
nv_trt_llm_request_metrics{model="ensemble",request_type="context",version="1"} 1
nv_trt_llm_request_metrics{model="ensemble",request_type="scheduled",version="1"} 6
nv_trt_llm_request_metrics{model="ensemble",request_type="max",version="1"} 256
nv_trt_llm_request_metrics{model="ensemble",request_type="waiting",version="1"} 4
# TYPE nv_trt_llm_kv_cache_block_metrics gauge
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max",model="ensemble",version="1"} 8192
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction",model="ensemble",version="1"} 0.125
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="tokens_per",model="ensemble",version="1"} 128
`,
			want: scheduling.Metrics{WaitingQueueSize: 4, RunningRequestsSize: 6, KVCacheUsagePercent: 0.125, CacheBlockSize: 128, CacheNumBlocks: 8192},
		},
		{
			name:   "newest timestamp wins, first on a tie",
			engine: "vllm",
			body: `vllm:num_requests_waiting{engine="0"} 1 1000
vllm:num_requests_waiting{engine="1"} 2 3000
vllm:num_requests_waiting{engine="2"} 3 2000
vllm:num_requests_running{engine="0"} 10
vllm:num_requests_running{engine="1"} 20
vllm:kv_cache_usage_perc 0.5
`,
			want:    scheduling.Metrics{WaitingQueueSize: 2, RunningRequestsSize: 10, KVCacheUsagePercent: 0.5},
			partial: "not found",
		},
		{
			name:   "LoRA: largest value wins; counters and untyped values; clamping",
			engine: "vllm",
			body: `# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="2",running_lora_adapters="a",waiting_lora_adapters=""} 100
vllm:lora_requests_info{max_lora="3",running_lora_adapters=" b , c ,",waiting_lora_adapters="d"} 300
vllm:lora_requests_info{max_lora="4",running_lora_adapters="e",waiting_lora_adapters=""} 200
# TYPE vllm:num_requests_waiting counter
vllm:num_requests_waiting 4.9
vllm:num_requests_running -3
vllm:kv_cache_usage_perc 1.5
vllm:cache_config_info{block_size="16"} 1
`,
			want: scheduling.Metrics{
				WaitingQueueSize: 4, RunningRequestsSize: 0, KVCacheUsagePercent: 1,
				ActiveModels: map[string]int{"b": 0, "c": 0}, WaitingModels: map[string]int{"d": 0}, MaxActiveModels: 3,
				CacheBlockSize: 16,
			},
		},
		{
			name:   "unrelated malformed lines are ignored",
			engine: "vllm",
			body: `this is { not metrics
# TYPE other summary
other{quantile="0.5"} x
vllm:num_requests_waiting 1
vllm:num_requests_running 1
vllm:kv_cache_usage_perc 0.1
vllm:lora_requests_info{running_lora_adapters=""} 1
vllm:cache_config_info 1
`,
			want: scheduling.Metrics{WaitingQueueSize: 1, RunningRequestsSize: 1, KVCacheUsagePercent: 0.1, ActiveModels: map[string]int{}, WaitingModels: map[string]int{}},
		},
		{
			name:   "bad label numbers and non-finite values are partial errors",
			engine: "vllm",
			body: `vllm:num_requests_waiting NaN
vllm:num_requests_running +Inf
vllm:kv_cache_usage_perc 0.3
vllm:lora_requests_info{max_lora="many"} 1
vllm:cache_config_info{block_size="x",num_gpu_blocks="-1"} 1
`,
			want:    scheduling.Metrics{KVCacheUsagePercent: 0.3, ActiveModels: map[string]int{}, WaitingModels: map[string]int{}},
			partial: `label max_lora="many" is not a non-negative integer`,
		},
		{
			name:   "histogram where a gauge is expected",
			engine: "vllm",
			body: `# TYPE vllm:num_requests_waiting histogram
vllm:num_requests_waiting_bucket{le="+Inf"} 1
vllm:num_requests_waiting_count 1
vllm:num_requests_waiting_sum 1
# TYPE vllm:num_requests_running summary
vllm:num_requests_running{quantile="0.5"} 1
vllm:num_requests_running_count 1
vllm:num_requests_running_sum 1
vllm:kv_cache_usage_perc 0.3
`,
			want:    scheduling.Metrics{KVCacheUsagePercent: 0.3},
			partial: "metric vllm:num_requests_running is a summary; want a gauge, counter or untyped metric",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseMetrics(strings.NewReader(tt.body), mapping(t, tt.engine))
			if tt.partial == "" {
				require.NoError(t, err)
			} else {
				var pe *PartialError
				require.True(t, errors.As(err, &pe), "want a *PartialError, got %v", err)
				assert.Contains(t, err.Error(), tt.partial)
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestParseMetricsErrors(t *testing.T) {
	tests := []struct {
		name string
		body string
		want error
		msg  string
	}{
		{"empty", "", ErrNoMetrics, "metric vllm:num_requests_waiting not found"},
		{"html", "<html><body>Not metrics</body></html>\n", ErrNoMetrics, "not found"},
		{"garbage in a wanted family", "vllm:num_requests_waiting{ 1\n", ErrMalformed, "line 1"},
		{"bad value", "vllm:kv_cache_usage_perc abc\n", ErrMalformed, "line 1"},
		{"line numbers are the body's", "# comment\nfoo 1\nvllm:num_requests_running 1 2 3\n", ErrMalformed, "line 3"},
		{"duplicate TYPE", "# TYPE vllm:num_requests_running gauge\n# TYPE vllm:num_requests_running gauge\n", ErrMalformed, "second TYPE"},
		{"no final newline", "vllm:num_requests_waiting 1", ErrMalformed, "unexpected end of input stream"},
		{"label mismatch", "nv_trt_llm_request_metrics{request_type=\"other\"} 1\n", ErrNoMetrics, "no series of nv_trt_llm_request_metrics matches nv_trt_llm_request_metrics{request_type=\"waiting\"}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			engine := "vllm"
			if strings.HasPrefix(tt.body, "nv_") {
				engine = "triton-tensorrt-llm"
			}
			got, err := ParseMetrics(strings.NewReader(tt.body), mapping(t, engine))
			require.ErrorIs(t, err, tt.want)
			assert.Contains(t, err.Error(), tt.msg)
			assert.Equal(t, scheduling.Metrics{}, got)
		})
	}

	t.Run("read error", func(t *testing.T) {
		_, err := ParseMetrics(iotest.ErrReader(io.ErrUnexpectedEOF), mapping(t, "vllm"))
		require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	})
	t.Run("no metric configured", func(t *testing.T) {
		got, err := ParseMetrics(strings.NewReader("garbage {{{\n"), coremetrics.EngineMapping{Name: "none"})
		require.NoError(t, err)
		assert.Equal(t, scheduling.Metrics{}, got)
	})
	t.Run("spec label that must be empty matches a missing label", func(t *testing.T) {
		spec, err := coremetrics.ParseMetricSpec(`q{kind=""}`)
		require.NoError(t, err)
		m := coremetrics.EngineMapping{Name: "x", QueuedRequests: spec}
		got, err := ParseMetrics(strings.NewReader("q{kind=\"a\"} 1\nq 2\n"), m)
		require.NoError(t, err)
		assert.Equal(t, 2, got.WaitingQueueSize)
	})
}

// TestParseMetricsLongLines: lines longer than the filter's buffer are
// handled in pieces, kept or dropped whole.
func TestParseMetricsLongLines(t *testing.T) {
	long := strings.Repeat("x", 3*maxLineBuffer)
	body := "other{l=\"" + long + "\"} 1\n" +
		"vllm:num_requests_waiting{l=\"" + long + "\"} 5\n" +
		"vllm:num_requests_running 1\nvllm:kv_cache_usage_perc 0.5\n"
	got, err := ParseMetrics(strings.NewReader(body), mapping(t, "vllm"))
	var pe *PartialError
	require.True(t, errors.As(err, &pe), "%v", err)
	assert.Equal(t, 5, got.WaitingQueueSize)
	assert.Equal(t, 1, got.RunningRequestsSize)
	assert.Equal(t, 0.5, got.KVCacheUsagePercent)
}

func TestFamilyOf(t *testing.T) {
	tests := []struct{ line, want string }{
		{"foo 1\n", "foo"},
		{"  foo{a=\"b\"} 1\n", "foo"},
		{"foo\t1", "foo"},
		{"# HELP foo help text\n", "foo"},
		{"#\tTYPE  foo gauge\n", "foo"},
		{"# TYPEfoo gauge\n", ""},
		{"# comment\n", ""},
		{"\n", ""},
		{"", ""},
		{"{\"quoted\"} 1\n", ""},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, string(familyOf([]byte(tt.line))), "%q", tt.line)
	}
}

// TestMatchesAgreesWithSpec: the allocation-free matcher has the semantics
// of coremetrics.MetricSpec.Matches.
func TestMatchesAgreesWithSpec(t *testing.T) {
	spec, err := coremetrics.ParseMetricSpec(`m{a="1",b=""}`)
	require.NoError(t, err)
	body := "m{a=\"1\"} 1\nm{a=\"1\",b=\"\"} 1\nm{a=\"1\",b=\"2\"} 1\nm{b=\"\"} 1\nm 1\n"
	p := parsers.Get().(*parser)
	defer p.release()
	fams, err := p.tp.TextToMetricFamilies(bytes.NewReader([]byte(body)))
	require.NoError(t, err)
	for _, s := range fams["m"].GetMetric() {
		labels := map[string]string{}
		for _, l := range s.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		assert.Equal(t, spec.Matches(labels), matches(s, spec), "%v", labels)
	}
}

func BenchmarkParseMetricsVLLM(b *testing.B) {
	body, err := os.ReadFile("testdata/vllm.txt")
	require.NoError(b, err)
	m := mapping(b, "vllm")
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseMetrics(bytes.NewReader(body), m); err != nil {
			b.Fatal(err)
		}
	}
}
