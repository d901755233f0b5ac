package gateway

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// rawConn dials addr on loopback and closes the connection at cleanup.
func rawConn(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// readRawResponse reads one HTTP response from c within d.
func readRawResponse(t *testing.T, c net.Conn, d time.Duration) *http.Response {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(d))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no response within %s: %v", d, err)
	}
	return resp
}

func gaugeValue(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var d dto.Metric
	if err := g.Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetGauge().GetValue()
}

// eventually polls cond every 10 ms for up to 5 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// A client that sends its headers and half its body, then stalls, gets 408
// once BodyReadTimeout passed, and the EPP's stream is cancelled, so the EPP
// releases the body it buffered.
func TestBodyReadTimeout(t *testing.T) {
	for _, tc := range []struct {
		name   string
		header string
		part   string
	}{
		{"content-length", "Content-Length: 1000\r\n", strings.Repeat("a", 500)},
		{"chunked", "Transfer-Encoding: chunked\r\n", fmt.Sprintf("%x\r\n%s\r\n", 500, strings.Repeat("a", 500))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {})
			h := newHarness(t, fakeConfig{dest: up.hostPort()}, func(o *Options) { o.BodyReadTimeout = 300 * time.Millisecond })
			c := rawConn(t, h.srv.Listener.Addr().String())
			start := time.Now()
			if _, err := io.WriteString(c, "POST /v1/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"+tc.header+"\r\n"+tc.part); err != nil {
				t.Fatal(err)
			}
			resp := readRawResponse(t, c, 10*time.Second)
			elapsed := time.Since(start)
			checkJSONError(t, resp, http.StatusRequestTimeout, ReasonRequestTimeout)
			if elapsed < 250*time.Millisecond || elapsed > 5*time.Second {
				t.Errorf("408 after %s, want about the 300ms BodyReadTimeout", elapsed)
			}
			rec := h.epp.nextStream(t)
			if status.Code(rec.err) != codes.Canceled || rec.ctxErr == nil {
				t.Errorf("EPP stream ended with err=%v ctxErr=%v, want it cancelled", rec.err, rec.ctxErr)
			}
			var got int
			for _, r := range rec.reqs {
				if b := r.GetRequestBody(); b != nil {
					got += len(b.GetBody())
					if b.GetEndOfStream() {
						t.Error("EPP saw a request body end_of_stream, want none")
					}
				}
			}
			if got != 500 {
				t.Errorf("EPP saw %d body bytes, want the 500 sent", got)
			}
			if n := up.hits.Load(); n != 0 {
				t.Errorf("upstream called %d times, want 0", n)
			}
			if got := counterValue(h.gw.metrics.timeouts[timeoutBodyRead]); got != 1 {
				t.Errorf("timeouts_total{kind=body_read} = %v, want 1", got)
			}
			if got := counterValue(h.gw.metrics.requests.WithLabelValues("408", sourceGateway)); got != 1 {
				t.Errorf("requests_total{code=408,source=gateway} = %v, want 1", got)
			}
		})
	}
}

// Behind a ResponseWriter that cannot set read deadlines, the EPP's stream is
// still cancelled at the deadline while the client stalls.
func TestBodyReadTimeoutWithoutReadDeadline(t *testing.T) {
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {})
	epp := startFakeEPP(t, fakeConfig{dest: up.hostPort()})
	gw, err := New(Options{EPPAddr: epp.addr, BodyReadTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// A wrapper without Unwrap hides the connection from ResponseController.
	type opaqueWriter struct{ http.ResponseWriter }
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gw.ServeHTTP(opaqueWriter{w}, r)
	}))
	t.Cleanup(func() {
		srv.Close()
		_ = gw.Close()
	})
	c := rawConn(t, srv.Listener.Addr().String())
	if _, err := io.WriteString(c, "POST /x HTTP/1.1\r\nHost: gw\r\nContent-Length: 1000\r\n\r\n"+strings.Repeat("a", 500)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	rec := epp.nextStream(t)
	if status.Code(rec.err) != codes.Canceled {
		t.Errorf("EPP stream ended with %v, want it cancelled", rec.err)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("EPP stream cancelled after %s, want about 300ms", elapsed)
	}
	_ = c.Close() // the pending read ends; the handler counts the timeout
	eventually(t, "timeouts_total{kind=body_read} = 1", func() bool { return counterValue(gw.metrics.timeouts[timeoutBodyRead]) == 1 })
}

// A client that sends its body slowly but completes it within
// BodyReadTimeout is served, and once its body is complete the deadline no
// longer applies: a slow upstream answer and the next request on the same
// connection are not cut.
func TestSlowUploadWithinBodyReadTimeout(t *testing.T) {
	const timeout = 800 * time.Millisecond
	var slow atomic.Bool
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if slow.Load() {
			time.Sleep(timeout + 400*time.Millisecond)
		}
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(b)
	})
	h := newHarness(t, fakeConfig{dest: up.hostPort()}, func(o *Options) { o.BodyReadTimeout = timeout })

	pieces := []string{`{"prompt":"`, strings.Repeat("x", 40000), `abc`, strings.Repeat("y", 1000), `"}`}
	pr, pw := io.Pipe()
	go func() {
		for _, p := range pieces {
			time.Sleep(100 * time.Millisecond)
			if _, err := io.WriteString(pw, p); err != nil {
				return
			}
		}
		_ = pw.Close()
	}()
	slow.Store(true)
	req, _ := http.NewRequest(http.MethodPost, h.url("/v1/completions"), pr) // chunked: length unknown
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join(pieces, "")
	if b := readAll(t, resp); resp.StatusCode != http.StatusOK || string(b) != want {
		t.Fatalf("slow upload: got %d with %d bytes, want 200 echoing %d bytes (%.100s)", resp.StatusCode, len(b), len(want), b)
	}
	slow.Store(false)
	// The same keep-alive connection, well after the first deadline.
	resp = post(t, h, "/v1/completions", []byte(`{"n":2}`), nil)
	if b := readAll(t, resp); resp.StatusCode != http.StatusOK || string(b) != `{"n":2}` {
		t.Fatalf("second request: got %d %q", resp.StatusCode, b)
	}
	if got := counterValue(h.gw.metrics.timeouts[timeoutBodyRead]); got != 0 {
		t.Errorf("timeouts_total{kind=body_read} = %v, want 0", got)
	}
}

// An upstream that accepts the request and never answers gets 504 after
// UpstreamHeaderTimeout; its request is cancelled and the reply passes
// through the EPP's response path.
func TestUpstreamHeaderTimeout(t *testing.T) {
	cancelled := make(chan struct{})
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
			close(cancelled)
		case <-time.After(10 * time.Second):
		}
	})
	h := newHarness(t, fakeConfig{dest: up.hostPort()}, func(o *Options) { o.UpstreamHeaderTimeout = 300 * time.Millisecond })
	start := time.Now()
	resp := post(t, h, "/v1/completions", []byte(`{}`), nil)
	elapsed := time.Since(start)
	checkJSONError(t, resp, http.StatusGatewayTimeout, ReasonUpstreamTimeout)
	if elapsed < 250*time.Millisecond || elapsed > 5*time.Second {
		t.Errorf("504 after %s, want about the 300ms UpstreamHeaderTimeout", elapsed)
	}
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Error("the upstream request was not cancelled")
	}
	rec := h.epp.nextStream(t)
	var sawStatus string
	for _, r := range rec.reqs {
		for _, hv := range r.GetResponseHeaders().GetHeaders().GetHeaders() {
			if hv.GetKey() == ":status" {
				sawStatus = string(hv.GetRawValue())
			}
		}
	}
	if sawStatus != "504" {
		t.Errorf("EPP saw response :status %q, want the local 504", sawStatus)
	}
	if got := counterValue(h.gw.metrics.timeouts[timeoutUpstreamHeaders]); got != 1 {
		t.Errorf("timeouts_total{kind=upstream_headers} = %v, want 1", got)
	}
	if got := counterValue(h.gw.metrics.requests.WithLabelValues("504", sourceGateway)); got != 1 {
		t.Errorf("requests_total{code=504,source=gateway} = %v, want 1", got)
	}
}

// stallingUpstream sends its headers and one SSE event, then stalls until its
// request is cancelled (closing the returned channel) or 10 s pass.
func stallingUpstream(t *testing.T, delay time.Duration) (*upstream, chan struct{}) {
	cancelled := make(chan struct{})
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(delay)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: first\n\n")
		_ = http.NewResponseController(w).Flush()
		select {
		case <-r.Context().Done():
			close(cancelled)
		case <-time.After(10 * time.Second):
		}
	})
	return up, cancelled
}

// An upstream that sends its headers and a first event, then stalls, is cut
// after UpstreamIdleTimeout: the client's response is aborted (truncated), the
// upstream request is cancelled and the EPP's stream ends.
func TestUpstreamIdleTimeout(t *testing.T) {
	for _, tc := range []struct {
		name     string
		recorded bool // the fake EPP records its stream
		cfg      func(dest string) fakeConfig
	}{
		// The EPP processes the response (the usual path).
		{"through the EPP", true, func(dest string) fakeConfig { return fakeConfig{dest: dest} }},
		// The EPP ends its stream after routing: the response passes through.
		{"passthrough", false, func(dest string) fakeConfig {
			router := &fakeEPP{cfg: fakeConfig{dest: dest}}
			return fakeConfig{script: func(srv extprocv3.ExternalProcessor_ProcessServer) error {
				for {
					req, err := srv.Recv()
					if err != nil {
						return nil
					}
					if req.GetRequestBody().GetEndOfStream() {
						for _, m := range router.route(req.GetRequestBody().GetBody(), true, false) {
							if err := srv.Send(m); err != nil {
								return nil
							}
						}
						return nil
					}
				}
			}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up, cancelled := stallingUpstream(t, 200*time.Millisecond)
			h := newHarness(t, tc.cfg(up.hostPort()), func(o *Options) { o.UpstreamIdleTimeout = 300 * time.Millisecond })
			req, _ := http.NewRequest(http.MethodPost, h.url("/v1/chat/completions"), strings.NewReader(`{"stream":true}`))
			resp, err := h.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			br := bufio.NewReader(resp.Body)
			if line, err := br.ReadString('\n'); err != nil || line != "data: first\n" {
				t.Fatalf("first event %q err %v", line, err)
			}
			start := time.Now()
			rest, err := io.ReadAll(br)
			if err == nil {
				t.Errorf("client read %q and a clean end, want an aborted response", rest)
			}
			if elapsed := time.Since(start); elapsed > 5*time.Second {
				t.Errorf("response cut after %s, want about the 300ms UpstreamIdleTimeout", elapsed)
			}
			select {
			case <-cancelled:
			case <-time.After(5 * time.Second):
				t.Error("the upstream request was not cancelled")
			}
			if tc.recorded {
				// The gateway half-closes, the EPP ends the stream.
				if rec := h.epp.nextStream(t); !errors.Is(rec.err, io.EOF) && status.Code(rec.err) != codes.Canceled {
					t.Errorf("EPP stream ended with %v, want it ended", rec.err)
				}
			}
			eventually(t, "timeouts_total{kind=upstream_idle} = 1", func() bool {
				return counterValue(h.gw.metrics.timeouts[timeoutUpstreamIdle]) == 1
			})
			if got := counterValue(h.gw.metrics.extProcErrors[extProcUnavailable]); got != 0 {
				t.Errorf("ext_proc_errors_total{kind=unavailable} = %v, want 0 (the upstream failed, not the EPP)", got)
			}
		})
	}
}

// An upstream that stalls its body while the EPP has not yet answered the
// response headers gets a 504: the client has seen nothing yet.
func TestUpstreamIdleTimeoutBeforeClientHeaders(t *testing.T) {
	up, _ := stallingUpstream(t, 0)
	h := newHarness(t, fakeConfig{script: scripted(up.hostPort(), func(req *extprocv3.ProcessingRequest) ([]*extprocv3.ProcessingResponse, bool, error) {
		return nil, false, nil // never answer the response phase
	})}, func(o *Options) { o.UpstreamIdleTimeout = 300 * time.Millisecond })
	start := time.Now()
	resp := post(t, h, "/v1/chat/completions", []byte(`{"stream":true}`), nil)
	checkJSONError(t, resp, http.StatusGatewayTimeout, ReasonUpstreamTimeout)
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("504 after %s, want about the 300ms UpstreamIdleTimeout", elapsed)
	}
	if got := counterValue(h.gw.metrics.timeouts[timeoutUpstreamIdle]); got != 1 {
		t.Errorf("timeouts_total{kind=upstream_idle} = %v, want 1", got)
	}
}

// With MaxConcurrentRequests in flight, one more request is refused with 503
// and Retry-After without opening an ext_proc stream; once they end the
// gateway serves again.
func TestMaxConcurrentRequests(t *testing.T) {
	const limit = 3
	release := make(chan struct{})
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
	h := newHarness(t, fakeConfig{dest: up.hostPort()}, func(o *Options) { o.MaxConcurrentRequests = limit })
	errc := make(chan error, limit)
	for range limit {
		go func() {
			resp, err := h.client.Post(h.url("/x"), "application/json", strings.NewReader(`{}`))
			if err != nil {
				errc <- err
				return
			}
			b, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if err == nil && (resp.StatusCode != http.StatusOK || string(b) != "ok") {
				err = fmt.Errorf("stalled request: got %d %q, want 200 ok", resp.StatusCode, b)
			}
			errc <- err
		}()
	}
	eventually(t, "3 requests at the upstream", func() bool { return up.hits.Load() == limit })
	if got := gaugeValue(t, h.gw.metrics.inFlight); got != limit {
		t.Errorf("requests_in_flight = %v, want %d", got, limit)
	}

	resp := post(t, h, "/x", []byte(`{}`), nil)
	if ra := resp.Header.Get("Retry-After"); ra != "1" {
		t.Errorf("Retry-After %q, want 1", ra)
	}
	checkJSONError(t, resp, http.StatusServiceUnavailable, ReasonOverloaded)
	if n := h.epp.opened.Load(); n != limit {
		t.Errorf("EPP streams opened = %d, want %d (none for the refused request)", n, limit)
	}
	if got := counterValue(h.gw.metrics.rejected); got != 1 {
		t.Errorf("concurrency_rejections_total = %v, want 1", got)
	}

	close(release)
	for range limit {
		if err := <-errc; err != nil {
			t.Error(err)
		}
	}
	eventually(t, "requests_in_flight = 0", func() bool { return gaugeValue(t, h.gw.metrics.inFlight) == 0 })
	resp = post(t, h, "/x", []byte(`{}`), nil)
	if b := readAll(t, resp); resp.StatusCode != http.StatusOK || string(b) != "ok" {
		t.Fatalf("after the stalled requests ended: got %d %q, want 200 ok", resp.StatusCode, b)
	}
}

// NewHTTPServer applies the header bounds: a header block above
// MaxHeaderBytes gets 431, and a client that stalls in its headers is
// disconnected after ReadHeaderTimeout.
func TestNewHTTPServerHeaderBounds(t *testing.T) {
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	epp := startFakeEPP(t, fakeConfig{dest: up.hostPort()})
	gw, err := New(Options{EPPAddr: epp.addr, ReadHeaderTimeout: 300 * time.Millisecond, MaxHeaderBytes: 8 << 10})
	if err != nil {
		t.Fatal(err)
	}
	srv := NewHTTPServer("", gw)
	if srv.ReadHeaderTimeout != 300*time.Millisecond || srv.MaxHeaderBytes != 8<<10 || srv.IdleTimeout != DefaultIdleTimeout {
		t.Errorf("server ReadHeaderTimeout %s MaxHeaderBytes %d IdleTimeout %s, want the options'", srv.ReadHeaderTimeout, srv.MaxHeaderBytes, srv.IdleTimeout)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
		_ = gw.Close()
	})
	base := "http://" + lis.Addr().String()
	client := &http.Client{Timeout: 10 * time.Second}

	resp, err := client.Get(base + "/ok")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusOK || string(b) != "ok" {
		t.Errorf("plain request: got %d %q", resp.StatusCode, b)
	}
	_ = resp.Body.Close()

	req, _ := http.NewRequest(http.MethodGet, base+"/big", nil)
	req.Header.Set("X-Big", strings.Repeat("b", 16<<10)) // above 8 KiB plus net/http's 4 KiB slack
	resp, err = client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("16 KiB header: status %d, want 431", resp.StatusCode)
	}

	c := rawConn(t, lis.Addr().String())
	if _, err := io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: gw\r\nX-Part"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(c) // net/http may write a 408 before it closes
	if elapsed := time.Since(start); errors.Is(err, os.ErrDeadlineExceeded) || elapsed > 5*time.Second {
		t.Errorf("stalled headers: got %q err=%v after %s, want the connection closed after about 300ms", b, err, elapsed)
	}
}

// The metric names and label sets are part of the gateway's interface.
func TestMetricNames(t *testing.T) {
	reg := prometheus.NewRegistry()
	g, err := New(Options{EPPAddr: "127.0.0.1:9002", Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	g.metrics.request(200, sourceUpstream)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	labelValues := map[string][]string{}
	for _, mf := range mfs {
		var labels []string
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if !slices.Contains(labels, lp.GetName()) {
					labels = append(labels, lp.GetName())
				}
				labelValues[mf.GetName()] = append(labelValues[mf.GetName()], lp.GetValue())
			}
		}
		slices.Sort(labels)
		got[mf.GetName()] = mf.GetType().String() + " " + strings.Join(labels, ",")
	}
	want := map[string]string{
		"switchyard_gateway_requests_total":               "COUNTER code,source",
		"switchyard_gateway_upstream_attempts_total":      "COUNTER result",
		"switchyard_gateway_fallback_walks_total":         "COUNTER ",
		"switchyard_gateway_ext_proc_errors_total":        "COUNTER kind",
		"switchyard_gateway_timeouts_total":               "COUNTER kind",
		"switchyard_gateway_concurrency_rejections_total": "COUNTER ",
		"switchyard_gateway_requests_in_flight":           "GAUGE ",
		"switchyard_gateway_epp_connections":              "GAUGE ",
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: got %q, want %q", name, got[name], w)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("unpinned metric %s", name)
		}
	}
	tk := labelValues["switchyard_gateway_timeouts_total"]
	slices.Sort(tk)
	if want := []string{"body_read", "upstream_headers", "upstream_idle"}; !slices.Equal(tk, want) {
		t.Errorf("timeouts_total kinds %v, want %v", tk, want)
	}
	if problems, err := promlint.NewWithMetricFamilies(mfs).Lint(); err != nil || len(problems) > 0 {
		t.Errorf("promlint: %v %v", problems, err)
	}
}
