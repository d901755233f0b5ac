package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// flowControlConfig: flow control on, the pool saturated at two requests
// per endpoint (the sims' batch size), round-robin across tenants in
// every band, a byte bound small enough for a burst of large bodies to
// reach it.
const flowControlConfig = `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
featureGates: [flowControl]
plugins:
- type: concurrency-detector
  parameters: {maxConcurrency: 2}
- type: queue-scorer
- type: max-score-picker
- {name: rr, type: round-robin-fairness-policy}
saturationDetector:
  pluginRef: concurrency-detector
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
  - pluginRef: max-score-picker
flowControl:
  maxBytes: 2Mi
  defaultRequestTTL: 25s
  defaultPriorityBand: {fairnessPolicyRef: rr}
  priorityBands:
  - {priority: 10, fairnessPolicyRef: rr}
`

const flowMaxBytes = 2 << 20

// bigRequests large bodies of phase 2 are counted 3-5 MiB in all: more
// than flowMaxBytes (phase 1's 80 small ones, ~17 KiB each, fit).
const bigRequests = 100

// scrapeFamilies reads the EPP's /metrics with labels.
func scrapeFamilies(ctx context.Context, c *cluster) (map[string]*dto.MetricFamily, error) {
	return fetchFamilies(ctx, c.metrics+"/metrics", c.token)
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// flowReply is one answered request of the burst.
type flowReply struct {
	id, tenant string
	priority   int
	status     int
	reason     string
	done       time.Time
	latency    time.Duration
}

func (c *cluster) flowPost(ctx context.Context, id, tenant, objective, prompt string) (flowReply, error) {
	body := fmt.Sprintf(`{"model":%q,"prompt":%q,"max_tokens":8}`, modelName, prompt)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.gateway+"/v1/completions", strings.NewReader(body))
	if err != nil {
		return flowReply{}, err
	}
	req.Header.Set("content-type", "application/json")
	req.Header.Set("x-request-id", id)
	req.Header.Set("x-gateway-inference-fairness-id", tenant)
	if objective != "" {
		req.Header.Set("x-gateway-inference-objective", objective)
	}
	start := time.Now()
	resp, err := c.client.Do(req)
	if err != nil {
		return flowReply{}, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return flowReply{id: id, tenant: tenant, status: resp.StatusCode, reason: resp.Header.Get("x-switchyard-reason"), done: time.Now(), latency: time.Since(start)}, nil
}

// TestFlowControlEndToEnd: through the gateway, with two modelsim
// endpoints kept saturated (--max-running 2, the EPP's concurrency limit
// 2 per endpoint), a burst of mixed-priority requests from two tenants is
// answered in full (served, or 429 with a reason); critical requests
// (priority 10 from the objectives file) wait less in the EPP than
// standard ones; while both tenants have work queued they are served in
// equal shares (round-robin, within 10 %) although tenant A's whole burst
// arrived first; a client that disconnects while queued is never
// dispatched (no Routed line, and the sims served exactly the 200s); and a
// burst of large bodies is held to flowControl.maxBytes (the bytes gauge
// never exceeds it, the excess is 429 queue_full).
func TestFlowControlEndToEnd(t *testing.T) {
	dir := t.TempDir()
	objectives := filepath.Join(dir, "objectives.yaml")
	require.NoError(t, os.WriteFile(objectives, []byte("objectives:\n- {name: critical, priority: 10}\n- {name: standard, priority: 0}\n"), 0o600))
	simArgs := []string{"--max-running", "2", "--time-scale", "1", "--decode-base", "15ms"}
	c := startClusterWith(t, 2, clusterOpts{
		config:  flowControlConfig,
		simArgs: [][]string{simArgs, simArgs},
		eppArgs: []string{"--objectives-file", objectives},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Sample the queue's bytes while the test runs.
	var maxBytes, maxQueued, maxHeld atomic.Int64
	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for sampleCtx.Err() == nil {
			if fams, err := scrapeFamilies(sampleCtx, c); err == nil {
				var b, n float64
				for _, m := range fams["inference_extension_flow_control_queue_bytes"].GetMetric() {
					b += m.GetGauge().GetValue()
				}
				for _, m := range fams["inference_extension_flow_control_queue_size"].GetMetric() {
					n += m.GetGauge().GetValue()
				}
				if int64(b) > maxBytes.Load() {
					maxBytes.Store(int64(b))
				}
				if int64(n) > maxQueued.Load() {
					maxQueued.Store(int64(n))
				}
				// The controller's own count of the bytes it holds (the
				// gauge above counts the same bytes, from a request's
				// admission to the queue).
				for _, m := range fams["switchyard_flow_control_queue_utilization"].GetMetric() {
					for _, l := range m.GetLabel() {
						if l.GetName() == "limit" && l.GetValue() == "bytes" {
							if held := int64(m.GetGauge().GetValue() * flowMaxBytes); held > maxHeld.Load() {
								maxHeld.Store(held)
							}
						}
					}
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()

	// Phase 1: tenant A's burst, then tenant B's, half critical, half
	// standard each; one client of tenant A gives up while queued.
	const perTenant = 40
	var (
		mu      sync.Mutex
		replies []flowReply
		wg      sync.WaitGroup
	)
	send := func(id, tenant, objective string, prio int) {
		defer wg.Done()
		r, err := c.flowPost(ctx, id, tenant, objective, "Tell me about flow control. "+id)
		if !assert.NoError(t, err, id) {
			return
		}
		r.priority = prio
		mu.Lock()
		replies = append(replies, r)
		mu.Unlock()
	}
	burst := func(tenant string) {
		for i := range perTenant {
			obj, prio := "standard", 0
			if i%2 == 0 {
				obj, prio = "critical", 10
			}
			wg.Add(1)
			go send(fmt.Sprintf("%s-%02d", tenant, i), tenant, obj, prio)
			time.Sleep(time.Millisecond)
		}
	}
	burst("tenant-a")
	time.Sleep(30 * time.Millisecond)
	burst("tenant-b")
	// The leaver: standard priority, so it is behind the whole burst.
	leaveCtx, leave := context.WithTimeout(ctx, 400*time.Millisecond)
	_, err := c.flowPost(leaveCtx, "leaver", "tenant-a", "standard", "I will not wait.")
	leave()
	require.Error(t, err, "the leaver gave up before an answer")
	require.True(t, errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "deadline"), "%v", err)
	wg.Wait()

	require.Len(t, replies, 2*perTenant, "every request answered")
	served := 0
	for _, r := range replies {
		switch r.status {
		case http.StatusOK:
			served++
		case http.StatusTooManyRequests:
			assert.NotEmpty(t, r.reason, "%s: a 429 says why", r.id)
		default:
			t.Errorf("%s: status %d (%s)", r.id, r.status, r.reason)
		}
	}
	assert.Equal(t, 2*perTenant, served, "nothing needed refusing in phase 1")
	assert.Greater(t, maxQueued.Load(), int64(20), "the burst was queued in the EPP")

	// Queue wait by priority, from the EPP's GIE histogram.
	fams, err := scrapeFamilies(ctx, c)
	require.NoError(t, err)
	wait := map[string][2]float64{} // priority -> sum, count
	for _, m := range fams["inference_extension_flow_control_request_queue_duration_seconds"].GetMetric() {
		if labelValue(m, "outcome") != "Dispatched" {
			continue
		}
		p := labelValue(m, "priority")
		w := wait[p]
		w[0] += m.GetHistogram().GetSampleSum()
		w[1] += float64(m.GetHistogram().GetSampleCount())
		wait[p] = w
	}
	require.Contains(t, wait, "10")
	require.Contains(t, wait, "0")
	high, low := wait["10"][0]/wait["10"][1], wait["0"][0]/wait["0"][1]
	t.Logf("mean queue wait: critical %.3fs, standard %.3fs", high, low)
	assert.Less(t, high, low, "critical requests wait less than standard ones")

	// Service shares while both tenants had work, from the order in which
	// the EPP released them (its "Released by flow control" lines), per
	// priority band: round-robin applies within a band, and the order of
	// completions at the client mixes the bands and the sims' timing. The
	// window runs from tenant B's first release in the band to the last
	// release at which both tenants still had releases to come.
	releases := map[string][]string{} // band -> tenants in release order
	for _, m := range c.epp.jsonLogs("Released by flow control") {
		flow, _ := m["flow"].(string)
		tenant, band, ok := strings.Cut(flow, "@")
		if ok && (tenant == "tenant-a" || tenant == "tenant-b") {
			releases[band] = append(releases[band], tenant)
		}
	}
	for _, band := range []string{"10", "0"} {
		seq := releases[band]
		firstB := slices.Index(seq, "tenant-b")
		require.GreaterOrEqual(t, firstB, 0, "band %s: tenant B was queued and released", band)
		left := map[string]int{}
		for _, tenant := range seq[firstB:] {
			left[tenant]++
		}
		shares := map[string]int{}
		for _, tenant := range seq[firstB:] {
			if left["tenant-a"] == 0 || left["tenant-b"] == 0 {
				break
			}
			shares[tenant]++
			left[tenant]--
		}
		a, b := float64(shares["tenant-a"]), float64(shares["tenant-b"])
		t.Logf("band %s: releases while both tenants waited: %v (all releases: %d)", band, shares, len(seq))
		assert.GreaterOrEqual(t, a+b, 8.0, "band %s: both tenants waited together for a while", band)
		// Round-robin alternates; two releases logged at the same moment
		// may swap, so one step either way is allowed besides the 10 %.
		assert.LessOrEqual(t, abs(a-b), max(2, 0.1*max(a, b)), "band %s: tenants' shares within 10%% of each other", band)
	}

	// The leaver was never dispatched: the EPP routed only the burst, and
	// the sims served exactly the 200s.
	routed := c.routedTo()
	assert.NotContains(t, routed, "leaver", "the request that left while queued was never routed")
	var cancelled float64
	for _, m := range fams["switchyard_flow_control_outcomes_total"].GetMetric() {
		if labelValue(m, "outcome") == "cancelled" {
			cancelled = m.GetCounter().GetValue()
		}
	}
	assert.Equal(t, 1.0, cancelled, "flow control saw the leaver go")
	var simServed float64
	for _, addr := range c.simAddr {
		sf, err := scrape(ctx, "http://"+addr+"/metrics")
		require.NoError(t, err)
		if f := sf["vllm:request_success_total"]; f != nil {
			simServed += f.sum
		}
	}
	assert.Equal(t, float64(served), simServed, "the model servers served the burst and nothing else")

	// Phase 2: large bodies, more than maxBytes of them at once (a queued
	// one counts its body's capacity, 16-32 KiB, and the 16 KiB
	// per-request overhead; its prompt aliases the body).
	big := strings.Repeat("lorem ipsum dolor sit amet ", 600) // ~16 KiB
	var bigReplies []flowReply
	var bmu sync.Mutex
	for i := range bigRequests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := c.flowPost(ctx, fmt.Sprintf("big-%02d", i), "tenant-c", "standard", big)
			if assert.NoError(t, err) {
				bmu.Lock()
				bigReplies = append(bigReplies, r)
				bmu.Unlock()
			}
		}()
	}
	wg.Wait()
	stopSampling()
	<-sampled
	require.Len(t, bigReplies, bigRequests)
	var full int
	for _, r := range bigReplies {
		switch {
		case r.status == http.StatusOK:
		case r.status == http.StatusTooManyRequests && r.reason == "queue_full":
			full++
		default:
			t.Errorf("%s: status %d reason %q", r.id, r.status, r.reason)
		}
	}
	t.Logf("large bodies: %d of %d refused queue_full; most bytes held %d, gauge %d (limit %d)", full, bigRequests, maxHeld.Load(), maxBytes.Load(), flowMaxBytes)
	assert.Positive(t, full, "the byte bound was reached")
	assert.LessOrEqual(t, maxHeld.Load(), int64(flowMaxBytes), "the bytes flow control holds never exceed flowControl.maxBytes")
	assert.Positive(t, maxHeld.Load(), "the controller's byte count was sampled")
	assert.Positive(t, maxBytes.Load())
	assert.LessOrEqual(t, maxBytes.Load(), int64(flowMaxBytes), "GIE's queue_bytes gauge counts only admitted requests")
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// flowMemoryConfig: flow control bounded at maxBytes (the %s, a
// Kubernetes quantity), the pool saturated at
// two requests per endpoint.
const flowMemoryConfig = `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
featureGates: [flowControl]
plugins:
- type: concurrency-detector
  parameters: {maxConcurrency: 2}
- type: queue-scorer
- type: max-score-picker
saturationDetector:
  pluginRef: concurrency-detector
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
  - pluginRef: max-score-picker
flowControl:
  maxBytes: %s
  defaultRequestTTL: 25s
`

const (
	flowMemoryMaxBytes = 4 << 20
	// flowMemoryOverhead is the documented factor between what flow
	// control counts and the heap growth the EPP may show for it: the Go
	// collector lets the heap reach twice the live data before it
	// collects (GOGC=100), and refused or dispatched requests leave
	// garbage (their bodies, parsed prompts, gRPC messages) until then.
	flowMemoryOverhead = 3
	// flowMemorySlack covers what does not scale with the queue: gRPC
	// buffers of the open streams, goroutine stacks, metric series.
	flowMemorySlack = 24 << 20
)

// procStatusKiB reads a "Name:   N kB" line of /proc/<pid>/status.
func procStatusKiB(pid int, name string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			var n int64
			_, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &n)
			return n, err
		}
	}
	return 0, fmt.Errorf("%s not in /proc/%d/status", name, pid)
}

func gaugeSum(fams map[string]*dto.MetricFamily, name string) float64 {
	var v float64
	for _, m := range fams[name].GetMetric() {
		v += m.GetGauge().GetValue()
	}
	return v
}

// memoryRun is what one TestFlowControlMemoryBound load showed.
type memoryRun struct {
	ok, full, other                 int
	peakQueued, peakHeld            int64
	baseHeap, heapGrowth, rssGrowth int64
}

// runMemoryLoad starts a two-endpoint cluster whose queue is bounded at
// maxBytes (a Kubernetes quantity), offers it flowMemoryRequests requests
// of 64 KiB prompts paced over ~4 s, samples the EPP's heap in use, VmRSS
// and queue every 50 ms, and, with drain false, cancels every request
// still waiting once the last has arrived (so a control run with a large
// bound does not wait for its whole queue to be served).
func runMemoryLoad(t *testing.T, maxBytes string, drain bool) memoryRun {
	t.Helper()
	simArgs := []string{"--max-running", "2", "--time-scale", "1", "--decode-base", "20ms", "--prefill-per-token", "5us", "--max-model-len", "65536", "--kv-blocks", "16384"}
	c := startClusterWith(t, 2, clusterOpts{config: fmt.Sprintf(flowMemoryConfig, maxBytes), simArgs: [][]string{simArgs, simArgs}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pid := c.epp.cmd.Process.Pid

	// Baseline, after a few requests warmed the paths up.
	for i := range 4 {
		r, err := c.flowPost(ctx, fmt.Sprintf("warm-%d", i), "tenant-w", "", "warm up")
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, r.status)
	}
	fams, err := scrapeFamilies(ctx, c)
	require.NoError(t, err)
	var run memoryRun
	run.baseHeap = int64(gaugeSum(fams, "go_memstats_heap_inuse_bytes"))
	baseRSS, err := procStatusKiB(pid, "VmRSS")
	require.NoError(t, err)
	require.Positive(t, run.baseHeap)

	var peakHeap, peakRSS, peakHeld, peakQueued atomic.Int64
	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for sampleCtx.Err() == nil {
			if rss, err := procStatusKiB(pid, "VmRSS"); err == nil && rss > peakRSS.Load() {
				peakRSS.Store(rss)
			}
			if fams, err := scrapeFamilies(sampleCtx, c); err == nil {
				if h := int64(gaugeSum(fams, "go_memstats_heap_inuse_bytes")); h > peakHeap.Load() {
					peakHeap.Store(h)
				}
				if n := int64(gaugeSum(fams, "inference_extension_flow_control_queue_size")); n > peakQueued.Load() {
					peakQueued.Store(n)
				}
				if b := int64(gaugeSum(fams, "inference_extension_flow_control_queue_bytes")); b > peakHeld.Load() {
					peakHeld.Store(b)
				}
			}
			// Not faster: each scrape makes garbage in the EPP too.
			time.Sleep(50 * time.Millisecond)
		}
	}()

	prompt := strings.Repeat("memory bound ", 64<<10/13)
	reqCtx, cancelRequests := context.WithCancel(ctx)
	defer cancelRequests()
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		replies []flowReply
	)
	for i := range flowMemoryRequests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := c.flowPost(reqCtx, fmt.Sprintf("mem-%04d", i), fmt.Sprintf("tenant-%d", i%4), "", prompt)
			if err != nil {
				if !drain && reqCtx.Err() != nil {
					return // cancelled by the control run
				}
				assert.NoError(t, err)
				return
			}
			mu.Lock()
			replies = append(replies, r)
			mu.Unlock()
		}()
		// Requests arrive over ~4 s, not all in one instant: what a request
		// holds while its body arrives and is parsed is bounded by the
		// buffer budget (--max-buffered-request-bytes), not by flow control;
		// paced, the EPP's growth is the queue's.
		time.Sleep(4 * time.Millisecond)
	}
	if !drain {
		time.Sleep(500 * time.Millisecond) // the last arrivals queue
		stopSampling()
		<-sampled
		cancelRequests()
	}
	wg.Wait()
	stopSampling()
	<-sampled

	for _, r := range replies {
		switch {
		case r.status == http.StatusOK:
			run.ok++
		case r.status == http.StatusTooManyRequests && r.reason == "queue_full":
			run.full++
		default:
			run.other++
			if drain {
				t.Errorf("%s: status %d reason %q", r.id, r.status, r.reason)
			}
		}
	}
	if drain {
		require.Len(t, replies, flowMemoryRequests, "every request answered")
	}
	run.peakQueued, run.peakHeld = peakQueued.Load(), peakHeld.Load()
	run.heapGrowth = peakHeap.Load() - run.baseHeap
	run.rssGrowth = (peakRSS.Load() - baseRSS) << 10
	return run
}

// flowMemoryRequests is the load of TestFlowControlMemoryBound: 1000
// requests of 64 KiB prompts, ~80 MB counted (body capacity and the
// 16 KiB per-request overhead each), over twice the bound the test
// allows, so an EPP that held what it was offered could not pass.
const flowMemoryRequests = 1000

// TestFlowControlMemoryBound: the EPP's memory stays bounded by
// flowControl.maxBytes. 1000 requests of 64 KiB prompts (each counted as
// 80-144 KiB queued: its body's capacity and the 16 KiB per-request
// overhead; the prompt, one unescaped string, aliases the body) arrive
// over ~4 s at a saturated pool (4 requests in flight, ~13 served a
// second) whose queue is bounded at 4 MiB: the queue never holds more
// than 4 MiB, the excess is refused with 429 queue_full, every request is
// answered, and the EPP's Go heap in use and its resident set (VmRSS)
// never grow past their baseline by more than maxBytes ×
// flowMemoryOverhead + flowMemorySlack (~37.7 MB). The control run offers
// the same load with a 512 MiB bound, which keeps nearly every request
// queued: its heap grows past that bound, so the bound is one the EPP
// meets only because flow control enforces maxBytes.
func TestFlowControlMemoryBound(t *testing.T) {
	bound := int64(flowMemoryMaxBytes*flowMemoryOverhead + flowMemorySlack)
	run := runMemoryLoad(t, "4Mi", true)
	t.Logf("bounded: %d served, %d refused queue_full; peak queued %d, held %d B (limit %d); heap in use %d (+%d), VmRSS +%d B; bound +%d B",
		run.ok, run.full, run.peakQueued, run.peakHeld, flowMemoryMaxBytes, run.baseHeap, run.heapGrowth, run.rssGrowth, bound)
	assert.Positive(t, run.full, "requests over the byte bound were refused")
	assert.Positive(t, run.ok)
	assert.Greater(t, run.peakQueued, int64(8), "the queue held many large requests")
	assert.LessOrEqual(t, run.peakHeld, int64(flowMemoryMaxBytes), "GIE's queue_bytes gauge never passes maxBytes")
	assert.Greater(t, run.peakHeld, int64(flowMemoryMaxBytes/2), "the queue came near its bound")
	assert.LessOrEqual(t, run.heapGrowth, bound, "the EPP's heap stays within baseline + maxBytes × %d + slack", flowMemoryOverhead)
	assert.LessOrEqual(t, run.rssGrowth, bound, "the EPP's resident set stays within baseline + maxBytes × %d + slack", flowMemoryOverhead)

	control := runMemoryLoad(t, "512Mi", false)
	t.Logf("control (512Mi): %d served, %d refused queue_full; peak queued %d, held %d B; heap in use %d (+%d), VmRSS +%d B",
		control.ok, control.full, control.peakQueued, control.peakHeld, control.baseHeap, control.heapGrowth, control.rssGrowth)
	assert.Zero(t, control.full, "the control's bound holds the whole load")
	assert.Greater(t, control.peakHeld, bound, "the control queues more than the bound")
	assert.Greater(t, control.heapGrowth, bound, "without the byte bound the same load takes the heap past the bound: the test can fail")
}
