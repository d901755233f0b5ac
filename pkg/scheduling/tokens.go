package scheduling

import "math"

// EstimatedOutputRatio is the number of output tokens GIE v1.5's token
// estimate expects per input token.
const EstimatedOutputRatio = 1.5

// maxEstimatedInput keeps EstimateTokens from overflowing.
const maxEstimatedInput = math.MaxInt64 / 4

// EstimateInputTokens returns the prompt's length in tokens, as the
// in-flight accounting plugins count it, at least 1 (like GIE v1.5, a
// parsed request with an empty prompt counts as one token); a nil request
// counts 0. In order of preference:
//   - Request.BodyBytes / 4 (integer division), when the body size is
//     known: what GIE v1.5 counts, since its request path always knows it;
//   - Request.PromptTokens, when positive;
//   - the prompt text's length in bytes / 4, rounded to the nearest
//     integer (halves up): GIE's estimate when the size is unknown.
func EstimateInputTokens(req *Request) int64 {
	if req == nil {
		return 0
	}
	if req.BodyBytes > 0 {
		return max(1, min(int64(req.BodyBytes)/4, maxEstimatedInput))
	}
	if req.PromptTokens > 0 {
		return min(int64(req.PromptTokens), maxEstimatedInput)
	}
	return max(1, (int64(len(req.Prompt.Text))+2)/4)
}

// EstimateTokens returns GIE v1.5's estimate of the tokens a request keeps
// busy on a model server (its simple token estimator): the input tokens of
// EstimateInputTokens plus round(1.5 × input) expected output tokens, so
// 1 input token counts 3, 100 count 250. A nil request counts 0.
//
// The inflight-load-producer (GIE accounting) counts requests with it; the
// concurrency-detector in tokens mode reads those counts.
func EstimateTokens(req *Request) int64 {
	in := EstimateInputTokens(req)
	// round(1.5 × in) = in + round(in / 2), halves up, in integers.
	return in + in + (in+1)/2
}
