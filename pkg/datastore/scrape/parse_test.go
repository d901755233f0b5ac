package scrape

import (
	"bytes"
	"cmp"
	"errors"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
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
			name:   "LoRA: largest value wins; counters and untyped values; pessimistic clamping",
			engine: "vllm",
			body: `# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="2",running_lora_adapters="a",waiting_lora_adapters=""} 100
vllm:lora_requests_info{max_lora="3",running_lora_adapters=" b , c ,",waiting_lora_adapters="d"} 300
vllm:lora_requests_info{max_lora="4",running_lora_adapters="e",waiting_lora_adapters=""} 200
# TYPE vllm:num_requests_waiting counter
vllm:num_requests_waiting 4.9
vllm:num_requests_running 1e12
vllm:kv_cache_usage_perc 1.5
vllm:cache_config_info{block_size="16"} 1
`,
			want: scheduling.Metrics{
				WaitingQueueSize: 4, RunningRequestsSize: math.MaxInt32, KVCacheUsagePercent: 1,
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
			name:   "negative zero is zero",
			engine: "vllm",
			body: `vllm:num_requests_waiting -0
vllm:num_requests_running -0.0
vllm:kv_cache_usage_perc -0
vllm:lora_requests_info 1
vllm:cache_config_info 1
`,
			want: scheduling.Metrics{ActiveModels: map[string]int{}, WaitingModels: map[string]int{}},
		},
		{
			name:   "bad non-load values are partial errors",
			engine: "vllm",
			body: `vllm:num_requests_waiting 1
vllm:num_requests_running 2
vllm:kv_cache_usage_perc 0.3
vllm:lora_requests_info{max_lora="many"} 1
vllm:cache_config_info{block_size="x",num_gpu_blocks="-1"} 1
`,
			want:    scheduling.Metrics{WaitingQueueSize: 1, RunningRequestsSize: 2, KVCacheUsagePercent: 0.3, ActiveModels: map[string]int{}, WaitingModels: map[string]int{}},
			partial: `label max_lora="many" is not a non-negative integer`,
		},
		{
			name:   "non-finite cache gauges are partial errors",
			engine: "trtllm-serve",
			body: `trtllm_num_requests_waiting 2
trtllm_num_requests_running 9
trtllm_kv_cache_utilization 0.5
trtllm_kv_cache_tokens_per_block NaN
trtllm_kv_cache_max_blocks -Inf
`,
			want:    scheduling.Metrics{WaitingQueueSize: 2, RunningRequestsSize: 9, KVCacheUsagePercent: 0.5},
			partial: "trtllm_kv_cache_tokens_per_block has the value NaN",
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
		{"empty", "", ErrNoMetrics, "vllm:num_requests_waiting is absent"},
		{"html", "<html><body>Not metrics</body></html>\n", ErrNoMetrics, "not found"},
		{"garbage in a wanted family", "vllm:num_requests_waiting{ 1\n", ErrMalformed, "line 1"},
		{"bad value", "vllm:kv_cache_usage_perc abc\n", ErrMalformed, "line 1"},
		{"line numbers are the body's", "# comment\nfoo 1\nvllm:num_requests_running 1 2 3\n", ErrMalformed, "line 3"},
		{"duplicate TYPE", "# TYPE vllm:num_requests_running gauge\n# TYPE vllm:num_requests_running gauge\n", ErrMalformed, "second TYPE"},
		{"no final newline", "vllm:num_requests_waiting 1", ErrMalformed, "unexpected end of input stream"},
		{"label mismatch", "nv_trt_llm_request_metrics{request_type=\"other\"} 1\n", ErrNoMetrics, "nv_trt_llm_request_metrics{request_type=\"waiting\"} is absent (no series matches)"},
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

// TestParseMetricsLoadUnknown: a load metric (queue, running, KV-cache
// usage) that the mapping configures but that cannot be read — NaN, ±Inf,
// negative, of the wrong type or absent — is never read as 0 (an idle
// server): ParseMetrics returns a *LoadUnknownError naming the metric and
// why, with zero Metrics.
func TestParseMetricsLoadUnknown(t *testing.T) {
	const good = "vllm:num_requests_waiting 1\nvllm:num_requests_running 2\nvllm:kv_cache_usage_perc 0.5\n" +
		"vllm:lora_requests_info 1\nvllm:cache_config_info 1\n"
	// with replaces the line of one family of good.
	with := func(family, line string) string {
		var out []string
		for l := range strings.SplitSeq(strings.TrimSuffix(good, "\n"), "\n") {
			if strings.HasPrefix(l, family+" ") {
				if line == "" {
					continue
				}
				l = line
			}
			out = append(out, l)
		}
		return strings.Join(out, "\n") + "\n"
	}
	type problem struct{ metric, kind string }
	tests := []struct {
		name     string
		engine   string
		body     string
		want     []problem
		reason   string
		warnings string // substring of the joined warnings
	}{
		{name: "queue NaN", body: with("vllm:num_requests_waiting", "vllm:num_requests_waiting NaN"),
			want: []problem{{LoadQueue, ProblemNaN}}, reason: "vllm:num_requests_waiting is NaN"},
		{name: "queue +Inf", body: with("vllm:num_requests_waiting", "vllm:num_requests_waiting +Inf"),
			want: []problem{{LoadQueue, ProblemInf}}, reason: "vllm:num_requests_waiting is +Inf"},
		{name: "queue negative", body: with("vllm:num_requests_waiting", "vllm:num_requests_waiting -1"),
			want: []problem{{LoadQueue, ProblemNegative}}, reason: "vllm:num_requests_waiting is negative (-1)"},
		{name: "queue absent", body: with("vllm:num_requests_waiting", ""),
			want: []problem{{LoadQueue, ProblemAbsent}}, reason: "vllm:num_requests_waiting is absent"},
		{name: "running NaN", body: with("vllm:num_requests_running", "vllm:num_requests_running NaN"),
			want: []problem{{LoadRunning, ProblemNaN}}, reason: "vllm:num_requests_running is NaN"},
		{name: "running +Inf", body: with("vllm:num_requests_running", "vllm:num_requests_running +Inf"),
			want: []problem{{LoadRunning, ProblemInf}}, reason: "vllm:num_requests_running is +Inf"},
		{name: "running -Inf", body: with("vllm:num_requests_running", "vllm:num_requests_running -Inf"),
			want: []problem{{LoadRunning, ProblemInf}}, reason: "vllm:num_requests_running is -Inf"},
		{name: "running negative fraction", body: with("vllm:num_requests_running", "vllm:num_requests_running -0.5"),
			want: []problem{{LoadRunning, ProblemNegative}}, reason: "vllm:num_requests_running is negative (-0.5)"},
		{name: "running absent", body: with("vllm:num_requests_running", ""),
			want: []problem{{LoadRunning, ProblemAbsent}}, reason: "vllm:num_requests_running is absent"},
		{name: "KV NaN", body: with("vllm:kv_cache_usage_perc", "vllm:kv_cache_usage_perc NaN"),
			want: []problem{{LoadKVCache, ProblemNaN}}, reason: "vllm:kv_cache_usage_perc is NaN"},
		{name: "KV +Inf", body: with("vllm:kv_cache_usage_perc", "vllm:kv_cache_usage_perc +Inf"),
			want: []problem{{LoadKVCache, ProblemInf}}, reason: "vllm:kv_cache_usage_perc is +Inf"},
		{name: "KV -Inf", body: with("vllm:kv_cache_usage_perc", "vllm:kv_cache_usage_perc -Inf"),
			want: []problem{{LoadKVCache, ProblemInf}}, reason: "vllm:kv_cache_usage_perc is -Inf"},
		{name: "KV negative", body: with("vllm:kv_cache_usage_perc", "vllm:kv_cache_usage_perc -0.01"),
			want: []problem{{LoadKVCache, ProblemNegative}}, reason: "vllm:kv_cache_usage_perc is negative (-0.01)"},
		{name: "KV and its fallback absent", body: with("vllm:kv_cache_usage_perc", ""),
			want: []problem{{LoadKVCache, ProblemAbsent}}, reason: "vllm:kv_cache_usage_perc is absent (and so is vllm:gpu_cache_usage_perc)"},
		{name: "KV fallback NaN", body: with("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc NaN"),
			want: []problem{{LoadKVCache, ProblemNaN}}, reason: "vllm:gpu_cache_usage_perc is NaN"},
		{name: "the selected (newest) series is NaN", body: with("vllm:num_requests_waiting", "vllm:num_requests_waiting{e=\"0\"} 1 1000\nvllm:num_requests_waiting{e=\"1\"} NaN 2000"),
			want: []problem{{LoadQueue, ProblemNaN}}, reason: "vllm:num_requests_waiting is NaN"},
		{name: "summary where a gauge is expected", body: with("vllm:num_requests_running", "# TYPE vllm:num_requests_running summary\nvllm:num_requests_running{quantile=\"0.5\"} 1\nvllm:num_requests_running_sum 1\nvllm:num_requests_running_count 1"),
			want: []problem{{LoadRunning, ProblemWrongType}}, reason: "vllm:num_requests_running cannot be read (a summary; want a gauge, counter or untyped metric)"},
		{name: "every load metric broken, nothing else present", body: "vllm:num_requests_waiting NaN\nvllm:num_requests_running -3\nvllm:kv_cache_usage_perc -Inf\n",
			want:     []problem{{LoadQueue, ProblemNaN}, {LoadRunning, ProblemNegative}, {LoadKVCache, ProblemInf}},
			reason:   "vllm:num_requests_waiting is NaN; vllm:num_requests_running is negative (-3); vllm:kv_cache_usage_perc is -Inf",
			warnings: "metric vllm:lora_requests_info not found"},
		{name: "only non-load metrics present", body: "vllm:lora_requests_info 1\nvllm:cache_config_info 1\n",
			want: []problem{{LoadQueue, ProblemAbsent}, {LoadRunning, ProblemAbsent}, {LoadKVCache, ProblemAbsent}}},
		{name: "triton: no series matches the queue's labels", engine: "triton-tensorrt-llm",
			body: "nv_trt_llm_request_metrics{request_type=\"scheduled\"} 1\nnv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=\"fraction\"} 0.1\n",
			want: []problem{{LoadQueue, ProblemAbsent}}, reason: `nv_trt_llm_request_metrics{request_type="waiting"} is absent (no series matches)`},
		{name: "sglang negative queue", engine: "sglang",
			body: "sglang:num_queue_reqs -2\nsglang:num_running_reqs 1\nsglang:token_usage 0.1\nsglang:cache_config_info 1\n",
			want: []problem{{LoadQueue, ProblemNegative}}, reason: "sglang:num_queue_reqs is negative (-2)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			engine := cmp.Or(tt.engine, "vllm")
			got, err := ParseMetrics(strings.NewReader(tt.body), mapping(t, engine))
			var lu *LoadUnknownError
			require.True(t, errors.As(err, &lu), "want a *LoadUnknownError, got %v", err)
			assert.NotErrorIs(t, err, ErrNoMetrics)
			var pe *PartialError
			assert.False(t, errors.As(err, &pe))
			assert.Equal(t, scheduling.Metrics{}, got, "no zeros that would read as idle")
			var problems []problem
			for _, p := range lu.Problems {
				problems = append(problems, problem{p.Metric, p.Kind})
			}
			assert.Equal(t, tt.want, problems)
			if tt.reason != "" {
				assert.Equal(t, tt.reason, lu.Reason())
				assert.Equal(t, "load unknown: "+tt.reason, err.Error())
			}
			if tt.warnings != "" {
				assert.Contains(t, errors.Join(lu.Warnings...).Error(), tt.warnings)
			}
		})
	}

	t.Run("a load metric the mapping does not configure is not needed", func(t *testing.T) {
		running, err := coremetrics.ParseMetricSpec("r")
		require.NoError(t, err)
		m := coremetrics.EngineMapping{Name: "x", RunningRequests: running}
		got, err := ParseMetrics(strings.NewReader("r 3\nq NaN\n"), m)
		require.NoError(t, err)
		assert.Equal(t, scheduling.Metrics{RunningRequestsSize: 3}, got)
	})
	t.Run("kinds ignore values", func(t *testing.T) {
		_, err1 := ParseMetrics(strings.NewReader(with("vllm:num_requests_waiting", "vllm:num_requests_waiting -1")), mapping(t, "vllm"))
		_, err2 := ParseMetrics(strings.NewReader(with("vllm:num_requests_waiting", "vllm:num_requests_waiting -7")), mapping(t, "vllm"))
		var a, b *LoadUnknownError
		require.True(t, errors.As(err1, &a))
		require.True(t, errors.As(err2, &b))
		assert.Equal(t, "queue:negative", a.Kinds())
		assert.Equal(t, a.Kinds(), b.Kinds())
		assert.NotEqual(t, a.Reason(), b.Reason())
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

// TestParseMetricsRemembersUnchangedText: a body whose wanted lines are
// those of the last parse with the same key gets the remembered answer
// without being parsed again, whatever its other lines; a changed wanted
// line, another key or an oversized text parses again.
func TestParseMetricsRemembersUnchangedText(t *testing.T) {
	m := mapping(t, "vllm")
	body := func(waiting int, other string) string {
		return "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting " + strconv.Itoa(waiting) +
			"\nvllm:num_requests_running 2\nvllm:kv_cache_usage_perc 0.5\n# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total " + other + "\n"
	}
	var last lastParse
	last.reset(lastParseKey{engine: "a"})
	met, err := parseMetrics(strings.NewReader(body(3, "100")), m, &last)
	var pe *PartialError
	require.ErrorAs(t, err, &pe, "no LoRA or cache info: a partial read")
	require.Equal(t, 3, met.WaitingQueueSize)
	require.True(t, last.valid)

	// Poison the remembered answer: getting it back proves no new parse.
	last.met.WaitingQueueSize = 777
	met, _ = parseMetrics(strings.NewReader(body(3, "250")), m, &last)
	assert.Equal(t, 777, met.WaitingQueueSize, "only an unwanted counter moved: the remembered answer")

	met, _ = parseMetrics(strings.NewReader(body(4, "250")), m, &last)
	assert.Equal(t, 4, met.WaitingQueueSize, "a wanted line changed: parsed again")

	last.met.WaitingQueueSize = 777
	last.reset(lastParseKey{engine: "b"})
	met, _ = parseMetrics(strings.NewReader(body(4, "250")), m, &last)
	assert.Equal(t, 4, met.WaitingQueueSize, "another key (configuration or engine) forgets the last parse")

	// Other errors are remembered too; a malformed text is not (its
	// error names lines of the body), and a failed read is never compared.
	noLoad := "vllm:num_requests_waiting NaN\nvllm:num_requests_running 1\nvllm:kv_cache_usage_perc 0.1\n"
	_, err = parseMetrics(strings.NewReader(noLoad), m, &last)
	var lu *LoadUnknownError
	require.ErrorAs(t, err, &lu)
	assert.True(t, last.valid)
	_, err2 := parseMetrics(strings.NewReader(noLoad), m, &last)
	assert.Same(t, err, err2, "the remembered error")
	bad := "vllm:num_requests_waiting{x=\"1\" 3\n"
	_, err = parseMetrics(strings.NewReader(bad), m, &last)
	require.ErrorIs(t, err, ErrMalformed)
	assert.False(t, last.valid)
	_, err = parseMetrics(iotest.ErrReader(errors.New("reset by peer")), m, &last)
	assert.ErrorContains(t, err, "reset by peer")

	// A text beyond the bound is parsed every time and not kept.
	long := body(5, "1") + "vllm:num_requests_running{pad=\"" + strings.Repeat("x", maxRememberedText) + "\"} 1\n"
	met, _ = parseMetrics(strings.NewReader(long), m, &last)
	assert.Equal(t, 5, met.WaitingQueueSize)
	assert.False(t, last.valid)
	assert.Nil(t, last.text)
}

func TestWantedFamilies(t *testing.T) {
	m := mapping(t, "vllm")
	got := WantedFamilies(&m)
	assert.True(t, slices.IsSorted(got))
	assert.Equal(t, len(got), len(slices.Compact(slices.Clone(got))))
	for _, want := range []string{"vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "vllm:lora_requests_info", "vllm:cache_config_info"} {
		assert.Contains(t, got, want)
	}
	assert.Empty(t, WantedFamilies(&coremetrics.EngineMapping{}))
}
