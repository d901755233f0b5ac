package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/switchyard-ai/switchyard/pkg/internal/apierror"
)

func post(t *testing.T, h *harness, path string, body []byte, hdr map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, h.url(path), bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	return resp
}

func readAll(t *testing.T, resp *http.Response) []byte {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read response body: %v", err)
	}
	return b
}

func servedMD(served string) *corev3.Metadata {
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		LBNamespace: {Fields: map[string]*structpb.Value{ServedKey: structpb.NewStringValue(served)}},
	}}
}

func hv(k, v string) *corev3.HeaderValue { return &corev3.HeaderValue{Key: k, RawValue: []byte(v)} }

// withoutDate drops the (time-dependent) date header from a header list.
func withoutDate(hm *corev3.HeaderMap) *corev3.HeaderMap {
	out := &corev3.HeaderMap{}
	for _, h := range hm.GetHeaders() {
		if h.GetKey() != "date" {
			out.Headers = append(out.Headers, h)
		}
	}
	return out
}

// TestProtocolRoundTrip checks every message the gateway sends for a POST
// with a 200 KB body, what the upstream receives and what the client gets.
func TestProtocolRoundTrip(t *testing.T) {
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("X-Served-By", "up-1")
		_, _ = io.WriteString(w, "hello")
	})
	h := newHarness(t, fakeConfig{
		dest:           up.hostPort(),
		setHeaders:     []*corev3.HeaderValueOption{hvo("x-epp-added", "yes")},
		removeHeaders:  []string{"x-remove-me"},
		respSetHeaders: []*corev3.HeaderValueOption{hvo("x-epp-resp", "seen")},
	}, nil)

	body := make([]byte, 200<<10)
	for i := range body {
		body[i] = byte('a' + i%23)
	}
	resp := post(t, h, "/v1/completions?x=1", body, map[string]string{
		"Content-Type": "application/json", "X-Request-Id": "req-1", "User-Agent": "test-client", "X-Remove-Me": "1",
	})
	got := readAll(t, resp)
	if resp.StatusCode != http.StatusOK || string(got) != "hello" {
		t.Fatalf("client got %d %q, want 200 \"hello\"", resp.StatusCode, got)
	}
	if v := resp.Header.Get("X-Epp-Resp"); v != "seen" {
		t.Errorf("client header X-Epp-Resp = %q, want the EPP's response mutation \"seen\"", v)
	}
	if v := resp.Header.Get("X-Served-By"); v != "up-1" {
		t.Errorf("client header X-Served-By = %q, want up-1", v)
	}
	for _, k := range []string{"X-Gateway-Upstream", "X-Switchyard-Reason"} {
		if v := resp.Header.Get(k); v != "" {
			t.Errorf("client header %s = %q, want none (Envoy adds none)", k, v)
		}
	}

	// Upstream: mutated headers, the body intact, Content-Length exact.
	ur, ubody := up.lastRequest()
	if !bytes.Equal(ubody, body) {
		t.Errorf("upstream body differs from the client body (len %d vs %d)", len(ubody), len(body))
	}
	if ur.ContentLength != int64(len(body)) {
		t.Errorf("upstream Content-Length = %d, want %d", ur.ContentLength, len(body))
	}
	wantHdr := map[string]string{
		"X-Epp-Added": "yes", "X-Remove-Me": "", "X-Request-Id": "req-1", "User-Agent": "test-client",
		"X-Forwarded-For": "127.0.0.1", "X-Forwarded-Proto": "http", "Content-Type": "application/json",
		"X-Gateway-Destination-Endpoint": up.hostPort(),
	}
	for k, want := range wantHdr {
		if got := ur.Header.Get(k); got != want {
			t.Errorf("upstream header %s = %q, want %q", k, got, want)
		}
	}
	if ur.URL.RequestURI() != "/v1/completions?x=1" || ur.Host != h.srv.Listener.Addr().String() {
		t.Errorf("upstream request target %q host %q, want /v1/completions?x=1 on the client's authority", ur.URL.RequestURI(), ur.Host)
	}

	// EPP: the exact message sequence.
	rec := h.epp.nextStream(t)
	if !errors.Is(rec.err, io.EOF) {
		t.Errorf("EPP stream ended with %v, want a clean half-close (EOF)", rec.err)
	}
	if diff := cmp.Diff([]string{"request_headers", "request_body", "response_headers", "response_body"}, kinds(rec.reqs)); diff != "" {
		t.Fatalf("message kinds (-want +got):\n%s", diff)
	}
	authority := h.srv.Listener.Addr().String()
	wantFirst := &extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
				hv(":authority", authority), hv(":path", "/v1/completions?x=1"), hv(":method", "POST"), hv(":scheme", "http"),
				hv("content-length", strconv.Itoa(len(body))), hv("content-type", "application/json"),
				hv("user-agent", "test-client"), hv("x-forwarded-for", "127.0.0.1"), hv("x-forwarded-proto", "http"),
				hv("x-remove-me", "1"), hv("x-request-id", "req-1"),
			}},
		}},
		ProtocolConfig: &extprocv3.ProtocolConfiguration{
			RequestBodyMode:  extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
			ResponseBodyMode: extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
		},
	}
	if diff := cmp.Diff(wantFirst, rec.reqs[0], protocmp.Transform()); diff != "" {
		t.Errorf("request_headers message (-want +got):\n%s", diff)
	}
	reqBody, eos := bodies(t, rec.reqs, false)
	if !bytes.Equal(reqBody, body) || !eos {
		t.Errorf("request_body chunks: %d bytes (eos on last: %v), want the %d client bytes in order", len(reqBody), eos, len(body))
	}
	for _, r := range rec.reqs[1:] {
		if r.GetProtocolConfig() != nil {
			t.Errorf("protocol_config on a later message %v", kinds([]*extprocv3.ProcessingRequest{r}))
		}
		if r.GetRequestBody() != nil && r.GetMetadataContext() != nil {
			t.Errorf("request_body carries metadata_context %v, want none without a subset hint", r.GetMetadataContext())
		}
	}
	var respHeaders *extprocv3.ProcessingRequest
	for _, r := range rec.reqs {
		if r.GetResponseHeaders() != nil {
			respHeaders = r
		}
	}
	wantRH := &extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
			Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
				hv(":status", "200"), hv("content-length", "5"), hv("content-type", "text/plain"), hv("x-served-by", "up-1"),
			}},
		}},
		MetadataContext: servedMD(up.hostPort()),
	}
	respHeaders.GetResponseHeaders().Headers = withoutDate(respHeaders.GetResponseHeaders().GetHeaders())
	if diff := cmp.Diff(wantRH, respHeaders, protocmp.Transform()); diff != "" {
		t.Errorf("response_headers message (-want +got):\n%s", diff)
	}
	respBody, eos := bodies(t, rec.reqs, true)
	if string(respBody) != "hello" || !eos {
		t.Errorf("response_body chunks = %q (eos on last: %v), want \"hello\"", respBody, eos)
	}
	for _, r := range rec.reqs {
		if r.GetResponseBody() != nil {
			if diff := cmp.Diff(servedMD(up.hostPort()), r.GetMetadataContext(), protocmp.Transform()); diff != "" {
				t.Errorf("response_body metadata_context (-want +got):\n%s", diff)
			}
		}
	}
	if got := counterValue(h.gw.metrics.requests.WithLabelValues("200", sourceUpstream)); got != 1 {
		t.Errorf("requests_total{code=200,source=upstream} = %v, want 1", got)
	}
}

func TestRequestBodyMutationReachesUpstream(t *testing.T) {
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	h := newHarness(t, fakeConfig{
		dest: up.hostPort(),
		mutateBody: func(b []byte) []byte {
			return bytes.ReplaceAll(b, []byte(`"model":"a"`), []byte(`"model":"target-model-b"`))
		},
		setHeaders: []*corev3.HeaderValueOption{
			{Header: hv("x-appended", "two"), AppendAction: corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD},
			{Header: hv("x-appended", "three"), AppendAction: corev3.HeaderValueOption_ADD_IF_ABSENT},
			{Header: hv(":path", "/v1/rewritten?q=2")},
			{Header: hv(":authority", "evil.example")},
			{Header: hv("x-envoy-internal", "true")},
		},
	}, nil)
	resp := post(t, h, "/v1/completions", []byte(`{"model":"a","prompt":"hi"}`), map[string]string{"X-Appended": "one"})
	readAll(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d, want 200", resp.StatusCode)
	}
	ur, ubody := up.lastRequest()
	want := `{"model":"target-model-b","prompt":"hi"}`
	if string(ubody) != want || ur.ContentLength != int64(len(want)) {
		t.Errorf("upstream body %q (Content-Length %d), want %q (%d)", ubody, ur.ContentLength, want, len(want))
	}
	if got := ur.Header.Values("X-Appended"); !cmp.Equal(got, []string{"two"}) {
		t.Errorf("X-Appended = %q, want [two] (append defaults to false in ext_proc: overwrite; ADD_IF_ABSENT skipped)", got)
	}
	if ur.URL.RequestURI() != "/v1/rewritten?q=2" {
		t.Errorf("upstream path %q, want the :path mutation /v1/rewritten?q=2", ur.URL.RequestURI())
	}
	if ur.Host == "evil.example" || ur.Header.Get("X-Envoy-Internal") != "" {
		t.Errorf("disallowed mutations applied: host %q x-envoy-internal %q", ur.Host, ur.Header.Get("X-Envoy-Internal"))
	}
}

func TestDestinationCarriers(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		noHeader, noMetadata bool
	}{
		{name: "header and metadata"},
		{name: "metadata only", noHeader: true},
		{name: "header only", noMetadata: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
			h := newHarness(t, fakeConfig{dest: up.hostPort(), noHeader: tc.noHeader, noMetadata: tc.noMetadata}, nil)
			resp := post(t, h, "/x", []byte("{}"), nil)
			if b := readAll(t, resp); resp.StatusCode != 200 || string(b) != "ok" {
				t.Fatalf("got %d %q, want 200 ok", resp.StatusCode, b)
			}
			if up.hits.Load() != 1 {
				t.Errorf("upstream hits = %d, want 1", up.hits.Load())
			}
		})
	}
}

func TestMetadataWinsOverHeader(t *testing.T) {
	good := startUpstream(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "good") })
	bad := startUpstream(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "bad") })
	h := newHarness(t, fakeConfig{dest: good.hostPort(), noHeader: true,
		setHeaders: []*corev3.HeaderValueOption{hvo(DestinationHeader, bad.hostPort())}}, nil)
	resp := post(t, h, "/x", []byte("{}"), nil)
	if b := readAll(t, resp); string(b) != "good" {
		t.Errorf("served by %q, want the metadata destination", b)
	}
}

func TestFallbackWalksOnConnectFailure(t *testing.T) {
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "second") })
	refused := closedPort(t)
	h := newHarness(t, fakeConfig{dest: refused + "," + up.hostPort()}, nil)
	resp := post(t, h, "/x", []byte(`{"a":1}`), nil)
	if b := readAll(t, resp); resp.StatusCode != 200 || string(b) != "second" {
		t.Fatalf("got %d %q, want 200 from the second endpoint", resp.StatusCode, b)
	}
	if _, body := up.lastRequest(); string(body) != `{"a":1}` {
		t.Errorf("fallback upstream body %q, want the full body", body)
	}
	rec := h.epp.nextStream(t)
	for _, r := range rec.reqs {
		if r.GetResponseHeaders() != nil {
			if diff := cmp.Diff(servedMD(up.hostPort()), r.GetMetadataContext(), protocmp.Transform()); diff != "" {
				t.Errorf("served metadata (-want +got):\n%s", diff)
			}
		}
	}
	if got := counterValue(h.gw.metrics.fallbackWalks); got != 1 {
		t.Errorf("fallback_walks_total = %v, want 1", got)
	}
	if got := counterValue(h.gw.metrics.attempts[attemptConnectFailure]); got != 1 {
		t.Errorf("upstream_attempts_total{result=connect_failure} = %v, want 1", got)
	}
}

func TestAllEndpointsRefuse(t *testing.T) {
	h := newHarness(t, fakeConfig{dest: closedPort(t) + "," + closedPort(t)}, nil)
	resp := post(t, h, "/x", []byte("{}"), nil)
	b := readAll(t, resp)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get(ReasonHeader) != ReasonUpstreamConnectFailure {
		t.Fatalf("got %d reason %q body %s, want 503 %s", resp.StatusCode, resp.Header.Get(ReasonHeader), b, ReasonUpstreamConnectFailure)
	}
	// The local reply went through the EPP's response path, without served metadata.
	rec := h.epp.nextStream(t)
	if diff := cmp.Diff([]string{"request_headers", "request_body", "response_headers", "response_body"}, kinds(rec.reqs)); diff != "" {
		t.Errorf("kinds (-want +got):\n%s", diff)
	}
	for _, r := range rec.reqs {
		if r.GetResponseHeaders() != nil && r.GetMetadataContext() != nil {
			t.Errorf("local reply carries metadata %v, want none (nothing served)", r.GetMetadataContext())
		}
	}
}

func TestNoRetryAfterResponseOrReset(t *testing.T) {
	for _, tc := range []struct {
		name       string
		first      http.HandlerFunc
		wantStatus int
		wantReason string
	}{
		{name: "500 is passed through", wantStatus: 500, first: func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, "boom")
		}},
		{name: "reset after the request was sent", wantStatus: 503, wantReason: ReasonUpstreamReset, first: func(w http.ResponseWriter, r *http.Request) {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				_ = conn.Close()
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first := startUpstream(t, tc.first)
			second := startUpstream(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "second") })
			h := newHarness(t, fakeConfig{dest: first.hostPort() + "," + second.hostPort()}, nil)
			resp := post(t, h, "/x", []byte("{}"), nil)
			b := readAll(t, resp)
			if resp.StatusCode != tc.wantStatus || resp.Header.Get(ReasonHeader) != tc.wantReason {
				t.Errorf("got %d reason %q body %q, want %d reason %q", resp.StatusCode, resp.Header.Get(ReasonHeader), b, tc.wantStatus, tc.wantReason)
			}
			if tc.wantStatus == 500 && string(b) != "boom" {
				t.Errorf("body %q, want the upstream's \"boom\"", b)
			}
			if first.hits.Load() != 1 || second.hits.Load() != 0 {
				t.Errorf("hits first=%d second=%d, want 1 and 0 (no retry once the request was sent)", first.hits.Load(), second.hits.Load())
			}
			rec := h.epp.nextStream(t)
			for _, r := range rec.reqs {
				if rh := r.GetResponseHeaders(); rh != nil {
					if got := string(rh.GetHeaders().GetHeaders()[0].GetRawValue()); got != strconv.Itoa(tc.wantStatus) {
						t.Errorf("EPP saw :status %s, want %d", got, tc.wantStatus)
					}
				}
			}
		})
	}
}

func TestImmediateResponse(t *testing.T) {
	for _, tc := range []struct {
		name       string
		code       int
		wantStatus int
		body       string
	}{
		{name: "400 bad request", code: 400, wantStatus: 400, body: `{"error":{"message":"bad body"}}`},
		{name: "429 shed", code: 429, wantStatus: 429, body: `{"error":{"message":"shed"}}`},
		{name: "503 nothing routable", code: 503, wantStatus: 503, body: `{"error":{"message":"no endpoints"}}`},
		{name: "unset status is 200 like Envoy", code: 0, wantStatus: 200, body: "plain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {})
			imm := immediate(tc.code, tc.body, hvo("content-type", "application/json"), hvo("retry-after", "3"), hvo(ReasonHeader, "epp-said-so"))
			h := newHarness(t, fakeConfig{dest: up.hostPort(), immediate: imm}, nil)
			resp := post(t, h, "/x", []byte(`{"model":"m"}`), nil)
			b := readAll(t, resp)
			if resp.StatusCode != tc.wantStatus || string(b) != tc.body {
				t.Errorf("got %d %q, want %d %q", resp.StatusCode, b, tc.wantStatus, tc.body)
			}
			for k, want := range map[string]string{"Content-Type": "application/json", "Retry-After": "3", "X-Switchyard-Reason": "epp-said-so"} {
				if got := resp.Header.Get(k); got != want {
					t.Errorf("header %s = %q, want %q", k, got, want)
				}
			}
			if up.hits.Load() != 0 {
				t.Errorf("upstream called %d times, want 0", up.hits.Load())
			}
			if got := counterValue(h.gw.metrics.requests.WithLabelValues(strconv.Itoa(tc.wantStatus), sourceEPP)); got != 1 {
				t.Errorf("requests_total{source=epp} = %v, want 1", got)
			}
		})
	}
}

// TestSSEStreamsChunkByChunk: the upstream sends event i+1 only after the
// client has read event i, so a gateway that buffered anything would stall.
func TestSSEStreamsChunkByChunk(t *testing.T) {
	next := make(chan struct{})
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		rc := http.NewResponseController(w)
		_ = rc.Flush()
		for i := range 3 {
			select {
			case <-next:
			case <-r.Context().Done():
				return
			case <-time.After(10 * time.Second):
				return
			}
			_, _ = fmt.Fprintf(w, "data: {\"i\":%d}\n\n", i)
			_ = rc.Flush()
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	})
	h := newHarness(t, fakeConfig{dest: up.hostPort()}, nil)
	req, _ := http.NewRequestWithContext(ctxWithTimeout(t, 15*time.Second), http.MethodPost, h.url("/v1/chat/completions"), strings.NewReader(`{"stream":true}`))
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type %q", ct)
	}
	br := bufio.NewReader(resp.Body)
	for i := range 3 {
		next <- struct{}{} // allow event i
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if want := fmt.Sprintf("data: {\"i\":%d}\n", i); line != want {
			t.Fatalf("event %d: got %q, want %q", i, line, want)
		}
		if blank, _ := br.ReadString('\n'); blank != "\n" {
			t.Fatalf("event %d: missing blank line, got %q", i, blank)
		}
	}
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "data: [DONE]\n\n" {
		t.Fatalf("tail %q err %v", rest, err)
	}
	rec := h.epp.nextStream(t)
	var chunks int
	for _, r := range rec.reqs {
		if r.GetResponseBody() != nil {
			chunks++
		}
	}
	if chunks < 3 {
		t.Errorf("EPP saw %d response_body chunks, want one per released event (>= 3)", chunks)
	}
}

func TestClientDisconnectCancelsUpstreamAndStream(t *testing.T) {
	upstreamDone := make(chan struct{})
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: first\n\n")
		_ = http.NewResponseController(w).Flush()
		select {
		case <-r.Context().Done():
			close(upstreamDone)
		case <-time.After(10 * time.Second):
		}
	})
	h := newHarness(t, fakeConfig{dest: up.hostPort()}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.url("/x"), strings.NewReader(`{"stream":true}`))
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != "data: first\n" {
		t.Fatalf("first event %q err %v", line, err)
	}
	cancel()
	_ = resp.Body.Close()
	select {
	case <-upstreamDone:
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream request was not cancelled after the client went away")
	}
	// The EPP's stream ends and its context is cancelled. Its last Recv may
	// see the cancellation or, when the half-close won the race, EOF: either
	// way the EPP learns the request is over and runs its completion.
	rec := h.epp.nextStream(t)
	if rec.ctxErr == nil || (status.Code(rec.err) != codes.Canceled && !errors.Is(rec.err, io.EOF)) {
		t.Errorf("EPP stream ended with err=%v ctxErr=%v, want a cancelled stream", rec.err, rec.ctxErr)
	}
}

func checkJSONError(t *testing.T, resp *http.Response, wantStatus int, wantReason string) {
	t.Helper()
	b := readAll(t, resp)
	if resp.StatusCode != wantStatus {
		t.Errorf("status %d, want %d (body %s)", resp.StatusCode, wantStatus, b)
	}
	if got := resp.Header.Get(ReasonHeader); got != wantReason {
		t.Errorf("%s = %q, want %q", ReasonHeader, got, wantReason)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	var e apierror.Envelope[string]
	if err := json.Unmarshal(b, &e); err != nil || e.Error.Code != wantReason || e.Error.Message == "" {
		t.Errorf("body %s: want an OpenAI-style error with code %q (err %v)", b, wantReason, err)
	}
}

func TestEPPDown(t *testing.T) {
	reg := prometheus.NewRegistry()
	gw, err := New(Options{EPPAddr: closedPort(t), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{gw: gw, client: &http.Client{Timeout: 10 * time.Second}}
	h.srv = newTestServer(t, gw)
	resp := post(t, h, "/x", []byte("{}"), nil)
	checkJSONError(t, resp, http.StatusServiceUnavailable, ReasonEPPUnavailable)
	if got := counterValue(gw.metrics.extProcErrors[extProcUnavailable]); got != 1 {
		t.Errorf("ext_proc_errors_total{kind=unavailable} = %v, want 1", got)
	}
}

func TestEPPTimeout(t *testing.T) {
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {})
	h := newHarness(t, fakeConfig{dest: up.hostPort(), hang: true}, func(o *Options) { o.MessageTimeout = 200 * time.Millisecond })
	resp := post(t, h, "/x", []byte("{}"), nil)
	checkJSONError(t, resp, http.StatusServiceUnavailable, ReasonEPPTimeout)
	if rec := h.epp.nextStream(t); status.Code(rec.err) != codes.Canceled {
		t.Errorf("EPP stream ended with %v, want cancelled after the timeout", rec.err)
	}
}

func TestEPPProtocolError(t *testing.T) {
	h := newHarness(t, fakeConfig{script: func(srv extprocv3.ExternalProcessor_ProcessServer) error {
		for {
			req, err := srv.Recv()
			if err != nil {
				return nil
			}
			if req.GetRequestBody().GetEndOfStream() {
				// A body response before the header response breaks the ordering rule.
				if err := srv.Send(streamedBodyResponse(true, []byte("x"), true)); err != nil {
					return nil
				}
			}
		}
	}}, nil)
	resp := post(t, h, "/x", []byte("{}"), nil)
	checkJSONError(t, resp, http.StatusServiceUnavailable, ReasonEPPProtocolError)
}

func TestEPPClosesStreamEarly(t *testing.T) {
	h := newHarness(t, fakeConfig{script: func(srv extprocv3.ExternalProcessor_ProcessServer) error {
		_, _ = srv.Recv()
		return status.Error(codes.Internal, "picker crashed")
	}}, nil)
	resp := post(t, h, "/x", []byte("{}"), nil)
	checkJSONError(t, resp, http.StatusServiceUnavailable, ReasonEPPUnavailable)
}

func TestNoRoute(t *testing.T) {
	for _, dest := range []string{"", "not-an-endpoint", "example.com:80"} {
		t.Run("dest="+dest, func(t *testing.T) {
			h := newHarness(t, fakeConfig{dest: dest}, nil)
			resp := post(t, h, "/x", []byte("{}"), nil)
			checkJSONError(t, resp, http.StatusServiceUnavailable, ReasonNoRoute)
		})
	}
}

func TestBodyOverCap(t *testing.T) {
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {})
	h := newHarness(t, fakeConfig{dest: up.hostPort()}, func(o *Options) { o.MaxRequestBodyBytes = 1024 })
	big := bytes.Repeat([]byte("x"), 2000)

	t.Run("declared length", func(t *testing.T) {
		resp := post(t, h, "/x", big, nil)
		checkJSONError(t, resp, http.StatusRequestEntityTooLarge, ReasonRequestTooLarge)
		if n := h.epp.opened.Load(); n != 0 {
			t.Errorf("EPP streams opened = %d, want 0 for a declared oversize body", n)
		}
	})
	t.Run("chunked", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodPost, h.url("/x"), io.MultiReader(bytes.NewReader(big))) // unknown length
		resp, err := h.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		checkJSONError(t, resp, http.StatusRequestEntityTooLarge, ReasonRequestTooLarge)
		if rec := h.epp.nextStream(t); status.Code(rec.err) != codes.Canceled {
			t.Errorf("EPP stream ended with %v, want it reset", rec.err)
		}
	})
	if up.hits.Load() != 0 {
		t.Errorf("upstream called %d times, want 0", up.hits.Load())
	}
}

func TestGETWithoutBody(t *testing.T) {
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, `{"data":[]}`) })
	h := newHarness(t, fakeConfig{dest: up.hostPort()}, nil)
	resp, err := h.client.Get(h.url("/v1/models"))
	if err != nil {
		t.Fatal(err)
	}
	if b := readAll(t, resp); resp.StatusCode != 200 || string(b) != `{"data":[]}` {
		t.Fatalf("got %d %q", resp.StatusCode, b)
	}
	ur, _ := up.lastRequest()
	if ur.Method != http.MethodGet || ur.ContentLength != 0 || ur.Header.Get("Content-Length") != "" {
		t.Errorf("upstream got %s with Content-Length %d / %q, want a GET without body", ur.Method, ur.ContentLength, ur.Header.Get("Content-Length"))
	}
	if ur.Header.Get("User-Agent") != "Go-http-client/1.1" {
		t.Errorf("upstream User-Agent %q, want the client's", ur.Header.Get("User-Agent"))
	}
	rec := h.epp.nextStream(t)
	if diff := cmp.Diff([]string{"request_headers", "response_headers", "response_body"}, kinds(rec.reqs)); diff != "" {
		t.Errorf("kinds (-want +got):\n%s", diff)
	}
	if !rec.reqs[0].GetRequestHeaders().GetEndOfStream() {
		t.Error("request_headers end_of_stream = false, want true for a request without body")
	}
}

func TestSubsetHint(t *testing.T) {
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	h := newHarness(t, fakeConfig{dest: up.hostPort()}, func(o *Options) { o.SubsetHeader = SubsetKey })
	resp := post(t, h, "/x", []byte("{}"), map[string]string{SubsetKey: " 127.0.0.1:1, ,127.0.0.2:2 "})
	readAll(t, resp)
	subset := &structpb.Struct{Fields: map[string]*structpb.Value{
		SubsetKey: structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{
			structpb.NewStringValue("127.0.0.1:1"), structpb.NewStringValue("127.0.0.2:2"),
		}}),
	}}
	wantReq := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{SubsetNamespace: subset}}
	wantResp := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		SubsetNamespace: subset,
		LBNamespace:     {Fields: map[string]*structpb.Value{ServedKey: structpb.NewStringValue(up.hostPort())}},
	}}
	rec := h.epp.nextStream(t)
	for i, r := range rec.reqs {
		want := wantReq
		if r.GetResponseHeaders() != nil || r.GetResponseBody() != nil {
			want = wantResp
		}
		if diff := cmp.Diff(want, r.GetMetadataContext(), protocmp.Transform()); diff != "" {
			t.Errorf("message %d %v metadata_context (-want +got):\n%s", i, kinds(rec.reqs[i:i+1]), diff)
		}
	}
}

func TestTrailers(t *testing.T) {
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "Grpc-Status")
		_, _ = io.WriteString(w, "payload")
		_ = http.NewResponseController(w).Flush()
		w.Header().Set("Grpc-Status", "0")
	})
	h := newHarness(t, fakeConfig{dest: up.hostPort()}, nil)
	// A chunked request with a trailer.
	req, _ := http.NewRequest(http.MethodPost, h.url("/x"), io.MultiReader(strings.NewReader("request")))
	req.Trailer = http.Header{"X-Checksum": []string{"abc"}}
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if b := readAll(t, resp); string(b) != "payload" {
		t.Fatalf("body %q", b)
	}
	if got := resp.Trailer.Get("Grpc-Status"); got != "0" {
		t.Errorf("client trailer Grpc-Status = %q, want 0", got)
	}
	if _, body := up.lastRequest(); string(body) != "request" {
		t.Errorf("upstream body %q", body)
	}
	rec := h.epp.nextStream(t)
	if diff := cmp.Diff([]string{"request_headers", "request_body", "request_trailers", "response_headers", "response_body", "response_trailers"}, kinds(rec.reqs)); diff != "" {
		t.Errorf("kinds (-want +got):\n%s", diff)
	}
	for _, r := range rec.reqs {
		if tr := r.GetRequestTrailers(); tr != nil {
			if diff := cmp.Diff(&corev3.HeaderMap{Headers: []*corev3.HeaderValue{hv("x-checksum", "abc")}}, tr.GetTrailers(), protocmp.Transform()); diff != "" {
				t.Errorf("request trailers (-want +got):\n%s", diff)
			}
		}
		if tr := r.GetResponseTrailers(); tr != nil {
			if diff := cmp.Diff(&corev3.HeaderMap{Headers: []*corev3.HeaderValue{hv("grpc-status", "0")}}, tr.GetTrailers(), protocmp.Transform()); diff != "" {
				t.Errorf("response trailers (-want +got):\n%s", diff)
			}
		}
		if b := r.GetRequestBody(); b != nil && b.GetEndOfStream() {
			t.Error("request_body end_of_stream with trailers following, want false")
		}
	}
}

func TestUpstreamFailsAfterHeaders(t *testing.T) {
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		_, _ = io.WriteString(w, "partial")
		_ = http.NewResponseController(w).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	})
	h := newHarness(t, fakeConfig{dest: up.hostPort()}, nil)
	resp := post(t, h, "/x", []byte("{}"), nil)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil {
		t.Errorf("client read %q without error, want a truncated (aborted) response", b)
	}
}

func TestTLSToEPP(t *testing.T) {
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
	epp := startFakeEPP(t, fakeConfig{dest: up.hostPort()}, tlsServerOption(t))
	gw, err := New(Options{EPPAddr: epp.addr, EPPTLS: true})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{gw: gw, epp: epp, client: &http.Client{Timeout: 10 * time.Second}}
	h.srv = newTestServer(t, gw)
	resp := post(t, h, "/x", []byte("{}"), nil)
	if b := readAll(t, resp); resp.StatusCode != 200 || string(b) != "ok" {
		t.Fatalf("got %d %q over TLS, want 200 ok", resp.StatusCode, b)
	}
}

func TestConcurrentRequests(t *testing.T) {
	up := startUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = w.Write(b)
	})
	h := newHarness(t, fakeConfig{dest: up.hostPort()}, nil)
	errc := make(chan error, 32)
	for i := range 32 {
		go func() {
			body := []byte(fmt.Sprintf(`{"i":%d,"pad":%q}`, i, strings.Repeat("p", i*1000)))
			resp, err := h.client.Post(h.url("/x"), "application/json", bytes.NewReader(body))
			if err != nil {
				errc <- err
				return
			}
			got, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if err == nil && !bytes.Equal(got, body) {
				err = fmt.Errorf("request %d: echoed body differs", i)
			}
			errc <- err
		}()
	}
	for range 32 {
		if err := <-errc; err != nil {
			t.Error(err)
		}
	}
}

func TestNewValidatesOptions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{name: "missing addr", opts: Options{}, wantErr: "EPPAddr: required"},
		{name: "no port", opts: Options{EPPAddr: "127.0.0.1"}, wantErr: "is not host:port"},
		{name: "bad port", opts: Options{EPPAddr: "127.0.0.1:99999"}, wantErr: "invalid port"},
		{name: "empty host", opts: Options{EPPAddr: ":9002"}, wantErr: "empty host"},
		{name: "negative timeout", opts: Options{EPPAddr: "127.0.0.1:9002", MessageTimeout: -1}, wantErr: "MessageTimeout: must be >= 0"},
		{name: "negative cap", opts: Options{EPPAddr: "127.0.0.1:9002", MaxRequestBodyBytes: -1}, wantErr: "MaxRequestBodyBytes: must be >= 0"},
		{name: "bad subset header", opts: Options{EPPAddr: "127.0.0.1:9002", SubsetHeader: "bad header"}, wantErr: "SubsetHeader"},
		{name: "negative body read timeout", opts: Options{EPPAddr: "127.0.0.1:9002", BodyReadTimeout: -time.Second}, wantErr: "BodyReadTimeout: must be >= 0 (0 = default 1m0s), got -1s"},
		{name: "negative upstream header timeout", opts: Options{EPPAddr: "127.0.0.1:9002", UpstreamHeaderTimeout: -1}, wantErr: "UpstreamHeaderTimeout: must be >= 0 (0 = default 10m0s)"},
		{name: "negative upstream idle timeout", opts: Options{EPPAddr: "127.0.0.1:9002", UpstreamIdleTimeout: -1}, wantErr: "UpstreamIdleTimeout: must be >= 0 (0 = default 5m0s)"},
		{name: "negative read header timeout", opts: Options{EPPAddr: "127.0.0.1:9002", ReadHeaderTimeout: -1}, wantErr: "ReadHeaderTimeout: must be >= 0 (0 = default 10s)"},
		{name: "negative concurrency cap", opts: Options{EPPAddr: "127.0.0.1:9002", MaxConcurrentRequests: -1}, wantErr: "MaxConcurrentRequests: must be >= 0 (0 = default 10000), got -1"},
		{name: "negative header cap", opts: Options{EPPAddr: "127.0.0.1:9002", MaxHeaderBytes: -1}, wantErr: "MaxHeaderBytes: must be >= 0 (0 = default 65536), got -1"},
		{name: "ok", opts: Options{EPPAddr: "127.0.0.1:9002", SubsetHeader: SubsetKey}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := New(tc.opts)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				if g.msgTimeout != DefaultMessageTimeout || g.maxBody != DefaultMaxRequestBodyBytes {
					t.Errorf("defaults not applied: %s %d", g.msgTimeout, g.maxBody)
				}
				if g.bodyTimeout != DefaultBodyReadTimeout || g.upHeaderTimeout != DefaultUpstreamHeaderTimeout || g.upIdleTimeout != DefaultUpstreamIdleTimeout ||
					g.maxInFlight != DefaultMaxConcurrentRequests || g.readHeaderTimeout != DefaultReadHeaderTimeout || g.maxHeaderBytes != DefaultMaxHeaderBytes {
					t.Errorf("bound defaults not applied: body %s upstream headers %s idle %s in flight %d header timeout %s header bytes %d",
						g.bodyTimeout, g.upHeaderTimeout, g.upIdleTimeout, g.maxInFlight, g.readHeaderTimeout, g.maxHeaderBytes)
				}
				_ = g.Close()
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("New error %v, want it to mention %q", err, tc.wantErr)
			}
		})
	}
}

func TestMetricsReRegistration(t *testing.T) {
	reg := prometheus.NewRegistry()
	for range 2 {
		g, err := New(Options{EPPAddr: "127.0.0.1:9002", Registerer: reg})
		if err != nil {
			t.Fatalf("New with an already-used registerer: %v", err)
		}
		g.metrics.request(200, sourceUpstream)
		_ = g.Close()
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == "switchyard_gateway_requests_total" {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	if sum != 2 {
		t.Errorf("shared requests_total = %v, want 2", sum)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil || len(problems) > 0 {
		t.Errorf("promlint: %v %v", problems, err)
	}
}

// counterValue sums the samples of a counter collector.
func counterValue(c prometheus.Collector) float64 {
	ch := make(chan prometheus.Metric, 64)
	c.Collect(ch)
	close(ch)
	var sum float64
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err == nil {
			sum += d.GetCounter().GetValue()
		}
	}
	return sum
}
