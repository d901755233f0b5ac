package gateway

import (
	"bytes"
	"io"
	"net/http"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/go-logr/logr"
)

// BenchmarkRoundTrip measures one full request on loopback: client -> gateway
// -> fake EPP (headers, 4 KB body, response) -> upstream -> back. The numbers
// include the client, the fake EPP and the upstream, which share the process.
func BenchmarkRoundTrip(b *testing.B) {
	up := startUpstream(b, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"cmpl-1","choices":[{"text":"ok"}]}`)
	})
	h := newHarness(b, fakeConfig{dest: up.hostPort()}, func(o *Options) { o.Logger = logr.Discard() })
	body := bytes.Repeat([]byte("a"), 4<<10)
	url := h.url("/v1/completions")
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		resp, err := h.client.Post(url, "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
		// Drain the fake EPP's records so its channel never fills.
		select {
		case <-h.epp.streams:
		default:
		}
	}
}

// BenchmarkRequestHeaderMap: building the request_headers message for a
// typical OpenAI request.
func BenchmarkRequestHeaderMap(b *testing.B) {
	r, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1:8080/v1/chat/completions", nil)
	r.RemoteAddr = "127.0.0.1:40000"
	r.Header = http.Header{
		"Content-Type": {"application/json"}, "Content-Length": {"4096"}, "Authorization": {"Bearer sk-xxxx"},
		"User-Agent": {"openai-python/1.0"}, "Accept": {"application/json"}, "X-Gateway-Inference-Objective": {"chat"},
	}
	b.ReportAllocs()
	for b.Loop() {
		hdr := upstreamRequestHeader(r)
		_ = headerMap([]string{":authority", r.Host, ":path", "/v1/chat/completions", ":method", "POST", ":scheme", "http"}, hdr)
	}
}

// BenchmarkApplyHeaderMutation: a reference-EPP-style request mutation (the
// destination, content-length, and every client header re-set).
func BenchmarkApplyHeaderMutation(b *testing.B) {
	set := []*corev3.HeaderValueOption{
		hvo(DestinationHeader, "127.0.0.1:8000"), hvo("content-length", "4096"), hvo("content-type", "application/json"),
		hvo("authorization", "Bearer sk-xxxx"), hvo("user-agent", "openai-python/1.0"), hvo("accept", "application/json"),
		hvo("x-request-id", "0f8fad5b-d9cb-469f-a165-70867728950e"), hvo("x-forwarded-proto", "http"),
	}
	m := &extprocv3.HeaderMutation{SetHeaders: set}
	base := http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer sk-xxxx"}, "User-Agent": {"openai-python/1.0"}}
	b.ReportAllocs()
	for b.Loop() {
		h := base.Clone()
		var ps pseudoMutations
		if err := applyHeaderMutation(h, m, targetRequest, &ps); err != nil {
			b.Fatal(err)
		}
	}
}
