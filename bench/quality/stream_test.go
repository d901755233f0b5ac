package quality

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeClock advances 10 ms per reading, so the n-th reading is n × 10 ms
// after start.
type fakeClock struct {
	start time.Time
	n     int
}

func (c *fakeClock) now() time.Time {
	c.n++
	return c.start.Add(time.Duration(c.n) * 10 * time.Millisecond)
}

func TestReadStream(t *testing.T) {
	for _, tc := range []struct {
		name          string
		in            string
		ttft, end     time.Duration
		tokens, usage int
		cached        int
		done          bool
		err           string
	}{
		{
			name: "completion with usage",
			in: "data: {\"choices\":[{\"text\":\"alpha\"}]}\n\n" +
				"data: {\"choices\":[{\"text\":\" beta\",\"finish_reason\":\"length\"}]}\n\n" +
				"data: {\"choices\":[],\"usage\":{\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":64}}}\n\n" +
				"data: [DONE]\n\n",
			ttft: 10 * time.Millisecond, end: 20 * time.Millisecond, tokens: 2, usage: 2, cached: 64, done: true,
		},
		{
			name: "chat: the role delta is not a token; CRLF lines",
			in: "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\r\n\r\n" +
				": comment\r\n" +
				"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\r\n\r\n" +
				"data: [DONE]\r\n\r\n",
			ttft: 10 * time.Millisecond, end: 20 * time.Millisecond, tokens: 1, done: true,
		},
		{
			name: "error event",
			in:   "data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"object\":\"error\",\"message\":\"server closed\",\"code\":503}\n\n",
			ttft: 10 * time.Millisecond, end: 20 * time.Millisecond, tokens: 1, err: "error event: server closed",
		},
		{
			name: "cut without DONE",
			in:   "data: {\"choices\":[{\"text\":\"a\"}]}\n\n",
			ttft: 10 * time.Millisecond, end: 20 * time.Millisecond, tokens: 1, err: "without [DONE]",
		},
		{
			name: "bad JSON",
			in:   "data: {nope\n\n",
			end:  10 * time.Millisecond, err: "bad event",
		},
		{
			name: "a line longer than the read buffer",
			in:   "data: {\"choices\":[{\"text\":\"" + strings.Repeat("x", 40000) + "\"}]}\n\ndata: [DONE]\n\n",
			ttft: 10 * time.Millisecond, end: 20 * time.Millisecond, tokens: 1, done: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &fakeClock{start: time.Unix(1000, 0)}
			res, err := ReadStream(strings.NewReader(tc.in), c.start, c.now)
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tc.ttft, res.TTFT, "TTFT")
			assert.Equal(t, tc.end, res.End, "end")
			assert.Equal(t, tc.tokens, res.Tokens)
			assert.Equal(t, tc.usage, res.UsageTokens)
			assert.Equal(t, tc.cached, res.CachedTokens)
			assert.Equal(t, tc.done, res.Done)
		})
	}
}
