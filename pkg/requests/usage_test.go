package requests

import (
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

func TestParseUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		body string
		want scheduling.Usage
		ok   bool
	}{
		{
			name: "openai chat",
			body: `{"id":"x","object":"chat.completion","model":"m","choices":[{"message":{"content":"{\"usage\":1}"}}],"usage":{"prompt_tokens":31,"completion_tokens":10,"total_tokens":41,"prompt_tokens_details":{"cached_tokens":16}}}`,
			want: scheduling.Usage{PromptTokens: 31, CompletionTokens: 10, TotalTokens: 41, CachedTokens: 16},
			ok:   true,
		},
		{
			name: "openai completions without total",
			body: `{"object":"text_completion","usage":{"prompt_tokens":7,"completion_tokens":10}}`,
			want: scheduling.Usage{PromptTokens: 7, CompletionTokens: 10, TotalTokens: 17},
			ok:   true,
		},
		{
			name: "GIE's misspelt prompt_token_details",
			body: `{"usage":{"prompt_tokens":7,"completion_tokens":1,"total_tokens":8,"prompt_token_details":{"cached_tokens":4}}}`,
			want: scheduling.Usage{PromptTokens: 7, CompletionTokens: 1, TotalTokens: 8, CachedTokens: 4},
			ok:   true,
		},
		{
			name: "null details",
			body: `{"usage":{"prompt_tokens":7,"completion_tokens":1,"total_tokens":8,"prompt_tokens_details":null}}`,
			want: scheduling.Usage{PromptTokens: 7, CompletionTokens: 1, TotalTokens: 8},
			ok:   true,
		},
		{
			name: "embeddings",
			body: `{"object":"list","data":[],"usage":{"prompt_tokens":8,"total_tokens":8}}`,
			want: scheduling.Usage{PromptTokens: 8, TotalTokens: 8},
			ok:   true,
		},
		{
			name: "responses api",
			body: `{"id":"resp_1","object":"response","model":"m","usage":{"input_tokens":36,"input_tokens_details":{"cached_tokens":12},"output_tokens":87,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":123}}`,
			want: scheduling.Usage{PromptTokens: 36, CompletionTokens: 87, TotalTokens: 123, CachedTokens: 12},
			ok:   true,
		},
		{
			name: "anthropic",
			body: `{"id":"msg_1","type":"message","role":"assistant","content":[],"usage":{"input_tokens":10,"cache_creation_input_tokens":20,"cache_read_input_tokens":100,"output_tokens":5}}`,
			want: scheduling.Usage{PromptTokens: 130, CompletionTokens: 5, TotalTokens: 135, CachedTokens: 100},
			ok:   true,
		},
		{
			name: "anthropic without cache fields",
			body: `{"type":"message","usage":{"input_tokens":10,"output_tokens":5}}`,
			want: scheduling.Usage{PromptTokens: 10, CompletionTokens: 5, TotalTokens: 15},
			ok:   true,
		},
		{
			name: "anthropic-shaped usage without type",
			body: `{"usage":{"input_tokens":1,"cache_read_input_tokens":2,"output_tokens":3}}`,
			want: scheduling.Usage{PromptTokens: 3, CompletionTokens: 3, TotalTokens: 6, CachedTokens: 2},
			ok:   true,
		},
		{
			name: "odd numbers ignored, floats accepted, huge clamped",
			body: `{"usage":{"prompt_tokens":-1,"completion_tokens":2.0,"total_tokens":1e30}}`,
			want: scheduling.Usage{CompletionTokens: 2, TotalTokens: maxUsageCount},
			ok:   true,
		},
		{name: "no usage", body: `{"object":"chat.completion"}`},
		{name: "null usage", body: `{"usage":null}`},
		{name: "empty usage", body: `{"usage":{}}`},
		{name: "usage of strings", body: `{"usage":{"prompt_tokens":"7"}}`},
		{name: "nested usage only", body: `{"response":{"usage":{"input_tokens":3}}}`},
		{name: "invalid json", body: `{"usage":{"prompt_tokens":7}`},
		{name: "empty", body: ``},
		{name: "array", body: `[{"usage":{"prompt_tokens":7}}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, ok := ParseUsage([]byte(tc.body))
			if ok != tc.ok || got != tc.want {
				t.Errorf("ParseUsage = %+v, %v; want %+v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}
