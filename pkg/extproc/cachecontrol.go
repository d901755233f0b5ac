package extproc

// C-18: Anthropic prompt-caching breakpoints added to native /v1/messages
// requests when the configuration asks for it.

import "github.com/switchyard-ai/switchyard/pkg/requests"

// injectCacheControl returns the body to forward: with cache_control
// breakpoints added (requests.InjectCacheControl) when the configuration's
// prefixRouting.anthropicCacheControlInjection is on, the body format is
// parsed (not passthrough) and the request is a native Anthropic
// /v1/messages request; body itself otherwise. The caller sends the
// Content-Length of what it returns.
func (st *stream) injectCacheControl(body []byte) []byte {
	if !st.rt.AnthropicCacheControlInjection || st.rt.format() == "passthrough" || requests.DetectAPI(st.path()) != requests.APIMessages {
		return body
	}
	out, n := requests.InjectCacheControl(body)
	if n > 0 && st.v(4).Enabled() {
		st.v(4).Info("Anthropic cache_control injected", "request", st.reqID, "breakpoints", n)
	}
	return out
}
