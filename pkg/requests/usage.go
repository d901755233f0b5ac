package requests

import (
	"math"
	"slices"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// maxUsageCount bounds each token count read from a response, so sums
// cannot overflow.
const maxUsageCount = math.MaxInt32

// The token counts a usage object may hold, as indexes into
// usageFields.n and usageFields.has.
const (
	usePrompt = iota
	useCompletion
	useTotal
	useInput
	useOutput
	useCacheRead
	useCacheCreation
	numUsageCounts
)

// usageNames are the member names of the counts, by index.
var usageNames = [numUsageCounts]string{
	usePrompt:        "prompt_tokens",
	useCompletion:    "completion_tokens",
	useTotal:         "total_tokens",
	useInput:         "input_tokens",
	useOutput:        "output_tokens",
	useCacheRead:     "cache_read_input_tokens",
	useCacheCreation: "cache_creation_input_tokens",
}

// usageFields are the token counts found in one usage object.
type usageFields struct {
	// n holds each count read (0 when absent); has says which were.
	n   [numUsageCounts]int
	has [numUsageCounts]bool
	// cached is the first cached_tokens found in a details object.
	cached    int
	hasCached bool
}

// any reports whether the object held any token count.
func (u *usageFields) any() bool { return slices.Contains(u.has[:], true) }

// anthropicShaped reports whether the counts use Anthropic's names for
// cache reads (whose input_tokens exclude cached tokens).
func (u *usageFields) anthropicShaped() bool {
	return (u.has[useCacheRead] || u.has[useCacheCreation]) && !u.has[usePrompt] && !u.has[useTotal]
}

// update replaces the counts that f holds.
func (u *usageFields) update(f *usageFields) {
	for i, has := range f.has {
		if has {
			u.n[i], u.has[i] = f.n[i], true
		}
	}
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
	var buf [64]byte
	for {
		key, val, ok := m.nextDecoded(&buf)
		if !ok {
			break
		}
		switch string(key) {
		case "prompt_tokens_details", "input_tokens_details", "prompt_token_details":
			// prompt_token_details is the (misspelt) name GIE v1.5 reads.
			if n, ok := count(member(val, "cached_tokens")); ok && !u.hasCached {
				u.cached, u.hasCached = n, true
			}
			continue
		}
		for i, name := range usageNames {
			if string(key) == name {
				u.n[i], u.has[i] = count(val)
				break
			}
		}
	}
	return u
}

// either returns count a when present, else count b (0 when absent).
func (u *usageFields) either(a, b int) int {
	if u.has[a] {
		return u.n[a]
	}
	return u.n[b]
}

// openAIUsage converts OpenAI (prompt_tokens, ...) or Responses API
// (input_tokens, ...) counts; the OpenAI names win when both are present.
// A missing total is the sum of prompt and completion.
func (u *usageFields) openAIUsage() scheduling.Usage {
	out := scheduling.Usage{
		PromptTokens:     u.either(usePrompt, useInput),
		CompletionTokens: u.either(useCompletion, useOutput),
		CachedTokens:     u.cached,
	}
	out.TotalTokens = out.PromptTokens + out.CompletionTokens
	if u.has[useTotal] {
		out.TotalTokens = u.n[useTotal]
	}
	if !u.hasCached && u.has[useCacheRead] {
		out.CachedTokens = u.n[useCacheRead]
	}
	return out
}

// anthropicUsage converts Anthropic counts to OpenAI's meaning: prompt
// tokens are input_tokens plus cache reads plus cache writes (Anthropic's
// input_tokens count only the uncached part), cached tokens are the cache
// reads, and the total is prompt plus completion.
func (u *usageFields) anthropicUsage() scheduling.Usage {
	prompt := u.n[useInput] + u.n[useCacheRead] + u.n[useCacheCreation]
	return scheduling.Usage{
		PromptTokens:     prompt,
		CompletionTokens: u.n[useOutput],
		TotalTokens:      prompt + u.n[useOutput],
		CachedTokens:     u.n[useCacheRead],
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
	v, _ := pickMembers(obj, "usage", "type")
	f := readUsage(v[0])
	if !f.any() {
		return u, false
	}
	if string(v[1]) == `"message"` || f.anthropicShaped() {
		return f.anthropicUsage(), true
	}
	return f.openAIUsage(), true
}
