package requests

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Sample streams, as the model servers send them.
const (
	sseOpenAI = "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"delta\":{\"content\":\"Hi\"}}],\"usage\":null}\n\n" +
		"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"delta\":{\"content\":\" \\\"usage\\\"\"}}],\"usage\":null}\n\n" +
		"data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":10,\"total_tokens\":17,\"prompt_tokens_details\":{\"cached_tokens\":3}}}\n\n" +
		"data: [DONE]\n\n"
	sseOpenAICRLF = "data:{\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}\r\n\r\ndata: [DONE]\r\n\r\n"
	sseResponses  = "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"r\",\"usage\":null}}\n\n" +
		"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hi\"}\n\n" +
		"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"r\",\"object\":\"response\",\"usage\":{\"input_tokens\":31,\"input_tokens_details\":{\"cached_tokens\":0},\"output_tokens\":9,\"total_tokens\":40}}}\n\n"
	sseAnthropic = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"usage\":{\"input_tokens\":25,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":100,\"output_tokens\":1}}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\n\n" +
		": ping comment\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":15}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
)

func TestSSEScanner(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		stream string
		want   scheduling.Usage
		ok     bool
		done   bool
	}{
		{"openai", sseOpenAI, scheduling.Usage{PromptTokens: 7, CompletionTokens: 10, TotalTokens: 17, CachedTokens: 3}, true, true},
		{"openai crlf and no space", sseOpenAICRLF, scheduling.Usage{PromptTokens: 1, CompletionTokens: 2, TotalTokens: 3}, true, true},
		{"responses", sseResponses, scheduling.Usage{PromptTokens: 31, CompletionTokens: 9, TotalTokens: 40}, true, true},
		{"anthropic", sseAnthropic, scheduling.Usage{PromptTokens: 125, CompletionTokens: 15, TotalTokens: 140, CachedTokens: 100}, true, true},
		{"anthropic delta with input counts", "data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n" +
			"data: {\"type\":\"message_delta\",\"usage\":{\"input_tokens\":6,\"cache_read_input_tokens\":4,\"output_tokens\":9}}\n",
			scheduling.Usage{PromptTokens: 10, CompletionTokens: 9, TotalTokens: 19, CachedTokens: 4}, true, false},
		{"anthropic delta alone", "data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":9}}\n",
			scheduling.Usage{CompletionTokens: 9, TotalTokens: 9}, true, false},
		{"no usage but done", "data: {\"choices\":[]}\n\ndata: [DONE]\n\n", scheduling.Usage{}, false, true},
		{"continuous usage: last wins", "data: {\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":1,\"total_tokens\":6}}\n" +
			"data: {\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2,\"total_tokens\":7}}\n",
			scheduling.Usage{PromptTokens: 5, CompletionTokens: 2, TotalTokens: 7}, true, false},
		{"response.incomplete ends", "data: {\"type\":\"response.incomplete\",\"response\":{\"usage\":{\"input_tokens\":1,\"output_tokens\":2,\"total_tokens\":3}}}\n",
			scheduling.Usage{PromptTokens: 1, CompletionTokens: 2, TotalTokens: 3}, true, true},
		{"response.failed without usage ends", "data: {\"type\":\"response.failed\",\"response\":{\"usage\":null}}\n", scheduling.Usage{}, false, true},
		{"last line without newline is not read", "data: [DONE]", scheduling.Usage{}, false, false},
		{"broken json ignored", "data: {\"usage\":{\"prompt_tokens\":1}\n", scheduling.Usage{}, false, false},
		{"not data lines", "event: x\nid: 1\nretry: 5\ndata_: {\"usage\":{\"prompt_tokens\":1}}\n:data: [DONE]\n", scheduling.Usage{}, false, false},
		{"done with trailing spaces", "data:  [DONE]  \n", scheduling.Usage{}, false, false},
		{"done trailing blanks trimmed", "data: [DONE] \t\n", scheduling.Usage{}, false, true},
		{"empty", "", scheduling.Usage{}, false, false},
		{"end marker as text does not end", "data: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"message_stop\"}}\n", scheduling.Usage{}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			check := func(how string, s *SSEScanner) {
				t.Helper()
				u, ok := s.Usage()
				if u != tc.want || ok != tc.ok || s.Done() != tc.done {
					t.Errorf("%s: Usage = %+v, %v, Done = %v; want %+v, %v, %v", how, u, ok, s.Done(), tc.want, tc.ok, tc.done)
				}
			}
			var whole SSEScanner
			whole.Feed([]byte(tc.stream))
			check("whole", &whole)
			// Split in two at every byte position.
			for i := 0; i <= len(tc.stream); i++ {
				var s SSEScanner
				s.Feed([]byte(tc.stream[:i]))
				s.Feed([]byte(tc.stream[i:]))
				check("split at "+strconv.Itoa(i), &s)
			}
			// One byte at a time.
			var bytewise SSEScanner
			for i := range len(tc.stream) {
				bytewise.Feed([]byte{tc.stream[i]})
			}
			check("bytewise", &bytewise)
		})
	}
}

func TestSSEScannerLongLines(t *testing.T) {
	t.Parallel()
	usage := "data: {\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\n"
	// A line of exactly MaxSSELineBytes is read; one byte more is skipped.
	pad := func(n int) string {
		head := `data: {"usage":{"prompt_tokens":2,"completion_tokens":2},"p":"`
		return head + strings.Repeat("x", n-len(head)-2) + "\"}"
	}
	fits, over := pad(MaxSSELineBytes), pad(MaxSSELineBytes+1)
	if len(fits) != MaxSSELineBytes || len(over) != MaxSSELineBytes+1 {
		t.Fatalf("bad padding")
	}
	for _, tc := range []struct {
		name   string
		stream string
		prompt int
	}{
		{"fits", usage + fits + "\n", 2},
		{"over", usage + over + "\n", 1},
		{"over then more", over + "\n" + usage, 1},
	} {
		for _, step := range []int{len(tc.stream), 7, 64 << 10, MaxSSELineBytes} {
			var s SSEScanner
			for i := 0; i < len(tc.stream); i += step {
				s.Feed([]byte(tc.stream[i:min(i+step, len(tc.stream))]))
			}
			if u, _ := s.Usage(); u.PromptTokens != tc.prompt {
				t.Errorf("%s, chunks of %d: PromptTokens = %d, want %d", tc.name, step, u.PromptTokens, tc.prompt)
			}
			if cap(s.partial) > MaxSSELineBytes+64<<10 {
				t.Errorf("%s, chunks of %d: buffer grew to %d", tc.name, step, cap(s.partial))
			}
		}
	}
}

func TestSSEScannerReset(t *testing.T) {
	t.Parallel()
	var s SSEScanner
	s.Feed([]byte(sseAnthropic))
	s.Feed([]byte("data: {\"partial"))
	s.Reset()
	if _, ok := s.Usage(); ok || s.Done() || len(s.partial) != 0 {
		t.Fatalf("Reset left state: %+v", s)
	}
	s.Feed([]byte(sseOpenAI))
	if u, ok := s.Usage(); !ok || u.PromptTokens != 7 || !s.Done() {
		t.Errorf("after Reset: %+v %v %v", u, ok, s.Done())
	}
	// Feed keeps no reference to the chunk.
	chunk := []byte("data: {\"usage\":{\"prompt_tokens\":4")
	s.Reset()
	s.Feed(chunk)
	copy(chunk, bytes.Repeat([]byte("z"), len(chunk)))
	s.Feed([]byte("}}\n"))
	if u, _ := s.Usage(); u.PromptTokens != 4 {
		t.Errorf("scanner kept a reference to the chunk: %+v", u)
	}
}

func TestWorthDecoding(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		payload string
		want    bool
	}{
		{`{"choices":[],"usage":null}`, false},
		{`{"usage" : null,"x":{"usage":null}}`, false},
		{`{"content":"the \"usage\" word"}`, false},
		{`{"choices":[]}`, false},
		{`{"type":"content_block_delta","delta":{"text":"message_stop"}}`, true}, // a harmless false positive
		{`{"type":"response.output_text.delta"}`, false},
		{`{"usage":{"prompt_tokens":1}}`, true},
		{`{"usage":null,"x":{"usage":{}}}`, true},
		{`{"type":"usage"}`, true},
		{`{"type":"message_stop"}`, true},
		{`{"type":"response.completed"}`, true},
		{`{"type":"response.incomplete"}`, true},
		{`{"type":"response.failed"}`, true},
		{`{"usage":`, true},
		{`"`, false},
	} {
		if got := worthDecoding([]byte(tc.payload)); got != tc.want {
			t.Errorf("worthDecoding(%s) = %v, want %v", tc.payload, got, tc.want)
		}
	}
}
