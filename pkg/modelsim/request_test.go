package modelsim

import (
	"encoding/binary"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseRequest(t *testing.T) {
	ids := func(v ...uint32) string {
		var b []byte
		for _, x := range v {
			b = binary.LittleEndian.AppendUint32(b, x)
		}
		return string(b)
	}
	tests := []struct {
		name    string
		kind    apiKind
		body    string
		want    request
		wantErr string
	}{
		{"string prompt", kindCompletion, `{"model":"m","prompt":"hello","max_tokens":5,"n":3,"temperature":0.2}`,
			request{model: "m", material: "hello", maxTokens: 5}, ""},
		{"array of strings", kindCompletion, `{"prompt":["ab","cd"]}`, request{material: "abcd"}, ""},
		{"token ids", kindCompletion, `{"prompt":[1,2,70000]}`, request{material: ids(1, 2, 70000)}, ""},
		{"batched token ids", kindCompletion, `{"prompt":[[1,2],[3]]}`, request{material: ids(1, 2, 3)}, ""},
		{"streaming with usage", kindCompletion, `{"prompt":"x","stream":true,"stream_options":{"include_usage":true}}`,
			request{material: "x", stream: true, includeUsage: true}, ""},
		{"stream options without streaming are ignored", kindCompletion, `{"prompt":"x","stream":false,"stream_options":{"include_usage":true}}`,
			request{material: "x"}, ""},
		{"null fields", kindCompletion, `{"prompt":"x","stream":null,"max_tokens":null,"stream_options":null}`, request{material: "x"}, ""},
		{"completions ignore max_completion_tokens", kindCompletion, `{"prompt":"x","max_completion_tokens":3}`, request{material: "x"}, ""},
		{"chat", kindChat, `{"messages":[{"role":"system","content":"s"},{"role":"user","content":"u"}],"max_tokens":4}`,
			request{material: "system\ns\nuser\nu\n", maxTokens: 4}, ""},
		{"chat content parts and null content", kindChat,
			`{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"b"}]},{"role":"assistant","content":null}]}`,
			request{material: "user\nab\nassistant\n\n"}, ""},
		{"max_completion_tokens wins for chat", kindChat, `{"messages":[{"role":"user","content":"u"}],"max_tokens":9,"max_completion_tokens":2}`,
			request{material: "user\nu\n", maxTokens: 2}, ""},
		{"huge max_tokens is clamped", kindCompletion, `{"prompt":"x","max_tokens":99999999999}`, request{material: "x", maxTokens: 2147483647}, ""},

		{"not JSON", kindCompletion, `nope`, request{}, "invalid JSON body"},
		{"not an object", kindCompletion, `[1]`, request{}, "invalid JSON body"},
		{"fractional max_tokens", kindCompletion, `{"prompt":"x","max_tokens":1.5}`, request{}, "invalid JSON body"},
		{"negative max_tokens", kindCompletion, `{"prompt":"x","max_tokens":-1}`, request{}, "max_tokens: must be at least 1, got -1"},
		{"zero max_completion_tokens", kindChat, `{"messages":[{"role":"user"}],"max_completion_tokens":0}`, request{}, "max_completion_tokens: must be at least 1, got 0"},
		{"missing prompt", kindCompletion, `{}`, request{}, "prompt: required"},
		{"null prompt", kindCompletion, `{"prompt":null}`, request{}, "prompt: required"},
		{"empty prompt array", kindCompletion, `{"prompt":[]}`, request{}, "prompt: must not be an empty array"},
		{"object prompt", kindCompletion, `{"prompt":{"a":1}}`, request{}, "prompt: must be a string, an array of strings, or an array of token ids"},
		{"negative token id", kindCompletion, `{"prompt":[1,-2]}`, request{}, "prompt[1]: token id -2 out of range"},
		{"nested negative token id", kindCompletion, `{"prompt":[[1],[5000000000]]}`, request{}, "prompt[1][0]: token id 5000000000 out of range"},
		{"bool in prompt", kindCompletion, `{"prompt":["a",true]}`, request{}, "prompt[1]: must be a string or a token id"},
		{"nested strings", kindCompletion, `{"prompt":[["a"]]}`, request{}, "prompt[0]: must be an array of token ids"},
		{"no messages", kindChat, `{"messages":[]}`, request{}, "messages: must contain at least one message"},
		{"messages missing", kindChat, `{"prompt":"x"}`, request{}, "messages: must contain at least one message"},
		{"message without role", kindChat, `{"messages":[{"content":"x"}]}`, request{}, "messages[0].role: required"},
		{"numeric content", kindChat, `{"messages":[{"role":"user","content":"a"},{"role":"user","content":5}]}`, request{}, "messages[1].content: must be a string or an array of content parts"},
		{"bad content parts", kindChat, `{"messages":[{"role":"user","content":[1]}]}`, request{}, "messages[0].content: must be a string or an array of content parts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseRequest(tt.kind, []byte(tt.body))
			if tt.wantErr != "" {
				require.NotNil(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				assert.Equal(t, http.StatusBadRequest, err.status)
				assert.Equal(t, "BadRequestError", err.typ)
				return
			}
			require.Nil(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestTokensAndHashes(t *testing.T) {
	tests := []struct {
		name       string
		material   string
		blockSize  int
		wantTokens int
		wantBlocks int
	}{
		{"empty prompt is one token", "", 16, 1, 0},
		{"rounds up", "abcde", 16, 2, 0},
		{"exactly one block", string(make([]byte, 64)), 16, 16, 1},
		{"partial block has no hash", string(make([]byte, 127)), 16, 32, 1},
		{"4 KB", string(make([]byte, 4096)), 16, 1024, 64},
		{"block size one", "abcdefgh", 1, 2, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.wantTokens, countTokens(len(tt.material)))
			hs := appendBlockHashes(nil, rootHash(0, ""), tt.material, tt.blockSize)
			assert.Len(t, hs, tt.wantBlocks)
		})
	}
	// Chained: equal blocks at different positions, or after different
	// prefixes, hash differently.
	same := string(make([]byte, 128))
	hs := appendBlockHashes(nil, rootHash(0, ""), same, 16)
	require.Len(t, hs, 2)
	assert.NotEqual(t, hs[0], hs[1])
	other := appendBlockHashes(nil, rootHash(0, "lora"), same, 16)
	assert.NotEqual(t, hs[0], other[0])
	prefix := appendBlockHashes(nil, rootHash(0, ""), same[:64]+"x"+same[65:], 16)
	assert.Equal(t, hs[0], prefix[0], "the first block is unchanged")
	assert.NotEqual(t, hs[1], prefix[1])
	changed := appendBlockHashes(nil, rootHash(0, ""), "x"+same[1:], 16)
	assert.NotEqual(t, hs[1], changed[1], "a change in block 0 changes every later hash")
}

func TestOutputText(t *testing.T) {
	full := outputText(99, 10)
	var streamed string
	for i := range 10 {
		if i > 0 {
			streamed += " "
		}
		streamed += outputWord(99, i)
	}
	assert.Equal(t, full, streamed, "streamed chunks concatenate to the full text")
	assert.NotEqual(t, full, outputText(100, 10))
	assert.Empty(t, outputText(1, 0))
}
