package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/switchyard-ai/switchyard/pkg/modelsim"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		check   func(t *testing.T, c modelsim.Config, s settings)
		wantErr []string
	}{
		{"defaults", nil, func(t *testing.T, c modelsim.Config, s settings) {
			assert.Equal(t, modelsim.DefaultConfig(), c)
			assert.Equal(t, settings{host: "127.0.0.1", port: 8000, metricsFault: "ok"}, s)
		}, nil},
		{"everything", []string{
			"--host", "::1", "--port", "9000", "--model", "m", "--max-running", "4", "--max-waiting", "10",
			"--kv-blocks", "512", "--block-size", "32", "--max-model-len", "4096", "--max-batched-tokens", "0",
			"--prefill-per-token", "50us", "--decode-base", "10ms", "--decode-per-seq", "1ms", "--default-max-tokens", "64",
			"--time-scale", "0.5", "--lora", "a,b", "--lora", "c", "--max-loras", "2", "--seed", "0x10",
			"--error-rate", "0.25", "--extra-latency", "20ms", "--metrics-fault", "garbage", "--id", "sim-1", "-v", "4",
		}, func(t *testing.T, c modelsim.Config, s settings) {
			want := modelsim.Config{Model: "m", MaxRunning: 4, MaxWaiting: 10, KVBlocks: 512, BlockSize: 32, MaxModelLen: 4096,
				MaxBatchedTokens: 0, PrefillPerToken: 50 * time.Microsecond, DecodeBase: 10 * time.Millisecond,
				DecodePerSeq: time.Millisecond, DefaultMaxTokens: 64, TimeScale: 0.5, LoRAs: []string{"a", "b", "c"},
				MaxLoRAs: 2, Seed: 16}
			assert.Equal(t, want, c)
			assert.Equal(t, settings{host: "::1", port: 9000, id: "sim-1", errorRate: 0.25, extraLatency: 20 * time.Millisecond,
				metricsFault: "garbage", verbosity: 4}, s)
		}, nil},
		{"bad values are all reported", []string{"--port", "70000", "--error-rate", "2", "--extra-latency", "-1s",
			"--metrics-fault", "bad", "--max-running", "0"}, nil,
			[]string{"--port: must be between 0 and 65535", "--error-rate: must be between 0 and 1", "--extra-latency: must not be negative",
				`--metrics-fault: unknown metrics fault "bad"`, "MaxRunning: must be at least 1"}},
		{"unknown flag", []string{"--nope"}, nil, []string{"flag provided but not defined: -nope"}},
		{"positional argument", []string{"extra"}, nil, []string{`unexpected arguments: ["extra"]`}},
		{"bad seed", []string{"--seed", "x"}, nil, []string{`invalid value "x" for flag -seed`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, s, err := parseFlags(tt.args, io.Discard)
			if tt.wantErr != nil {
				require.Error(t, err)
				for _, w := range tt.wantErr {
					assert.ErrorContains(t, err, w)
				}
				return
			}
			require.NoError(t, err)
			tt.check(t, c, s)
		})
	}
}

func TestRunExitCodes(t *testing.T) {
	var out bytes.Buffer
	assert.Equal(t, 0, run(t.Context(), []string{"-h"}, &out))
	assert.Contains(t, out.String(), "Usage: modelsim")
	out.Reset()
	assert.Equal(t, 2, run(t.Context(), []string{"--block-size", "0"}, &out))
	assert.Contains(t, out.String(), "BlockSize")
}

// syncBuffer is a bytes.Buffer safe for the server's log writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestRunServesUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var out syncBuffer
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"--port", "0", "--time-scale", "0", "--id", "cmd-test", "-v", "1"}, &out)
	}()
	addr := regexp.MustCompile(`"addr"="(http://127\.0\.0\.1:\d+)"`)
	var base string
	require.Eventually(t, func() bool {
		m := addr.FindStringSubmatch(out.String())
		if m != nil {
			base = m[1]
		}
		return m != nil
	}, 5*time.Second, 5*time.Millisecond)

	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/v1/completions", strings.NewReader(`{"prompt":"hi","max_tokens":3}`))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	assert.Equal(t, "cmd-test", resp.Header.Get("x-modelsim-id"))

	cancel()
	select {
	case c := <-code:
		assert.Equal(t, 0, c)
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after cancellation")
	}
	assert.Contains(t, out.String(), `"msg"="modelsim stopped" "served"=1`)
}
