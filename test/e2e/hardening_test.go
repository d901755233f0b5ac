package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// The hardening tests of issue 9: each runs the real binaries and tries
// what a hostile client or a broken model server would.

// eppClient dials the EPP's ext_proc port as Envoy does (TLS, the EPP's
// self-signed certificate not verified).
func eppClient(t *testing.T, addr string) extprocv3.ExternalProcessorClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{InsecureSkipVerify: true}))) //nolint:gosec // the EPP's self-signed certificate
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return extprocv3.NewExternalProcessorClient(conn)
}

func extHeaders(eos bool, kv ...string) *extprocv3.ProcessingRequest {
	hm := &corev3.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hm, EndOfStream: eos}}}
}

func extBody(b []byte, eos bool) *extprocv3.ProcessingRequest {
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: b, EndOfStream: eos}}}
}

// immediate returns the status and x-switchyard-reason of an immediate
// response (0 and "" for any other message).
func immediate(r *extprocv3.ProcessingResponse) (int, string) {
	ir := r.GetImmediateResponse()
	if ir == nil {
		return 0, ""
	}
	reason := ""
	for _, h := range ir.GetHeaders().GetSetHeaders() {
		if h.GetHeader().GetKey() == "x-switchyard-reason" {
			reason = string(h.GetHeader().GetRawValue())
		}
	}
	return int(ir.GetStatus().GetCode()), reason
}

// procStatusBytes reads a "VmRSS"-style line of /proc/PID/status in bytes.
func procStatusBytes(t *testing.T, pid int, key string) int64 {
	t.Helper()
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), key+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			require.NoError(t, err)
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", key, pid)
	return 0
}

// Finding 1: under the default configuration a client cannot choose the
// endpoint with test-epp-endpoint-selection, cannot learn which endpoints
// exist from it, and is not told which endpoint served.
func TestHardeningClientCannotSteer(t *testing.T) {
	c := startClusterWith(t, 4, clusterOpts{noConformance: true})
	target := c.simAddr[0]
	ctx := t.Context()
	bySim := map[string]int{}
	for i := range 20 {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.gateway+"/v1/completions",
			strings.NewReader(fmt.Sprintf(`{"model":%q,"prompt":"steer %d %d","max_tokens":2}`, modelName, i, time.Now().UnixNano())))
		require.NoError(t, err)
		req.Header.Set("content-type", "application/json")
		req.Header.Set("test-epp-endpoint-selection", target)
		resp, err := c.client.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Empty(t, resp.Header.Get("x-conformance-test-served-endpoint"), "the served endpoint is not echoed to clients")
		bySim[resp.Header.Get("x-modelsim-id")]++
	}
	t.Logf("requests naming sim-0 (%s) per endpoint: %v", target, bySim)
	require.Less(t, bySim["sim-0"], 16, "the header must not steer requests: %v", bySim)
	require.GreaterOrEqual(t, len(bySim), 2, "the scheduler spreads requests: %v", bySim)

	// An address no endpoint has is ignored too: no 503 that would tell
	// the client which addresses exist.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.gateway+"/v1/completions",
		strings.NewReader(fmt.Sprintf(`{"model":%q,"prompt":"unknown","max_tokens":2}`, modelName)))
	require.NoError(t, err)
	req.Header.Set("content-type", "application/json")
	req.Header.Set("test-epp-endpoint-selection", "127.99.0.1:1")
	resp, err := c.client.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// Finding 2: thousands of half-open streams each pushing a megabyte of
// body cannot take the EPP past its buffer budget, and requests through
// the gateway keep being served meanwhile.
func TestHardeningHalfOpenStreamsBounded(t *testing.T) {
	const (
		budget    = 64 << 20
		streams   = 1000
		perStream = 1 << 20
		chunk     = 64 << 10
	)
	c := startClusterWith(t, 2, clusterOpts{noConformance: true, eppArgs: []string{
		"--max-buffered-request-bytes", strconv.Itoa(budget), "--max-request-body-bytes", strconv.Itoa(4 << 20), "--request-body-timeout", "30s", "-v", "1"}})
	pid := c.epp.cmd.Process.Pid
	base := procStatusBytes(t, pid, "VmRSS")

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	clients := make([]extprocv3.ExternalProcessorClient, 4)
	for i := range clients {
		clients[i] = eppClient(t, c.grpc)
	}
	var (
		wg       sync.WaitGroup
		refused  atomic.Int64
		started  atomic.Int64
		reasons  sync.Map
		payload  = make([]byte, chunk)
		stopping atomic.Bool
	)
	for i := range payload {
		payload[i] = 'a' + byte(i%26)
	}
	for i := range streams {
		wg.Go(func() {
			st, err := clients[i%len(clients)].Process(ctx)
			if err != nil {
				return
			}
			if st.Send(extHeaders(false, ":method", "POST", ":path", "/v1/completions", "content-type", "application/json")) != nil {
				return
			}
			started.Add(1)
			for sent := 0; sent < perStream; sent += chunk {
				if st.Send(extBody(payload, false)) != nil {
					break
				}
			}
			r, err := st.Recv()
			if err != nil {
				return
			}
			if code, reason := immediate(r); code != 0 {
				refused.Add(1)
				reasons.Store(fmt.Sprintf("%d %s", code, reason), true)
			}
		})
	}

	// Normal requests through the gateway while the flood runs.
	var served, failed atomic.Int64
	var failures sync.Map
	normalDone := make(chan struct{})
	go func() {
		defer close(normalDone)
		for i := 0; !stopping.Load(); i++ {
			res, err := c.post(ctx, fmt.Sprintf("normal-%d", i), "/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":"normal %d","max_tokens":2}`, modelName, i))
			switch {
			case err == nil && res.status == http.StatusOK:
				served.Add(1)
			case ctx.Err() == nil:
				failed.Add(1)
				failures.Store(fmt.Sprintf("%d %v %s", res.status, err, res.body), true)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()

	var peak atomic.Int64
	sampleDone := make(chan struct{})
	go func() {
		defer close(sampleDone)
		for !stopping.Load() {
			if v := procStatusBytes(t, pid, "VmRSS"); v > peak.Load() {
				peak.Store(v)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	// The flood is over when every stream beyond the large tier (three
	// quarters of the budget) was refused; the others hold their bytes,
	// waiting for the rest of the body.
	held := int64(budget * 3 / 4 / perStream)
	deadline := time.Now().Add(20 * time.Second)
	for refused.Load() < streams-held && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second)
	stopping.Store(true)
	<-normalDone
	<-sampleDone
	hwm := procStatusBytes(t, pid, "VmHWM")
	cancel()
	wg.Wait()

	var rs []string
	reasons.Range(func(k, _ any) bool { rs = append(rs, k.(string)); return true })
	t.Logf("streams started %d, refused %d (%v); EPP RSS base %d MiB, sampled peak %d MiB, VmHWM %d MiB; normal requests served %d, failed %d",
		started.Load(), refused.Load(), rs, base>>20, peak.Load()>>20, hwm>>20, served.Load(), failed.Load())
	require.Contains(t, rs, "503 buffer_budget_exhausted")
	// Every stream beyond the large tier is refused (on a loaded machine
	// some may still be sending when the check ends, so not all of them
	// need to have been refused yet).
	require.LessOrEqual(t, refused.Load(), streams-held, "at most the streams beyond the large tier are refused")
	require.Greater(t, refused.Load(), int64(streams/2), "the streams beyond the budget are refused")
	// Unbounded, the EPP would hold streams × 1 MiB (a gigabyte). Bounded,
	// it holds the budget's body bytes, and its heap up to a few times that
	// (slices grown by appending, message buffers, the garbage collector's
	// headroom, memory freed but not yet returned to the system) plus
	// transport buffers: base + budget + 512 MiB is generous and still well
	// below the unbounded gigabyte.
	limit := base + budget + 512<<20
	require.Less(t, hwm, limit, "peak resident memory %d MiB exceeds base + budget + 512 MiB = %d MiB", hwm>>20, limit>>20)
	var fs []string
	failures.Range(func(k, _ any) bool { fs = append(fs, k.(string)); return true })
	require.Zero(t, failed.Load(), "normal requests failed during the flood: %v", fs)
	require.Greater(t, served.Load(), int64(10))
}

// Finding 2: a request whose body stalls is refused with 408 once
// --request-body-timeout has passed, and so is a stream that sends nothing.
func TestHardeningStalledBodyRefused(t *testing.T) {
	c := startClusterWith(t, 1, clusterOpts{noConformance: true, eppArgs: []string{"--request-body-timeout", "1s"}})
	client := eppClient(t, c.grpc)
	for _, tc := range []struct {
		name string
		send []*extprocv3.ProcessingRequest
	}{
		{"stalled body", []*extprocv3.ProcessingRequest{
			extHeaders(false, ":method", "POST", ":path", "/v1/completions"), extBody([]byte(`{"model":"m","prompt":"half`), false)}},
		{"headers only, no end of stream", []*extprocv3.ProcessingRequest{extHeaders(false, ":method", "POST", ":path", "/v1/completions")}},
		{"nothing at all", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := client.Process(t.Context())
			require.NoError(t, err)
			start := time.Now()
			for _, m := range tc.send {
				require.NoError(t, st.Send(m))
			}
			r, err := st.Recv()
			elapsed := time.Since(start)
			// The stream gets the 408 (a stream that sent nothing may
			// also just be ended).
			if err == nil || len(tc.send) > 0 {
				require.NoError(t, err)
				code, reason := immediate(r)
				require.Equal(t, http.StatusRequestTimeout, code)
				require.Equal(t, "body_timeout", reason)
			}
			require.GreaterOrEqual(t, elapsed, 900*time.Millisecond)
			require.Less(t, elapsed, 5*time.Second)
		})
	}
}

// Finding 3: endpoints whose metrics read NaN, +Inf or negative values
// are not ready and get no request while healthy ones exist, and
// /debug/endpoints says why.
func TestHardeningBrokenMetricsNeverWin(t *testing.T) {
	faults := []string{"", "", "", "nan", "inf", "negative", "nan"}
	c := startClusterWith(t, len(faults), clusterOpts{faults: faults, unready: 4})
	require.Eventually(t, func() bool {
		st, err := c.state()
		if err != nil {
			return false
		}
		unknown := 0
		for _, e := range st.Endpoints {
			if e.LoadUnknown != "" && !e.Ready {
				unknown++
			}
		}
		return unknown == 4
	}, 10*time.Second, 50*time.Millisecond, "the broken endpoints are shown with their load unknown")
	st, err := c.state()
	require.NoError(t, err)
	for _, e := range st.Endpoints {
		t.Logf("%s ready=%v loadUnknown=%q", e.Name, e.Ready, e.LoadUnknown)
	}
	bySim := map[string]int{}
	for i := range 90 {
		res, err := c.post(t.Context(), fmt.Sprintf("broken-%d", i), "/v1/completions", fmt.Sprintf(`{"model":%q,"prompt":"load %d","max_tokens":2}`, modelName, i))
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.status, string(res.body))
		bySim[res.sim]++
	}
	t.Logf("requests per endpoint: %v", bySim)
	for sim := range bySim {
		require.Contains(t, []string{"sim-0", "sim-1", "sim-2"}, sim, "a broken endpoint took requests: %v", bySim)
	}
}

// Finding 5: under the defaults the metrics port serves /metrics and no
// debug data; Finding 6: a POST without a body is refused like any bad
// request instead of being routed at random.
func TestHardeningDefaults(t *testing.T) {
	p := startProc(t, "sim", "modelsim", "--port", "0", "--id", "sim", "--time-scale", "0.1")
	addr := p.waitFor(t, simAddrRE)
	host, port, _ := strings.Cut(addr, ":")
	dir := t.TempDir()
	epFile := filepath.Join(dir, "endpoints.yaml")
	require.NoError(t, os.WriteFile(epFile, fmt.Appendf(nil, "endpoints:\n- name: sim\n  address: %s\n  port: %s\n", host, port), 0o600))
	metricsPort := freePort(t)
	epp := startProc(t, "epp", "epp", "--endpoints-file", epFile, "--grpc-port", "0", "--grpc-health-port", "0",
		"--metrics-port", strconv.Itoa(metricsPort), "--metrics-bind-address", "127.0.0.1", "--grpc-bind-address", "127.0.0.1",
		"--grpc-health-bind-address", "127.0.0.1", "--zap-encoder", "json")
	serving := epp.waitFor(t, regexp.MustCompile(`"msg":"Switchyard serving".*"extProc":"([^"]+)"`))
	base := "http://127.0.0.1:" + strconv.Itoa(metricsPort)
	for _, tc := range []struct {
		path string
		want int
	}{
		{"/metrics", http.StatusOK},
		{"/debug/endpoints", http.StatusNotFound},
		{"/debug/pprof/", http.StatusNotFound},
		{"/debug/pprof/heap", http.StatusNotFound},
		{"/debug/pprof/cmdline", http.StatusNotFound},
	} {
		resp, err := http.Get(base + tc.path)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, tc.want, resp.StatusCode, tc.path)
	}

	gw := startProc(t, "gateway", "epp", "gateway", "--listen", "127.0.0.1:0", "--epp-addr", serving)
	gwURL := "http://" + gw.waitFor(t, gatewayAddrRE)
	req, err := http.NewRequest(http.MethodPost, gwURL+"/v1/completions", http.NoBody)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Equal(t, "bad_request", resp.Header.Get("x-switchyard-reason"), "the EPP refused it; it was not routed to a model server")
}
