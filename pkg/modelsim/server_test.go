package modelsim

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func httpConfig() Config {
	c := DefaultConfig()
	c.TimeScale = 0
	c.Seed = 42
	return c
}

func startServer(t *testing.T, cfg Config, opts ...Option) (*Server, string) {
	t.Helper()
	s, err := New(cfg, opts...)
	require.NoError(t, err)
	require.NoError(t, s.Start(t.Context()))
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		_ = s.Close()
		ts.Close()
	})
	return s, ts.URL
}

func post(t *testing.T, ctx context.Context, url, body string, header ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, b
}

func get(t *testing.T, url string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, b
}

// sseEvents splits an SSE body into its data payloads.
func sseEvents(t *testing.T, body []byte) []string {
	t.Helper()
	var out []string
	for ev := range strings.SplitSeq(strings.TrimSuffix(string(body), "\n\n"), "\n\n") {
		require.True(t, strings.HasPrefix(ev, "data: "), "event %q", ev)
		out = append(out, strings.TrimPrefix(ev, "data: "))
	}
	return out
}

func TestGenerateJSONShape(t *testing.T) {
	tests := []struct {
		name      string
		path      string
		body      string
		idPrefix  string
		object    string
		model     string
		tokens    int
		finish    string
		promptTok int
	}{
		{"completion with max_tokens", "/v1/completions", `{"model":"meta-llama/Llama-3.1-8B-Instruct","prompt":"0123456789abcdef","max_tokens":7}`,
			"cmpl-", "text_completion", "meta-llama/Llama-3.1-8B-Instruct", 7, "length", 4},
		{"completion without model or max_tokens", "/v1/completions", `{"prompt":["abcd","efgh"]}`,
			"cmpl-", "text_completion", "meta-llama/Llama-3.1-8B-Instruct", DefaultMaxTokens, "stop", 2},
		{"completion with token ids", "/v1/completions", `{"prompt":[1,2,3,4,5],"max_tokens":2}`,
			"cmpl-", "text_completion", "meta-llama/Llama-3.1-8B-Instruct", 2, "length", 5},
		{"chat with max_completion_tokens", "/v1/chat/completions",
			`{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi"}]}],"max_tokens":9,"max_completion_tokens":3}`,
			"chatcmpl-", "chat.completion", "meta-llama/Llama-3.1-8B-Instruct", 3, "length", 6},
		{"chat to an adapter", "/v1/chat/completions", `{"model":"sql-lora","messages":[{"role":"user","content":"hi"}],"max_tokens":4}`,
			"chatcmpl-", "chat.completion", "sql-lora", 4, "length", 2},
	}
	cfg := httpConfig()
	cfg.LoRAs = []string{"sql-lora"}
	_, url := startServer(t, cfg, WithID("sim-a"))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := post(t, t.Context(), url+tt.path, tt.body)
			require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
			assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			assert.Equal(t, "sim-a", resp.Header.Get(HeaderID))
			var r struct {
				ID      string `json:"id"`
				Object  string `json:"object"`
				Created int64  `json:"created"`
				Model   string `json:"model"`
				Choices []struct {
					Index        int     `json:"index"`
					Text         *string `json:"text"`
					Message      *struct{ Role, Content string }
					FinishReason string `json:"finish_reason"`
				} `json:"choices"`
				Usage struct {
					PromptTokens        *int `json:"prompt_tokens"`
					CompletionTokens    *int `json:"completion_tokens"`
					TotalTokens         *int `json:"total_tokens"`
					PromptTokensDetails *struct {
						CachedTokens *int `json:"cached_tokens"`
					} `json:"prompt_tokens_details"`
				} `json:"usage"`
			}
			require.NoError(t, json.Unmarshal(body, &r))
			assert.True(t, strings.HasPrefix(r.ID, tt.idPrefix), r.ID)
			assert.Len(t, r.ID, len(tt.idPrefix)+32)
			assert.Equal(t, tt.object, r.Object)
			assert.InDelta(t, time.Now().Unix(), r.Created, 5)
			assert.Equal(t, tt.model, r.Model)
			require.Len(t, r.Choices, 1)
			var content string
			if tt.object == "chat.completion" {
				require.NotNil(t, r.Choices[0].Message)
				assert.Equal(t, "assistant", r.Choices[0].Message.Role)
				content = r.Choices[0].Message.Content
			} else {
				require.NotNil(t, r.Choices[0].Text)
				content = *r.Choices[0].Text
			}
			assert.Len(t, strings.Fields(content), tt.tokens, "one word per token")
			assert.Equal(t, tt.finish, r.Choices[0].FinishReason)
			require.NotNil(t, r.Usage.PromptTokens)
			require.NotNil(t, r.Usage.PromptTokensDetails)
			require.NotNil(t, r.Usage.PromptTokensDetails.CachedTokens)
			assert.Equal(t, tt.promptTok, *r.Usage.PromptTokens)
			assert.Equal(t, tt.tokens, *r.Usage.CompletionTokens)
			assert.Equal(t, tt.promptTok+tt.tokens, *r.Usage.TotalTokens)
		})
	}
}

func TestRequestIDEchoed(t *testing.T) {
	_, url := startServer(t, httpConfig())
	resp, body := post(t, t.Context(), url+"/v1/completions", `{"prompt":"x","max_tokens":1}`, HeaderRequestID, "req-123")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "req-123", resp.Header.Get(HeaderRequestID))
	assert.Empty(t, resp.Header.Get(HeaderID), "no identity configured")
	assert.Contains(t, string(body), `"id":"cmpl-req-123"`)
	resp, _ = get(t, url+"/v1/models")
	assert.Empty(t, resp.Header.Get(HeaderRequestID))
}

func TestCachedTokensReported(t *testing.T) {
	_, url := startServer(t, httpConfig())
	prompt := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 20) // 900 bytes = 225 tokens
	body := fmt.Sprintf(`{"prompt":%q,"max_tokens":2}`, prompt)
	cached := func() int {
		resp, b := post(t, t.Context(), url+"/v1/completions", body)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var r struct {
			Usage struct {
				PromptTokensDetails struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		require.NoError(t, json.Unmarshal(b, &r))
		return r.Usage.PromptTokensDetails.CachedTokens
	}
	assert.Zero(t, cached())
	assert.Equal(t, 224, cached(), "14 full blocks of 16 tokens")
}

func TestDeterministicOutput(t *testing.T) {
	run := func(seed uint64) []string {
		cfg := httpConfig()
		cfg.Seed = seed
		_, url := startServer(t, cfg)
		var out []string
		for _, p := range []string{"alpha", "beta"} {
			_, b := post(t, t.Context(), url+"/v1/completions", fmt.Sprintf(`{"prompt":%q,"max_tokens":6}`, p))
			var r struct {
				ID      string
				Choices []struct{ Text string }
			}
			require.NoError(t, json.Unmarshal(b, &r))
			out = append(out, r.ID, r.Choices[0].Text)
		}
		return out
	}
	a, b, c := run(7), run(7), run(8)
	assert.Equal(t, a, b, "same seed, same ids and text")
	assert.NotEqual(t, a, c)
	assert.NotEqual(t, a[1], a[3], "different prompts, different text")
}

func TestStreaming(t *testing.T) {
	tests := []struct {
		name      string
		path      string
		body      string
		wantRole  bool
		wantUsage bool
		tokens    int
	}{
		{"completion", "/v1/completions", `{"prompt":"hello","max_tokens":5,"stream":true}`, false, false, 5},
		{"completion with usage", "/v1/completions",
			`{"prompt":"hello","max_tokens":5,"stream":true,"stream_options":{"include_usage":true}}`, false, true, 5},
		{"chat with usage", "/v1/chat/completions",
			`{"messages":[{"role":"user","content":"hello"}],"max_tokens":4,"stream":true,"stream_options":{"include_usage":true}}`, true, true, 4},
		{"chat without usage", "/v1/chat/completions",
			`{"messages":[{"role":"user","content":"hello"}],"max_tokens":1,"stream":true,"stream_options":{"include_usage":false}}`, true, false, 1},
	}
	_, url := startServer(t, httpConfig())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := post(t, t.Context(), url+tt.path, tt.body)
			require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
			assert.Equal(t, "text/event-stream; charset=utf-8", resp.Header.Get("Content-Type"))
			events := sseEvents(t, body)
			require.NotEmpty(t, events)
			assert.Equal(t, "[DONE]", events[len(events)-1])
			events = events[:len(events)-1]

			type chunk struct {
				ID      string `json:"id"`
				Object  string `json:"object"`
				Created int64  `json:"created"`
				Model   string `json:"model"`
				Choices []struct {
					Text  *string `json:"text"`
					Delta *struct {
						Role    *string `json:"role"`
						Content *string `json:"content"`
					} `json:"delta"`
					FinishReason *string `json:"finish_reason"`
				} `json:"choices"`
				Usage *struct {
					PromptTokens     int `json:"prompt_tokens"`
					CompletionTokens int `json:"completion_tokens"`
					TotalTokens      int `json:"total_tokens"`
				} `json:"usage"`
			}
			var chunks []chunk
			for _, ev := range events {
				var c chunk
				require.NoError(t, json.Unmarshal([]byte(ev), &c), ev)
				chunks = append(chunks, c)
				assert.Equal(t, chunks[0].ID, c.ID, "one id per stream")
			}
			if tt.wantUsage {
				last := chunks[len(chunks)-1]
				require.NotNil(t, last.Usage, "usage chunk last")
				assert.Empty(t, last.Choices)
				assert.Equal(t, tt.tokens, last.Usage.CompletionTokens)
				assert.Equal(t, last.Usage.PromptTokens+tt.tokens, last.Usage.TotalTokens)
				chunks = chunks[:len(chunks)-1]
			}
			if tt.wantRole {
				require.NotNil(t, chunks[0].Choices[0].Delta)
				require.NotNil(t, chunks[0].Choices[0].Delta.Role)
				assert.Equal(t, "assistant", *chunks[0].Choices[0].Delta.Role)
				assert.Equal(t, "chat.completion.chunk", chunks[0].Object)
				chunks = chunks[1:]
			}
			require.Len(t, chunks, tt.tokens, "one chunk per token")
			var words []string
			for i, c := range chunks {
				assert.Nil(t, c.Usage)
				require.Len(t, c.Choices, 1)
				ch := c.Choices[0]
				if tt.wantRole {
					words = append(words, *ch.Delta.Content)
				} else {
					assert.Equal(t, "text_completion", c.Object)
					words = append(words, *ch.Text)
				}
				if i == len(chunks)-1 {
					require.NotNil(t, ch.FinishReason)
					assert.Equal(t, "length", *ch.FinishReason)
				} else {
					assert.Nil(t, ch.FinishReason)
				}
			}
			assert.Len(t, strings.Fields(strings.Join(words, "")), tt.tokens)
		})
	}
}

func TestStreamingChunksAreFlushed(t *testing.T) {
	cfg := httpConfig()
	cfg.TimeScale = 1
	cfg.DecodeBase = 25 * time.Millisecond
	_, url := startServer(t, cfg)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url+"/v1/completions",
		strings.NewReader(`{"prompt":"hello","max_tokens":5,"stream":true}`))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var arrivals []time.Time
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: {") {
			arrivals = append(arrivals, time.Now())
		}
	}
	require.NoError(t, sc.Err())
	require.Len(t, arrivals, 5)
	for i := 1; i < len(arrivals); i++ {
		assert.Greater(t, arrivals[i].Sub(arrivals[i-1]), 10*time.Millisecond, "chunk %d arrived with the previous one", i)
	}
}

func TestModelsAndHealth(t *testing.T) {
	cfg := httpConfig()
	cfg.LoRAs = []string{"lora-a", "lora-b"}
	s, err := New(cfg)
	require.NoError(t, err)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()

	resp, _ := get(t, ts.URL+"/health")
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "not started")
	require.NoError(t, s.Start(t.Context()))
	assert.Error(t, s.Start(t.Context()), "second start")
	resp, _ = get(t, ts.URL+"/health")
	assert.Equal(t, http.StatusOK, resp.StatusCode)

	resp, body := get(t, ts.URL+"/v1/models")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var list struct {
		Object string `json:"object"`
		Data   []struct {
			ID          string  `json:"id"`
			Object      string  `json:"object"`
			Created     int64   `json:"created"`
			OwnedBy     string  `json:"owned_by"`
			Root        string  `json:"root"`
			Parent      *string `json:"parent"`
			MaxModelLen *int    `json:"max_model_len"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal(body, &list))
	assert.Equal(t, "list", list.Object)
	require.Len(t, list.Data, 3)
	assert.Equal(t, cfg.Model, list.Data[0].ID)
	assert.Nil(t, list.Data[0].Parent)
	require.NotNil(t, list.Data[0].MaxModelLen)
	assert.Equal(t, cfg.MaxModelLen, *list.Data[0].MaxModelLen)
	for i, name := range cfg.LoRAs {
		m := list.Data[i+1]
		assert.Equal(t, name, m.ID)
		require.NotNil(t, m.Parent)
		assert.Equal(t, cfg.Model, *m.Parent)
	}
	for _, m := range list.Data {
		assert.Equal(t, "model", m.Object)
		assert.Equal(t, "vllm", m.OwnedBy)
		assert.Positive(t, m.Created)
	}

	require.NoError(t, s.Close())
	require.NoError(t, s.Close())
	resp, _ = get(t, ts.URL+"/health")
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "closed")
	resp, body = post(t, t.Context(), ts.URL+"/v1/completions", `{"prompt":"x"}`)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Contains(t, string(body), `"type":"ServiceUnavailableError"`)
	assert.ErrorIs(t, s.Start(t.Context()), ErrClosed)
}

func TestRequestErrors(t *testing.T) {
	cfg := httpConfig()
	cfg.MaxModelLen = 100
	_, url := startServer(t, cfg)
	tests := []struct {
		name     string
		method   string
		path     string
		body     string
		status   int
		wantBody string // exact when it starts with "{", else a substring
	}{
		{"unknown model", "POST", "/v1/completions", `{"model":"x","prompt":"hi"}`, 404,
			`{"object":"error","message":"The model ` + "`x`" + ` does not exist.","type":"NotFoundError","param":null,"code":404}`},
		{"bad json", "POST", "/v1/chat/completions", `{"messages":`, 400, `"type":"BadRequestError"`},
		{"wrong field type", "POST", "/v1/completions", `{"prompt":"x","max_tokens":"ten"}`, 400, `invalid JSON body`},
		{"missing prompt", "POST", "/v1/completions", `{"max_tokens":3}`, 400, `prompt: required`},
		{"no messages", "POST", "/v1/chat/completions", `{"messages":[]}`, 400, `messages: must contain at least one message`},
		{"zero max_tokens", "POST", "/v1/completions", `{"prompt":"x","max_tokens":0}`, 400, `max_tokens: must be at least 1, got 0`},
		{"too long", "POST", "/v1/completions", `{"prompt":"x","max_tokens":100}`, 400,
			`maximum context length is 100 tokens. However, you requested 101 tokens (1 in the messages, 100 in the completion)`},
		{"prompt fills the context", "POST", "/v1/completions", fmt.Sprintf(`{"prompt":%q}`, strings.Repeat("a", 400)), 400,
			`your request has 100 input tokens`},
		{"wrong method", "GET", "/v1/completions", "", 405, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), tt.method, url+tt.path, strings.NewReader(tt.body))
			require.NoError(t, err)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			assert.Equal(t, tt.status, resp.StatusCode, string(b))
			if strings.HasPrefix(tt.wantBody, "{") {
				assert.JSONEq(t, tt.wantBody, string(b))
			} else {
				assert.Contains(t, string(b), tt.wantBody)
			}
			if tt.status != 405 {
				var e errorBody
				require.NoError(t, json.Unmarshal(b, &e))
				assert.Equal(t, "error", e.Object)
				assert.Equal(t, tt.status, e.Code)
			}
		})
	}
}

func TestQueueFull(t *testing.T) {
	cfg := httpConfig()
	cfg.TimeScale = 1
	cfg.MaxRunning = 1
	cfg.MaxWaiting = 1
	cfg.DecodeBase = time.Hour // nothing finishes during the test
	s, url := startServer(t, cfg)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/completions", strings.NewReader(`{"prompt":"x"}`))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		})
		require.Eventually(t, func() bool { st := s.Stats(); return st.Running == 1 && st.Waiting == i }, 5*time.Second, time.Millisecond)
	}
	resp, body := post(t, t.Context(), url+"/v1/completions", `{"prompt":"x"}`)
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))
	assert.Contains(t, string(body), `"type":"RateLimitError"`)
	assert.Equal(t, uint64(1), s.Stats().Rejected)
	cancel()
	wg.Wait()
	require.Eventually(t, func() bool { st := s.Stats(); return st.Running == 0 && st.Waiting == 0 }, 5*time.Second, time.Millisecond)
}

func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, body := get(t, url+"/metrics")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "text/plain; version=0.0.4; charset=utf-8", resp.Header.Get("Content-Type"))
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	require.NoError(t, err)
	return mfs
}

func gaugeValue(t *testing.T, mfs map[string]*dto.MetricFamily, name string) float64 {
	t.Helper()
	mf, ok := mfs[name]
	require.True(t, ok, "metric %s missing", name)
	require.Len(t, mf.Metric, 1)
	return mf.Metric[0].GetGauge().GetValue()
}

func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.Label {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

func TestMetricsNamesAndLabels(t *testing.T) {
	cfg := httpConfig()
	cfg.LoRAs = []string{"adapter-1"}
	_, url := startServer(t, cfg)
	prompt := strings.Repeat("metrics test prompt ", 10)
	for range 2 {
		resp, _ := post(t, t.Context(), url+"/v1/completions", fmt.Sprintf(`{"prompt":%q,"max_tokens":3}`, prompt))
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	resp, _ := post(t, t.Context(), url+"/v1/completions", `{"prompt":"hi"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	mfs := scrape(t, url)

	want := map[string]dto.MetricType{
		metricWaiting:        dto.MetricType_GAUGE,
		metricRunning:        dto.MetricType_GAUGE,
		metricKVUsage:        dto.MetricType_GAUGE,
		metricGPUCacheUsage:  dto.MetricType_GAUGE,
		metricLoRAInfo:       dto.MetricType_GAUGE,
		metricCacheConfig:    dto.MetricType_GAUGE,
		metricPrefixQueries:  dto.MetricType_COUNTER,
		metricPrefixHits:     dto.MetricType_COUNTER,
		metricPromptTokens:   dto.MetricType_COUNTER,
		metricGenTokens:      dto.MetricType_COUNTER,
		metricSuccess:        dto.MetricType_COUNTER,
		metricPreemptions:    dto.MetricType_COUNTER,
		metricTTFT:           dto.MetricType_HISTOGRAM,
		metricE2E:            dto.MetricType_HISTOGRAM,
		metricQueueTime:      dto.MetricType_HISTOGRAM,
		metricInterTokenTime: dto.MetricType_HISTOGRAM,
	}
	for name, typ := range want {
		mf, ok := mfs[name]
		if !assert.True(t, ok, "metric %s missing", name) {
			continue
		}
		assert.Equal(t, typ, mf.GetType(), name)
		for _, m := range mf.Metric {
			assert.Equal(t, cfg.Model, labelsOf(m)["model_name"], name)
		}
	}
	assert.Len(t, mfs, len(want), "no other metrics")

	assert.Zero(t, gaugeValue(t, mfs, metricRunning))
	assert.Zero(t, gaugeValue(t, mfs, metricWaiting))
	assert.Zero(t, gaugeValue(t, mfs, metricKVUsage))

	cc := labelsOf(mfs[metricCacheConfig].Metric[0])
	assert.Equal(t, "16", cc["block_size"])
	assert.Equal(t, "2048", cc["num_gpu_blocks"])
	assert.Equal(t, 1.0, gaugeValue(t, mfs, metricCacheConfig))

	lora := mfs[metricLoRAInfo].Metric[0]
	ll := labelsOf(lora)
	assert.Equal(t, "1", ll["max_lora"])
	assert.Contains(t, ll, "running_lora_adapters")
	assert.Contains(t, ll, "waiting_lora_adapters")
	assert.InDelta(t, float64(time.Now().Unix()), lora.GetGauge().GetValue(), 60, "value is a unix timestamp")

	counter := func(name string) float64 { return mfs[name].Metric[0].GetCounter().GetValue() }
	assert.Equal(t, float64(50+50+1), counter(metricPromptTokens))
	assert.Equal(t, counter(metricPromptTokens), counter(metricPrefixQueries))
	assert.Equal(t, float64(48), counter(metricPrefixHits), "second identical prompt hits 3 blocks")
	assert.Equal(t, float64(3+3+DefaultMaxTokens), counter(metricGenTokens))
	success := map[string]float64{}
	for _, m := range mfs[metricSuccess].Metric {
		success[labelsOf(m)["finished_reason"]] = m.GetCounter().GetValue()
	}
	assert.Equal(t, map[string]float64{"stop": 1, "length": 2, "abort": 0}, success)
	assert.Equal(t, uint64(3), mfs[metricTTFT].Metric[0].GetHistogram().GetSampleCount())
	assert.Equal(t, uint64(3), mfs[metricE2E].Metric[0].GetHistogram().GetSampleCount())
}

// TestMetricsFollowLoad drives a slow server past MaxRunning with streaming
// clients, checks the gauges an endpoint picker reads, then disconnects the
// clients and checks that everything is freed.
func TestMetricsFollowLoad(t *testing.T) {
	cfg := httpConfig()
	cfg.TimeScale = 1
	cfg.MaxRunning = 3
	cfg.LoRAs = []string{"l1", "l2"}
	cfg.MaxLoRAs = 2
	cfg.DecodeBase = 5 * time.Millisecond
	s, url := startServer(t, cfg)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var wg sync.WaitGroup
	first := make(chan struct{}, 5)
	for i := range 5 {
		model := []string{"", "l1", "l2", "", "l1"}[i]
		wg.Go(func() {
			body := fmt.Sprintf(`{"model":%q,"prompt":%q,"max_tokens":5000,"stream":true}`, model, text(fmt.Sprint(i), 400))
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/completions", strings.NewReader(body))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return
			}
			defer resp.Body.Close()
			buf := make([]byte, 1)
			if _, err := resp.Body.Read(buf); err == nil {
				first <- struct{}{}
			}
			_, _ = io.Copy(io.Discard, resp.Body)
		})
		// One at a time, so that the admission order is known.
		require.Eventually(t, func() bool { st := s.Stats(); return st.Running+st.Waiting == i+1 }, 5*time.Second, time.Millisecond)
	}
	require.Eventually(t, func() bool { st := s.Stats(); return st.Running == 3 && st.Waiting == 2 }, 5*time.Second, time.Millisecond)
	<-first
	mfs := scrape(t, url)
	assert.Equal(t, 3.0, gaugeValue(t, mfs, metricRunning))
	assert.Equal(t, 2.0, gaugeValue(t, mfs, metricWaiting))
	kv := gaugeValue(t, mfs, metricKVUsage)
	assert.Greater(t, kv, 0.0)
	assert.LessOrEqual(t, kv, 1.0)
	assert.Equal(t, kv, gaugeValue(t, mfs, metricGPUCacheUsage))
	ll := labelsOf(mfs[metricLoRAInfo].Metric[0])
	assert.Equal(t, "l1,l2", ll["running_lora_adapters"])
	assert.Equal(t, "l1", ll["waiting_lora_adapters"])
	assert.Equal(t, "2", ll["max_lora"])

	cancel()
	wg.Wait()
	require.Eventually(t, func() bool {
		st := s.Stats()
		return st.Running == 0 && st.Waiting == 0 && st.KVUsedBlocks == 0
	}, 5*time.Second, time.Millisecond, "disconnected clients free their sequences")
	st := s.Stats()
	assert.Equal(t, uint64(5), st.Aborted)
	assert.Empty(t, st.RunningLoRAs)
	mfs = scrape(t, url)
	assert.Zero(t, gaugeValue(t, mfs, metricKVUsage))
}

func TestNonStreamingDisconnect(t *testing.T) {
	cfg := httpConfig()
	cfg.TimeScale = 1
	cfg.DecodeBase = time.Hour
	s, url := startServer(t, cfg)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/completions", strings.NewReader(`{"prompt":"wait for me"}`))
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	require.Eventually(t, func() bool { return s.Stats().Running == 1 }, 5*time.Second, time.Millisecond)
	cancel()
	assert.ErrorIs(t, <-done, context.Canceled)
	require.Eventually(t, func() bool { st := s.Stats(); return st.Running == 0 && st.KVUsedBlocks == 0 }, 5*time.Second, time.Millisecond)
}

func TestCloseFailsInFlight(t *testing.T) {
	cfg := httpConfig()
	cfg.TimeScale = 1
	cfg.MaxRunning = 1
	cfg.DecodeBase = 20 * time.Millisecond
	s, url := startServer(t, cfg)

	streamDone := make(chan []byte, 1)
	go func() {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, url+"/v1/completions",
			strings.NewReader(`{"prompt":"a","max_tokens":5000,"stream":true,"stream_options":{"include_usage":true}}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			streamDone <- nil
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		streamDone <- b
	}()
	waitingDone := make(chan int, 1)
	require.Eventually(t, func() bool { return s.Stats().GenerationTokens > 0 }, 5*time.Second, time.Millisecond)
	go func() {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, url+"/v1/completions", strings.NewReader(`{"prompt":"b"}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			waitingDone <- 0
			return
		}
		resp.Body.Close()
		waitingDone <- resp.StatusCode
	}()
	require.Eventually(t, func() bool { return s.Stats().Waiting == 1 }, 5*time.Second, time.Millisecond)
	require.NoError(t, s.Close())

	assert.Equal(t, http.StatusServiceUnavailable, <-waitingDone)
	events := sseEvents(t, <-streamDone)
	require.GreaterOrEqual(t, len(events), 4)
	n := len(events)
	assert.Equal(t, "[DONE]", events[n-1])
	assert.Contains(t, events[n-2], `"usage":`)
	assert.Contains(t, events[n-3], `"type":"ServiceUnavailableError"`)
	st := s.Stats()
	assert.Equal(t, uint64(2), st.Failed)
	assert.Zero(t, st.KVUsedBlocks)
}

func TestFaultErrorRate(t *testing.T) {
	statuses := func(seed uint64, rate float64, n int) []int {
		cfg := httpConfig()
		cfg.Seed = seed
		s, url := startServer(t, cfg)
		s.SetErrorRate(rate)
		var out []int
		for range n {
			resp, body := post(t, t.Context(), url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"max_tokens":1}`)
			out = append(out, resp.StatusCode)
			if resp.StatusCode == http.StatusInternalServerError {
				var e errorBody
				require.NoError(t, json.Unmarshal(body, &e))
				assert.Equal(t, "InternalServerError", e.Type)
				assert.Equal(t, 500, e.Code)
			}
		}
		return out
	}
	count := func(codes []int, code int) int {
		n := 0
		for _, c := range codes {
			if c == code {
				n++
			}
		}
		return n
	}
	assert.Equal(t, 20, count(statuses(1, 1, 20), 500))
	assert.Equal(t, 20, count(statuses(1, 0, 20), 200))
	assert.Equal(t, 20, count(statuses(1, 7, 20), 500), "rates above 1 are clamped")
	half := statuses(3, 0.5, 100)
	assert.InDelta(t, 50, count(half, 500), 20)
	assert.Equal(t, half, statuses(3, 0.5, 100), "deterministic for a seed")
}

func TestFaultExtraLatency(t *testing.T) {
	s, url := startServer(t, httpConfig())
	s.SetExtraLatency(80 * time.Millisecond)
	start := time.Now()
	resp, _ := post(t, t.Context(), url+"/v1/completions", `{"prompt":"x","max_tokens":1}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.GreaterOrEqual(t, time.Since(start), 80*time.Millisecond)
	s.SetExtraLatency(-time.Second)
	start = time.Now()
	post(t, t.Context(), url+"/v1/completions", `{"prompt":"x","max_tokens":1}`)
	assert.Less(t, time.Since(start), 80*time.Millisecond)
}

func TestFaultMetrics(t *testing.T) {
	s, url := startServer(t, httpConfig())

	s.SetMetricsFault(MetricsGarbage)
	resp, body := get(t, url+"/metrics")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	p := expfmt.NewTextParser(model.UTF8Validation)
	_, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	assert.Error(t, err, "garbage must not parse")

	s.SetMetricsFault(Metrics500)
	resp, _ = get(t, url+"/metrics")
	assert.Equal(t, http.StatusInternalServerError, resp.StatusCode)

	s.SetMetricsFault(MetricsSlow)
	client := &http.Client{Timeout: 100 * time.Millisecond}
	start := time.Now()
	_, err = client.Get(url + "/metrics")
	var nerr net.Error
	require.True(t, errors.As(err, &nerr) && nerr.Timeout(), "want a client timeout, got %v", err)
	assert.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond)

	s.SetMetricsFault(MetricsOK)
	scrape(t, url)

	// The broken-value faults serve valid text whose load gauges read
	// NaN, +Inf or -5; other series stay as they are.
	for _, tc := range []struct {
		fault MetricsFault
		check func(float64) bool
	}{
		{MetricsNaN, math.IsNaN},
		{MetricsInf, func(v float64) bool { return math.IsInf(v, 1) }},
		{MetricsNegative, func(v float64) bool { return v == -5 }},
	} {
		s.SetMetricsFault(tc.fault)
		resp, body := get(t, url+"/metrics")
		require.Equal(t, http.StatusOK, resp.StatusCode, tc.fault.String())
		tp := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := tp.TextToMetricFamilies(strings.NewReader(string(body)))
		require.NoError(t, err, tc.fault.String())
		for _, name := range []string{"vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"} {
			f := fams[name]
			require.NotNil(t, f, name)
			for _, m := range f.GetMetric() {
				assert.True(t, tc.check(m.GetGauge().GetValue()), "%s: %s = %v", tc.fault, name, m.GetGauge().GetValue())
			}
		}
		assert.NotNil(t, fams["vllm:cache_config_info"], "other families are served as usual")
	}
}

func TestMetricsSlowReleasedByClose(t *testing.T) {
	s, url := startServer(t, httpConfig())
	s.SetMetricsFault(MetricsSlow)
	got := make(chan int, 1)
	go func() {
		resp, err := http.Get(url + "/metrics") //nolint:noctx // the server must end it
		if err != nil {
			got <- 0
			return
		}
		resp.Body.Close()
		got <- resp.StatusCode
	}()
	time.Sleep(30 * time.Millisecond)
	require.NoError(t, s.Close())
	assert.Equal(t, http.StatusServiceUnavailable, <-got)
}

func TestMetricsFaultNames(t *testing.T) {
	for _, f := range []MetricsFault{MetricsOK, MetricsGarbage, MetricsSlow, Metrics500, MetricsNaN, MetricsInf, MetricsNegative} {
		got, err := ParseMetricsFault(f.String())
		require.NoError(t, err)
		assert.Equal(t, f, got)
	}
	_, err := ParseMetricsFault("broken")
	assert.ErrorContains(t, err, `unknown metrics fault "broken"`)
	assert.Equal(t, "MetricsFault(9)", MetricsFault(9).String())
}

func TestServeAndListenAndServe(t *testing.T) {
	t.Run("Serve", func(t *testing.T) {
		s, err := New(httpConfig(), WithID("served"))
		require.NoError(t, err)
		var lc net.ListenConfig
		ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		errc := make(chan error, 1)
		go func() { errc <- s.Serve(ctx, ln) }()
		url := "http://" + ln.Addr().String()
		resp, _ := post(t, t.Context(), url+"/v1/completions", `{"prompt":"x","max_tokens":2}`)
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, "served", resp.Header.Get(HeaderID))
		cancel()
		assert.NoError(t, <-errc)
		assert.Equal(t, uint64(1), s.Stats().Served)
	})
	t.Run("ListenAndServe", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		assert.NoError(t, ListenAndServe(ctx, "127.0.0.1:0", httpConfig()))
	})
	t.Run("ListenAndServe with a bad config", func(t *testing.T) {
		cfg := httpConfig()
		cfg.MaxRunning = 0
		assert.ErrorContains(t, ListenAndServe(t.Context(), "127.0.0.1:0", cfg), "MaxRunning")
	})
}

// TestMetricsNameFilter: name[] parameters restrict /metrics to the
// families named, as vLLM's exporter does; unknown names are ignored and
// no parameter means every family.
func TestMetricsNameFilter(t *testing.T) {
	s, url := startServer(t, httpConfig())
	all := scrape(t, url)
	require.Equal(t, int64(1), s.regs.allState.collects.Load())

	resp, body := get(t, url+"/metrics?name%5B%5D="+metricWaiting+"&name[]="+metricKVUsage+"&name[]=no_such_metric&other=1")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	require.NoError(t, err)
	assert.Len(t, mfs, 2)
	assert.Contains(t, mfs, metricWaiting)
	assert.Contains(t, mfs, metricKVUsage)
	assert.Greater(t, len(all), 10)
	assert.Less(t, len(body), 1000, "a few lines instead of every histogram")
	assert.Equal(t, int64(1), s.regs.allState.collects.Load(), "gauges asked for: the whole registry is not collected")
	assert.Equal(t, int64(1), s.regs.gaugesState.collects.Load())

	// A counter or histogram named comes from the whole registry.
	resp, body = get(t, url+"/metrics?name[]="+metricWaiting+"&name[]="+metricTTFT+"&name[]="+metricPromptTokens)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	mfs, err = p.TextToMetricFamilies(strings.NewReader(string(body)))
	require.NoError(t, err)
	assert.Len(t, mfs, 3)
	assert.Contains(t, mfs, metricTTFT)
	assert.Contains(t, mfs, metricPromptTokens)
	assert.Equal(t, int64(2), s.regs.allState.collects.Load())

	gauges, err := s.regs.gauges.Gather()
	require.NoError(t, err)
	inGauges := map[string]bool{}
	for _, mf := range gauges {
		inGauges[mf.GetName()] = true
	}
	for name := range all {
		assert.True(t, inGauges[name] != otherNames[name], "%s: in the gauges registry or otherNames, not both", name)
	}
}
