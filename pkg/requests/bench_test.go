package requests

import (
	"fmt"
	"strings"
	"testing"
)

// benchText returns n bytes of prose without JSON escapes.
func benchText(n int) string {
	const words = "the quick brown fox jumps over the lazy dog while a model server streams tokens "
	return strings.Repeat(words, n/len(words)+1)[:n]
}

func benchParse(b *testing.B, api API, body []byte) {
	b.Helper()
	var p Parsed
	if err := Parse(FormatOpenAI, api, body, &p); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := Parse(FormatOpenAI, api, body, &p); err != nil {
			b.Fatal(err)
		}
	}
}

func completionsBody(n int) []byte {
	return []byte(`{"model":"meta-llama/Llama-3.1-8B-Instruct","prompt":"` + benchText(n) + `","max_tokens":128,"temperature":0.7,"stream":true,"stream_options":{"include_usage":true}}`)
}

func chatBody(total, messages int) []byte {
	var sb strings.Builder
	sb.WriteString(`{"model":"meta-llama/Llama-3.1-8B-Instruct","messages":[`)
	roles := []string{"system", "user", "assistant"}
	for i := range messages {
		if i > 0 {
			sb.WriteByte(',')
		}
		role := roles[min(i, 1+(i+1)%2)]
		fmt.Fprintf(&sb, `{"role":%q,"content":"%s\n"}`, role, benchText(total/messages))
	}
	sb.WriteString(`],"max_completion_tokens":256,"stream":true}`)
	return []byte(sb.String())
}

func BenchmarkParse(b *testing.B) {
	b.Run("completions-4KB", func(b *testing.B) { benchParse(b, APICompletions, completionsBody(4<<10)) })
	b.Run("completions-64KB", func(b *testing.B) { benchParse(b, APICompletions, completionsBody(64<<10)) })
	b.Run("chat-4KB-8msgs", func(b *testing.B) { benchParse(b, APIChatCompletions, chatBody(4<<10, 8)) })
	b.Run("chat-64KB-32msgs", func(b *testing.B) { benchParse(b, APIChatCompletions, chatBody(64<<10, 32)) })
	b.Run("passthrough-4KB", func(b *testing.B) {
		body := completionsBody(4 << 10)
		var p Parsed
		b.ReportAllocs()
		for b.Loop() {
			_ = Parse(FormatPassthrough, APICompletions, body, &p)
		}
	})
}

func BenchmarkRewriteModel(b *testing.B) {
	body := completionsBody(4 << 10)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := RewriteModel(body, "llama-3.1-8b-lora-a"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRewriteResponseModel(b *testing.B) {
	chunk := []byte(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"target-model","choices":[{"index":0,"delta":{"content":" token"}}]}` + "\n\n")
	b.Run("match", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = RewriteResponseModel(chunk, "target-model", "client-model")
		}
	})
	b.Run("no-match", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = RewriteResponseModel(chunk, "other-model", "client-model")
		}
	})
}

// sseStream returns a 200-chunk OpenAI stream ending with usage and
// [DONE], one event per chunk.
func sseStream() [][]byte {
	chunks := make([][]byte, 0, 200)
	for i := range 198 {
		chunks = append(chunks, fmt.Appendf(nil, "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" token%d\"}}],\"usage\":null}\n\n", i))
	}
	chunks = append(chunks, []byte("data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":1000,\"completion_tokens\":198,\"total_tokens\":1198}}\n\n"))
	chunks = append(chunks, []byte("data: [DONE]\n\n"))
	return chunks
}

func BenchmarkSSEScanner(b *testing.B) {
	chunks := sseStream()
	total := 0
	// Every event split in the middle, so lines cross chunk boundaries.
	var halves [][]byte
	for _, c := range chunks {
		total += len(c)
		halves = append(halves, c[:len(c)/2], c[len(c)/2:])
	}
	for _, bc := range []struct {
		name   string
		chunks [][]byte
	}{
		{"200-chunks", chunks},
		{"200-chunks-split", halves},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var s SSEScanner
			b.SetBytes(int64(total))
			b.ReportAllocs()
			for b.Loop() {
				s.Reset()
				for _, c := range bc.chunks {
					s.Feed(c)
				}
				if u, ok := s.Usage(); !ok || u.TotalTokens != 1198 || !s.Done() {
					b.Fatalf("usage %+v %v, done %v", u, ok, s.Done())
				}
			}
		})
	}
}

func BenchmarkParseUsage(b *testing.B) {
	body := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"` + benchText(2<<10) + `"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1000,"completion_tokens":500,"total_tokens":1500,"prompt_tokens_details":{"cached_tokens":256}}}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := ParseUsage(body); !ok {
			b.Fatal("no usage")
		}
	}
}
