package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
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
// Throughout, every request is answered by an endpoint or refused clearly.
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
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: circuit-breaker
  - pluginRef: max-score-picker
`

func TestEligibilityHealthAndBreaker(t *testing.T) {
	c := startClusterWith(t, 3, clusterOpts{noConformance: true, config: eligibilityConfig, eppArgs: []string{"--selection-strategy", "RoundRobin"}})
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

	// Traffic all along: every answer is from an endpoint or a refusal
	// with a reason; bySim counts who served, per phase.
	var (
		mu      sync.Mutex
		bySim   = map[string]int{}
		bad     []string
		stop    atomic.Bool
		wg      sync.WaitGroup
		counter atomic.Int64
	)
	wg.Go(func() {
		for !stop.Load() {
			i := counter.Add(1)
			res, err := c.post(context.Background(), fmt.Sprintf("elig-%d", i), "/v1/completions",
				fmt.Sprintf(`{"model":%q,"prompt":"eligibility %d","max_tokens":2}`, modelName, i))
			mu.Lock()
			switch {
			case err != nil:
				bad = append(bad, err.Error())
			case res.status == http.StatusOK:
				bySim[res.sim]++
			case res.status == http.StatusServiceUnavailable || res.status == http.StatusGatewayTimeout:
				// A request sent to an endpoint just before it left
				// rotation: refused by the gateway with a reason.
			default:
				bad = append(bad, fmt.Sprintf("%d %s", res.status, res.body))
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
	restart := func(i int, extra ...string) {
		host, port, err := net.SplitHostPort(c.simAddr[i])
		require.NoError(t, err)
		require.Equal(t, "127.0.0.1", host)
		name := "sim-" + strconv.Itoa(i)
		c.sims[i] = startProc(t, name, "modelsim", append([]string{"--port", port, "--id", name, "--time-scale", "0.1"}, extra...)...)
		c.sims[i].waitFor(t, simAddrRE)
	}

	t.Run("a killed endpoint leaves rotation within the health check's thresholds and returns after healthyThreshold passes", func(t *testing.T) {
		c.sims[1].stop(syscall.SIGKILL)
		killed := time.Now()
		require.Eventually(t, func() bool { _, h, _ := endpoint("sim-1"); return h == "unhealthy" }, 5*time.Second, 10*time.Millisecond)
		out := time.Since(killed)
		t.Logf("out of rotation %s after the kill (3 failed probes at 300 ms)", out)
		require.Less(t, out, 3*300*time.Millisecond+900*time.Millisecond)
		phase()
		time.Sleep(time.Second)
		require.Zero(t, phase()["sim-1"], "no request goes to the unhealthy endpoint")

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
		c.sims[2].stop(syscall.SIGTERM)
		restart(2, "--extra-latency", "400ms")
		require.Eventually(t, func() bool { _, _, b := endpoint("sim-2"); return b == "open" }, 10*time.Second, 10*time.Millisecond)
		phase()
		time.Sleep(1500 * time.Millisecond) // inside the 2 s open interval
		require.Zero(t, phase()["sim-2"], "no request goes to an open breaker")

		// Fast again: after the open interval, trial requests close it.
		c.sims[2].stop(syscall.SIGTERM)
		restart(2)
		require.Eventually(t, func() bool { r, _, b := endpoint("sim-2"); return r && b == "closed" }, 10*time.Second, 10*time.Millisecond)
		phase()
		time.Sleep(time.Second)
		require.Positive(t, phase()["sim-2"], "the endpoint takes requests again")
	})

	stop.Store(true)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, bad, "every request is answered by an endpoint or refused with a reason")
	t.Logf("%d requests sent", counter.Load())
}
