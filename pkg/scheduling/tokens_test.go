package scheduling_test

import (
	"math"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

func TestEstimateTokens(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		req          *scheduling.Request
		wantInput    int64
		wantEstimate int64
	}{
		{name: "nil request", req: nil, wantInput: 0, wantEstimate: 0},
		// An empty prompt counts one token, as GIE v1.5 counts a request
		// with a body whose prompt is empty: 1 + round(1.5) = 3.
		{name: "empty prompt", req: &scheduling.Request{}, wantInput: 1, wantEstimate: 3},
		{name: "prompt tokens", req: &scheduling.Request{PromptTokens: 100}, wantInput: 100, wantEstimate: 250},
		{name: "odd prompt tokens round half up", req: &scheduling.Request{PromptTokens: 3}, wantInput: 3, wantEstimate: 3 + 5},
		{name: "negative prompt tokens fall back to the text", req: estimateReq(-4, "12345678"), wantInput: 2, wantEstimate: 5},
		{name: "prompt tokens win over the text", req: estimateReq(2, strings.Repeat("x", 400)), wantInput: 2, wantEstimate: 5},
		// The cases of GIE v1.5's estimator test that carry over (the
		// prompt text of a completion; a chat renders differently).
		{name: "fewer than 4 characters", req: estimateReq(0, "123"), wantInput: 1, wantEstimate: 3},
		{name: "exactly 4 characters", req: estimateReq(0, "1234"), wantInput: 1, wantEstimate: 3},
		{name: "13 characters", req: estimateReq(0, "Hello, world!"), wantInput: 3, wantEstimate: 8},
		{name: "37 characters", req: estimateReq(0, "Tell me a story about a brave knight."), wantInput: 9, wantEstimate: 23},
		{name: "6 characters round half up", req: estimateReq(0, "123456"), wantInput: 2, wantEstimate: 5},
		{name: "huge prompt tokens do not overflow", req: &scheduling.Request{PromptTokens: math.MaxInt}, wantInput: math.MaxInt64 / 4, wantEstimate: math.MaxInt64/4*2 + (math.MaxInt64/4+1)/2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := scheduling.EstimateInputTokens(tt.req); got != tt.wantInput {
				t.Errorf("EstimateInputTokens() = %d, want %d", got, tt.wantInput)
			}
			got := scheduling.EstimateTokens(tt.req)
			if got != tt.wantEstimate {
				t.Errorf("EstimateTokens() = %d, want %d", got, tt.wantEstimate)
			}
			if got < 0 {
				t.Errorf("EstimateTokens() = %d, negative", got)
			}
		})
	}
}

// TestEstimateTokensMatchesFloatFormula checks the integer arithmetic
// against GIE's floating-point formula, max(1, round(chars/4)) input tokens
// plus round(1.5 × input), over a range of sizes.
func TestEstimateTokensMatchesFloatFormula(t *testing.T) {
	t.Parallel()
	buf := []byte(strings.Repeat("x", 4099))
	for n := 0; n <= len(buf); n++ {
		in := math.Max(1, math.Round(float64(n)/4))
		want := int64(in) + int64(math.Round(in*scheduling.EstimatedOutputRatio))
		req := &scheduling.Request{Prompt: scheduling.Prompt{Text: buf[:n]}}
		if got := scheduling.EstimateTokens(req); got != want {
			t.Fatalf("%d characters: EstimateTokens() = %d, want %d", n, got, want)
		}
	}
	for in := 1; in <= 100_000; in++ {
		want := int64(in) + int64(math.Round(float64(in)*scheduling.EstimatedOutputRatio))
		if got := scheduling.EstimateTokens(&scheduling.Request{PromptTokens: in}); got != want {
			t.Fatalf("%d prompt tokens: EstimateTokens() = %d, want %d", in, got, want)
		}
	}
}

func estimateReq(promptTokens int, s string) *scheduling.Request {
	return &scheduling.Request{PromptTokens: promptTokens, Prompt: scheduling.Prompt{Text: []byte(s)}}
}

// TestEstimateInputTokensPrefersBodySize: GIE v1.5 always knows the body
// size and divides it by 4 (integer division, at least 1); the prompt-based
// estimates apply only when the size is unknown.
func TestEstimateInputTokensPrefersBodySize(t *testing.T) {
	tests := []struct {
		name string
		req  *scheduling.Request
		want int64
	}{
		{name: "body size wins over prompt tokens and text", req: &scheduling.Request{BodyBytes: 4003, PromptTokens: 7, Prompt: scheduling.Prompt{Text: make([]byte, 40)}}, want: 1000},
		{name: "a tiny body counts one token", req: &scheduling.Request{BodyBytes: 3}, want: 1},
		{name: "prompt tokens when the size is unknown", req: &scheduling.Request{PromptTokens: 7, Prompt: scheduling.Prompt{Text: make([]byte, 40)}}, want: 7},
		{name: "text length otherwise", req: &scheduling.Request{Prompt: scheduling.Prompt{Text: make([]byte, 42)}}, want: 11},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := scheduling.EstimateInputTokens(tt.req); got != tt.want {
				t.Errorf("EstimateInputTokens = %d, want %d", got, tt.want)
			}
		})
	}
}
