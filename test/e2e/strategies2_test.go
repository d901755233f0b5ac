package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The engine-side terms of issue 12: served-model-filter (so endpoints
// are chosen by the model they serve) and the kv-saturation-admitter.
const kvAdmissionConfig = `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: served-model-filter
- type: kv-saturation-admitter
  parameters:
    kvUsageThreshold: 0.98
    retryAfter: 2s
- type: queue-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: served-model-filter
  - pluginRef: queue-scorer
  - pluginRef: max-score-picker
fallbackChains:
  big: [small]
`

// TestC35_KVSaturationAdmissionAndFallbackThroughTheGateway: sim-0 serves
// "big" with a KV cache of 8 blocks of 16 tokens and a slow decode; one
// long request sent to it directly fills every block. The EPP then sees
// every endpoint serving "big" above 0.98 KV: a request for big's alias
// "big-direct" (which has no fallback chain) is refused through the
// gateway with 503, Retry-After and reason admission_reject, and the same
// request for "big" (chain big → small) is served by sim-1, which serves
// "small", the response naming the model in x-switchyard-fallback-model.
func TestC35_KVSaturationAdmissionAndFallbackThroughTheGateway(t *testing.T) {
	c := startClusterWith(t, 2, clusterOpts{
		noConformance: true,
		config:        kvAdmissionConfig,
		endpointYAML: []string{
			`models: [{name: big, aliases: [big-direct]}]`,
			`models: [{name: small}]`,
		},
		simArgs: [][]string{
			{"--model", "big", "--kv-blocks", "8", "--block-size", "16", "--max-model-len", "128", "--max-batched-tokens", "0", "--decode-base", "10s"},
			{"--model", "small"},
		},
	})

	// Keep sim-0's KV cache full: 120 prompt tokens (8 blocks) and 8 slow
	// output tokens, sent again as soon as one ends, until the test ends.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	filler := fmt.Sprintf(`{"model":"big","prompt":%q,"max_tokens":8}`, strings.Repeat("fill the cache ", 32)[:480])
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+c.simAddr[0]+"/v1/completions", strings.NewReader(filler))
			if err != nil {
				return
			}
			req.Header.Set("content-type", "application/json")
			if resp, err := c.client.Do(req); err == nil {
				_ = resp.Body.Close()
			}
		}
	}()

	post := func(id, model string) (*http.Response, string) {
		t.Helper()
		rctx, rcancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		defer rcancel()
		req, err := http.NewRequestWithContext(rctx, http.MethodPost, c.gateway+"/v1/completions",
			strings.NewReader(fmt.Sprintf(`{"model":%q,"prompt":"hello","max_tokens":2}`, model)))
		require.NoError(t, err)
		req.Header.Set("content-type", "application/json")
		req.Header.Set("x-request-id", id)
		resp, err := c.client.Do(req)
		if err != nil {
			return nil, err.Error()
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 4096)
		for {
			n, err := resp.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		return resp, b.String()
	}

	// Saturation shows once the EPP scraped the full cache.
	var refused *http.Response
	var refusedBody string
	i := 0
	require.Eventually(t, func() bool {
		i++
		resp, b := post(fmt.Sprintf("direct-%d", i), "big-direct")
		if resp != nil && resp.StatusCode == http.StatusServiceUnavailable {
			refused, refusedBody = resp, b
			return true
		}
		return false
	}, 20*time.Second, 100*time.Millisecond, "the saturated model was never refused")
	require.Equal(t, "admission_reject", refused.Header.Get("x-switchyard-reason"), refusedBody)
	require.Equal(t, "2", refused.Header.Get("Retry-After"))
	require.Contains(t, refusedBody, "KV-cache usage above 0.98")

	// The same request for big moves along its chain to small.
	var served *http.Response
	var servedBody string
	require.Eventually(t, func() bool {
		i++
		resp, b := post(fmt.Sprintf("chain-%d", i), "big")
		if resp != nil && resp.StatusCode == http.StatusOK {
			served, servedBody = resp, b
			return true
		}
		return false
	}, 10*time.Second, 100*time.Millisecond, "the fallback model never served")
	require.Equal(t, "sim-1", served.Header.Get("x-modelsim-id"), servedBody)
	require.Equal(t, "small", served.Header.Get("x-switchyard-fallback-model"), servedBody)

	fallbacks := seriesByLabel(t, c, "switchyard_model_fallbacks_total", "outcome")
	require.GreaterOrEqual(t, fallbacks["served"], 1.0, "%v", fallbacks)
	refusals := seriesByLabel(t, c, "routing_admission_refusals_total", "reason")
	require.GreaterOrEqual(t, refusals["admission_reject"], 2.0, "the direct refusal and the chain's first attempt: %v", refusals)
}
