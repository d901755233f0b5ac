package requests

import (
	"math"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// maxUsageCount bounds each token count read from a response, so sums
// cannot overflow.
const maxUsageCount = math.MaxInt32

// usageFields are the token counts found in one usage object.
type usageFields struct {
	prompt, completion, total          int
	input, output                      int
	cacheRead, cacheCreation, cached   int
	hasPrompt, hasCompletion, hasTotal bool
	hasInput, hasOutput                bool
	hasCacheRead, hasCacheCreation     bool
	hasCached                          bool
}

// any reports whether the object held any token count.
func (u *usageFields) any() bool {
	return u.hasPrompt || u.hasCompletion || u.hasTotal || u.hasInput || u.hasOutput ||
		u.hasCacheRead || u.hasCacheCreation
}

// anthropicShaped reports whether the counts use Anthropic's names for
// cache reads (whose input_tokens exclude cached tokens).
func (u *usageFields) anthropicShaped() bool {
	return (u.hasCacheRead || u.hasCacheCreation) && !u.hasPrompt && !u.hasTotal
}

// count reads a non-negative integer count; anything else is ignored.
func count(v []byte) (int, bool) {
	n, res := parseInteger(v, maxUsageCount)
	if res != intOK {
		return 0, false
	}
	return int(n), true
}

// readUsage reads the counts of the usage object v (any vendor's names).
func readUsage(v []byte) (u usageFields) {
	if kindOf(v) != kindObject {
		return u
	}
	m := objectMembers(v)
	for {
		key, esc, vs, ve, ok := m.next()
		if !ok {
			break
		}
		val := v[vs:ve]
		var buf [64]byte
		if esc {
			key = appendUnescaped(buf[:0], key)
		}
		switch string(key) {
		case "prompt_tokens":
			u.prompt, u.hasPrompt = count(val)
		case "completion_tokens":
			u.completion, u.hasCompletion = count(val)
		case "total_tokens":
			u.total, u.hasTotal = count(val)
		case "input_tokens":
			u.input, u.hasInput = count(val)
		case "output_tokens":
			u.output, u.hasOutput = count(val)
		case "cache_read_input_tokens":
			u.cacheRead, u.hasCacheRead = count(val)
		case "cache_creation_input_tokens":
			u.cacheCreation, u.hasCacheCreation = count(val)
		case "prompt_tokens_details", "input_tokens_details", "prompt_token_details":
			// prompt_token_details is the (misspelt) name GIE v1.5 reads.
			if n, ok := count(member(val, "cached_tokens")); ok && !u.hasCached {
				u.cached, u.hasCached = n, true
			}
		}
	}
	return u
}

// openAIUsage converts OpenAI (prompt_tokens, ...) or Responses API
// (input_tokens, ...) counts; the OpenAI names win when both are present.
// A missing total is the sum of prompt and completion.
func (u *usageFields) openAIUsage() scheduling.Usage {
	var out scheduling.Usage
	switch {
	case u.hasPrompt:
		out.PromptTokens = u.prompt
	case u.hasInput:
		out.PromptTokens = u.input
	}
	switch {
	case u.hasCompletion:
		out.CompletionTokens = u.completion
	case u.hasOutput:
		out.CompletionTokens = u.output
	}
	out.TotalTokens = out.PromptTokens + out.CompletionTokens
	if u.hasTotal {
		out.TotalTokens = u.total
	}
	out.CachedTokens = u.cached
	if !u.hasCached && u.hasCacheRead {
		out.CachedTokens = u.cacheRead
	}
	return out
}

// anthropicUsage converts Anthropic counts to OpenAI's meaning: prompt
// tokens are input_tokens plus cache reads plus cache writes (Anthropic's
// input_tokens count only the uncached part), cached tokens are the cache
// reads, and the total is prompt plus completion.
func anthropicUsage(input, cacheRead, cacheCreation, output int) scheduling.Usage {
	prompt := input + cacheRead + cacheCreation
	return scheduling.Usage{
		PromptTokens:     prompt,
		CompletionTokens: output,
		TotalTokens:      prompt + output,
		CachedTokens:     cacheRead,
	}
}

// ParseUsage reads the token usage of a complete (non-streamed) JSON
// response body from its top-level "usage" object:
//   - OpenAI completions and chat: prompt_tokens, completion_tokens,
//     total_tokens, prompt_tokens_details.cached_tokens;
//   - Responses API: input_tokens, output_tokens, total_tokens,
//     input_tokens_details.cached_tokens;
//   - Anthropic Messages ("type": "message", or cache_read_input_tokens /
//     cache_creation_input_tokens without prompt_tokens or total_tokens):
//     input_tokens, output_tokens, cache_read_input_tokens,
//     cache_creation_input_tokens, converted as PromptTokens = input +
//     cache reads + cache writes, CachedTokens = cache reads.
//
// A missing total_tokens is PromptTokens + CompletionTokens. Counts that
// are not non-negative integers are ignored; counts are clamped to 2^31-1.
// ok is false when the body is not valid JSON, has no usage object, or
// the object holds none of these counts.
func ParseUsage(body []byte) (u scheduling.Usage, ok bool) {
	if !validJSON(body) {
		return u, false
	}
	obj := body[skipWS(body, 0):]
	if kindOf(obj) != kindObject {
		return u, false
	}
	var usage, typ []byte
	m := objectMembers(obj)
	for {
		key, esc, vs, ve, ok := m.next()
		if !ok {
			break
		}
		switch {
		case keyIs(key, esc, "usage"):
			usage = obj[vs:ve]
		case keyIs(key, esc, "type"):
			typ = obj[vs:ve]
		}
	}
	f := readUsage(usage)
	if !f.any() {
		return u, false
	}
	if string(typ) == `"message"` || f.anthropicShaped() {
		return anthropicUsage(f.input, f.cacheRead, f.cacheCreation, f.output), true
	}
	return f.openAIUsage(), true
}
