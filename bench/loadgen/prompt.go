package loadgen

import (
	"encoding/json"
	"fmt"
	"strings"
)

// ChatBody returns an OpenAI chat-completions body for model of exactly
// size bytes (at least the size of the body around an empty system
// prompt): a system prompt of filler text, a user question made unique by
// variant, max_tokens 64.
func ChatBody(model string, size, variant int) []byte {
	const filler = "The quick brown fox jumps over the lazy dog while routers weigh queues and caches. "
	question := fmt.Sprintf("Question %d: which endpoint should serve this request?", variant)
	build := func(system string) []byte {
		b, _ := json.Marshal(map[string]any{
			"model": model,
			"messages": []map[string]string{
				{"role": "system", "content": system},
				{"role": "user", "content": question},
			},
			"max_tokens": 64,
		})
		return b
	}
	n := max(size-len(build("")), 0) // the filler needs no JSON escaping
	return build(strings.Repeat(filler, n/len(filler)+1)[:n])
}

// ChatResponse is a non-streaming chat-completions answer with usage.
func ChatResponse(model string) []byte {
	return fmt.Appendf(nil, `{"id":"cmpl-1","object":"chat.completion","model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":250,"completion_tokens":64,"total_tokens":314}}`, model)
}

// ChatExchanges returns n prepared exchanges of size-byte prompts for
// model (n distinct questions), to cycle through.
func ChatExchanges(model string, size, n int) []*Exchange {
	out := make([]*Exchange, n)
	for i := range out {
		x := &Exchange{Path: "/v1/chat/completions", Body: ChatBody(model, size, i), ResponseBody: ChatResponse(model)}
		x.Prepare()
		out[i] = x
	}
	return out
}
