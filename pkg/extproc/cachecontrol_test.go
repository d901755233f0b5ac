package extproc_test

import (
	"strconv"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/extproc"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// C-18 through the real stream: with prefixRouting's
// anthropicCacheControlInjection on, a native /v1/messages body gets its
// breakpoint and the forwarded Content-Length matches the new body; off,
// or on another API, the body is forwarded as it came.
func TestC18_CacheControlInjectedIntoAnthropicMessages(t *testing.T) {
	eps := []*scheduling.Endpoint{endpoint("pod-1", "127.10.0.1", 8000, scheduling.Metrics{})}
	h := start(t, queueConfig, eps)
	const in = `{"model":"claude","max_tokens":10,"system":"You are terse.","messages":[{"role":"user","content":"hi"}]}`
	const want = `{"model":"claude","max_tokens":10,"system":[{"type":"text","text":"You are terse.","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"hi"}]}`
	send := func(path, b string) (string, string) {
		t.Helper()
		out := h.exchange(t, []*extprocv3.ProcessingRequest{reqHeaders(path), body(b, true)}, 2)
		require.Len(t, out, 2)
		return setHeaderOf(out[0], "content-length"), string(out[1].GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetBody())
	}
	// Off (the default).
	cl, got := send("/v1/messages", in)
	require.Equal(t, in, got)
	require.Equal(t, strconv.Itoa(len(in)), cl)

	rt := *h.rt.Load()
	rt.AnthropicCacheControlInjection = true
	h.setRuntime(&rt)
	cl, got = send("/v1/messages", in)
	require.Equal(t, want, got)
	require.Equal(t, strconv.Itoa(len(want)), cl)
	cl, got = send("/anthropic/v1/messages", in)
	require.Equal(t, want, got, "Anthropic's path behind a prefix")
	require.Equal(t, strconv.Itoa(len(want)), cl)

	// Not Anthropic: untouched.
	chat := `{"model":"m","messages":[{"role":"system","content":"S"},{"role":"user","content":"hi"}]}`
	_, got = send("/v1/chat/completions", chat)
	require.Equal(t, chat, got)
	_ = extproc.FallbackModelHeader
}
