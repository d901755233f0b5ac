package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Eligibility through real processes (issue 10): active health checks take
// a killed endpoint out of rotation within their thresholds and bring it
// back after healthyThreshold passes; the circuit breaker opens on slow
// answers (latencyAsFailure) and closes again once the endpoint is fast.
// Every pick names two endpoints (maxNumOfEndpoints 2), so the gateway
// falls back to the second when the first refuses connections (the killed
// endpoint, until the health check takes it out; it is not scraped, so
// staleness does not take it out first): throughout, every request gets a
// 200, none is lost. With every endpoint down, requests are refused
// with 503 and the reason no_endpoints.
const eligibilityConfig = `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: active-health-check
  parameters: {interval: 300ms, timeout: 200ms, unhealthyThreshold: 3, healthyThreshold: 2}
- type: circuit-breaker
  parameters:
    consecutiveFailures: 2
    openDuration: 2s
    successThreshold: 2
    latencyAsFailure: {totalMs: 250}
- type: max-score-picker
  parameters: {maxNumOfEndpoints: 2}
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: circuit-breaker
  - pluginRef: max-score-picker
`

func TestEligibilityHealthAndBreaker(t *testing.T) {
	// sim-1 is not scraped (scrape: false): its failing scrapes would
	// make it stale, and out of rotation, within one scrape interval of
	// the kill; unscraped, only the health check takes it out, so the
	// requests picked for it meanwhile exercise the fallback.
	c := startClusterWith(t, 3, clusterOpts{noConformance: true, config: eligibilityConfig, eppArgs: []string{"--selection-strategy", "RoundRobin"},
		endpointYAML: []string{"", "scrape: false"}})
	endpoint := func(name string) (routable bool, health, breaker string) {
		st, err := c.state()
		require.NoError(t, err)
		for _, e := range st.Endpoints {
			if e.Name == name {
				return e.Routable, e.Health, e.Breaker
			}
		}
		t.Fatalf("no endpoint %s", name)
		return
	}
	require.Eventually(t, func() bool { _, h, _ := endpoint("sim-1"); return h == "healthy" }, 10*time.Second, 20*time.Millisecond)

	// Traffic all along: every request must get a 200 (the fallback
	// endpoint answers when the first refuses connections); bySim counts
	// who served, per phase, and answered who served each request.
	var (
		mu       sync.Mutex
		bySim    = map[string]int{}
		answered = map[string]string{} // request id -> sim
		bad      []string
		stop     atomic.Bool
		wg       sync.WaitGroup
		counter  atomic.Int64
		// inFlight is held (read) while a request is out: a kill takes
		// it, so that no request is on the wire to the killed server
		// (one cut mid-answer cannot be retried: Envoy's retry_on
		// connect-failure, as the gateway's, retries connects only).
		inFlight sync.RWMutex
	)
	wg.Go(func() {
		for !stop.Load() {
			i := counter.Add(1)
			id := fmt.Sprintf("elig-%d", i)
			inFlight.RLock()
			res, err := postWithReason(c, id, fmt.Sprintf(`{"model":%q,"prompt":"eligibility %d","max_tokens":2}`, modelName, i))
			inFlight.RUnlock()
			mu.Lock()
			switch {
			case err != nil:
				bad = append(bad, err.Error())
			case res.status == http.StatusOK:
				bySim[res.sim]++
				answered[id] = res.sim
			default:
				bad = append(bad, fmt.Sprintf("%s: %d (reason %q) %s", id, res.status, res.reason, res.body))
			}
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	})
	defer func() { stop.Store(true); wg.Wait() }()
	phase := func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		out := bySim
		bySim = map[string]int{}
		return out
	}
	// stopDrained stops sim-i with SIGTERM while no request is out: a
	// draining modelsim answers new requests with 503 (it is shutting
	// down), which no gateway retries; once it has exited, connects are
	// refused and the fallback answers.
	stopDrained := func(i int) {
		inFlight.Lock()
		defer inFlight.Unlock()
		c.sims[i].stop(syscall.SIGTERM)
	}
	restart := func(i int, extra ...string) {
		host, port, err := net.SplitHostPort(c.simAddr[i])
		require.NoError(t, err)
		require.Equal(t, "127.0.0.1", host)
		name := "sim-" + strconv.Itoa(i)
		c.sims[i] = startProc(t, name, "modelsim", append([]string{"--port", port, "--id", name, "--time-scale", "0.1"}, extra...)...)
		c.sims[i].waitFor(t, simAddrRE)
	}

	t.Run("a killed endpoint leaves rotation within the health check's thresholds and returns after healthyThreshold passes", func(t *testing.T) {
		inFlight.Lock()
		c.sims[1].stop(syscall.SIGKILL)
		inFlight.Unlock()
		killed := time.Now()
		require.Eventually(t, func() bool { _, h, _ := endpoint("sim-1"); return h == "unhealthy" }, 5*time.Second, 10*time.Millisecond)
		out := time.Since(killed)
		t.Logf("out of rotation %s after the kill (3 failed probes at 300 ms)", out)
		require.Less(t, out, 3*300*time.Millisecond+900*time.Millisecond)
		phase()
		time.Sleep(time.Second)
		require.Zero(t, phase()["sim-1"], "no request goes to the unhealthy endpoint")
		// Until the health check took it out, sim-1 was still picked
		// first: those requests were answered by their fallback.
		fallbacks := 0
		mu.Lock()
		for id, first := range c.routedTo() {
			if at, ok := answered[id]; ok && first == c.simAddr[1] && at != "sim-1" {
				fallbacks++
			}
		}
		mu.Unlock()
		t.Logf("%d requests picked the killed endpoint first and were answered by their fallback", fallbacks)
		require.Positive(t, fallbacks, "the fallback endpoint answers while the killed one is still in rotation")

		restart(1)
		back := time.Now()
		require.Eventually(t, func() bool { r, h, _ := endpoint("sim-1"); return r && h == "healthy" }, 5*time.Second, 10*time.Millisecond)
		t.Logf("back %s after the restart (2 passing probes at 300 ms)", time.Since(back))
		require.Less(t, time.Since(back), 2*300*time.Millisecond+900*time.Millisecond)
		phase()
		time.Sleep(time.Second)
		require.Positive(t, phase()["sim-1"], "the endpoint takes requests again")
	})

	t.Run("a slow endpoint trips the breaker with latencyAsFailure and recovers", func(t *testing.T) {
		stopDrained(2)
		restart(2, "--extra-latency", "400ms")
		require.Eventually(t, func() bool { _, _, b := endpoint("sim-2"); return b == "open" }, 10*time.Second, 10*time.Millisecond)
		// A slow request sent before the breaker opened may still be
		// answered: let those (400 ms) finish before counting.
		time.Sleep(500 * time.Millisecond)
		phase()
		time.Sleep(time.Second) // still inside the 2 s open interval
		require.Zero(t, phase()["sim-2"], "no request goes to an open breaker")

		// Fast again: after the open interval, trial requests close it.
		stopDrained(2)
		restart(2)
		require.Eventually(t, func() bool { r, _, b := endpoint("sim-2"); return r && b == "closed" }, 10*time.Second, 10*time.Millisecond)
		phase()
		time.Sleep(time.Second)
		require.Positive(t, phase()["sim-2"], "the endpoint takes requests again")
	})

	stop.Store(true)
	wg.Wait()
	mu.Lock()
	require.Empty(t, bad, "every request gets a 200: none is lost")
	mu.Unlock()
	t.Logf("%d requests sent", counter.Load())

	t.Run("with every endpoint out of rotation, requests are refused with 503 no_endpoints", func(t *testing.T) {
		for _, p := range c.sims {
			p.stop(syscall.SIGKILL)
		}
		require.Eventually(t, func() bool {
			for i := range c.sims {
				if _, h, _ := endpoint("sim-" + strconv.Itoa(i)); h != "unhealthy" {
					return false
				}
			}
			return true
		}, 10*time.Second, 20*time.Millisecond)
		// The health states reach the published snapshot at its next
		// flush; until then the requests fail to connect (503 too).
		var (
			res reasonResult
			err error
		)
		deadline := time.Now().Add(5 * time.Second)
		for {
			res, err = postWithReason(c, "elig-none", fmt.Sprintf(`{"model":%q,"prompt":"nobody home","max_tokens":2}`, modelName))
			require.NoError(t, err)
			require.Equal(t, http.StatusServiceUnavailable, res.status, "%s", res.body)
			if res.reason == "no_endpoints" || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		require.Equal(t, "no_endpoints", res.reason, "%s", res.body)
		require.Contains(t, string(res.body), "out of rotation")
	})
}

// reasonResult is an answer through the gateway with its refusal reason.
type reasonResult struct {
	status int
	sim    string // x-modelsim-id: the server that answered
	reason string // x-switchyard-reason: why it was refused
	body   []byte
}

// postWithReason sends a completion request through the gateway.
func postWithReason(c *cluster, id, body string) (reasonResult, error) {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, c.gateway+"/v1/completions", strings.NewReader(body))
	if err != nil {
		return reasonResult{}, err
	}
	req.Header.Set("content-type", "application/json")
	req.Header.Set("x-request-id", id)
	resp, err := c.client.Do(req)
	if err != nil {
		return reasonResult{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return reasonResult{status: resp.StatusCode, sim: resp.Header.Get("x-modelsim-id"), reason: resp.Header.Get("x-switchyard-reason"), body: b}, err
}
