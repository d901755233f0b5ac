package extproc

import (
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/requests"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// TestHeldBytesCountsCopiesOnce: what flow control counts for a queued
// request is its body's capacity, the prompt bytes parsed into buffers of
// their own (never a prompt that is a sub-slice of the body), its headers
// and the per-request overhead, exactly.
func TestHeldBytesCountsCopiesOnce(t *testing.T) {
	headers := map[string]string{":path": "/v1/x", "x-request-id": "r"}
	hdr := 0
	for k, v := range headers {
		hdr += len(k) + len(v) + 16
	}
	msgSize := int(unsafe.Sizeof(scheduling.Message{}))
	long := strings.Repeat("x", 700)
	for _, tc := range []struct {
		name  string
		api   requests.API
		body  string
		owned func(p *scheduling.Prompt) int
	}{
		{"completions unescaped string aliases the body", requests.APICompletions,
			`{"model":"m","prompt":"` + long + `"}`, func(*scheduling.Prompt) int { return 0 }},
		{"completions escaped string is a copy", requests.APICompletions,
			`{"model":"m","prompt":"` + long + `\n"}`, func(p *scheduling.Prompt) int { return cap(p.Text) }},
		{"completions several strings are one copy", requests.APICompletions,
			`{"model":"m","prompt":["` + long + `","y"]}`, func(p *scheduling.Prompt) int { return cap(p.Text) }},
		{"cache salt is a copy", requests.APICompletions,
			`{"model":"m","prompt":"` + long + `","cache_salt":"salty"}`, func(*scheduling.Prompt) int { return len("salty") }},
		{"chat rendering, which the messages are substrings of", requests.APIChatCompletions,
			`{"model":"m","messages":[{"role":"user","content":"` + long + `"},{"role":"assistant","content":"ok"}]}`,
			func(p *scheduling.Prompt) int { return cap(p.Text) + cap(p.Messages)*msgSize }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := append(make([]byte, 0, 2048), tc.body...)
			var parsed requests.Parsed
			require.NoError(t, requests.Parse("openai", tc.api, b, &parsed))
			st := &stream{body: b, headers: headers, req: &scheduling.Request{Prompt: parsed.Prompt}}
			want := 2048 + queuedRequestOverhead + hdr + tc.owned(&parsed.Prompt)
			assert.Equal(t, uint64(want), st.heldBytes())
		})
	}
}

func TestAliases(t *testing.T) {
	b := make([]byte, 10, 16)
	assert.True(t, aliases(b[3:5], b))
	assert.True(t, aliases(b[10:12], b), "within capacity")
	assert.False(t, aliases(make([]byte, 4), b))
	assert.False(t, aliases(nil, b))
	assert.False(t, aliases(b, nil))
}

// QueuedRequestOverhead is exported to the external tests.
const QueuedRequestOverhead = queuedRequestOverhead
