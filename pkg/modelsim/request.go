package modelsim

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
)

// apiKind tells the two OpenAI generation APIs apart.
type apiKind uint8

const (
	kindCompletion apiKind = iota // POST /v1/completions
	kindChat                      // POST /v1/chat/completions
)

// apiError is an error answered with an OpenAI-style JSON body.
type apiError struct {
	status int
	typ    string
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func badRequest(format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, typ: "BadRequestError", msg: fmt.Sprintf(format, args...)}
}

// request is the part of an OpenAI request the simulator uses.
type request struct {
	model        string // "" = the served model
	material     string // prompt material: the prompt, or the chat messages' roles and contents
	maxTokens    int    // 0 = not given
	stream       bool
	includeUsage bool
}

// rawRequest mirrors the OpenAI JSON fields we read; everything else (n,
// temperature, stop, ...) is accepted and ignored, as vLLM ignores what it
// does not support.
type rawRequest struct {
	Model               string          `json:"model"`
	Prompt              json.RawMessage `json:"prompt"`
	Messages            []rawMessage    `json:"messages"`
	MaxTokens           *int64          `json:"max_tokens"`
	MaxCompletionTokens *int64          `json:"max_completion_tokens"`
	Stream              *bool           `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage *bool `json:"include_usage"`
	} `json:"stream_options"`
}

type rawMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type rawContentPart struct {
	Type string  `json:"type"`
	Text *string `json:"text"`
}

// parseRequest decodes an OpenAI completions or chat-completions body. Every
// error is a 400 *apiError naming the offending field.
func parseRequest(kind apiKind, body []byte) (request, *apiError) {
	var raw rawRequest
	if err := json.Unmarshal(body, &raw); err != nil {
		return request{}, badRequest("invalid JSON body: %v", err)
	}
	req := request{model: raw.Model}
	if raw.Stream != nil {
		req.stream = *raw.Stream
	}
	// stream_options only matters when streaming; vLLM rejects it otherwise,
	// the simulator ignores it (documented).
	if req.stream && raw.StreamOptions != nil && raw.StreamOptions.IncludeUsage != nil {
		req.includeUsage = *raw.StreamOptions.IncludeUsage
	}
	limit, field := raw.MaxTokens, "max_tokens"
	if kind == kindChat && raw.MaxCompletionTokens != nil {
		limit, field = raw.MaxCompletionTokens, "max_completion_tokens"
	}
	if limit != nil {
		if *limit < 1 {
			return request{}, badRequest("%s: must be at least 1, got %d", field, *limit)
		}
		req.maxTokens = int(min(*limit, math.MaxInt32))
	}
	var err *apiError
	switch kind {
	case kindChat:
		req.material, err = chatMaterial(raw.Messages)
	default:
		req.material, err = promptMaterial(raw.Prompt)
	}
	if err != nil {
		return request{}, err
	}
	return req, nil
}

// promptMaterial flattens a completions prompt: a string, an array of
// strings (concatenated), or token ids (an array of integers, or an array of
// such arrays), each id standing for 4 bytes so it counts as one token.
func promptMaterial(raw json.RawMessage) (string, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", badRequest("prompt: required")
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", badRequest("prompt: %v", err)
		}
		return s, nil
	case '[':
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return "", badRequest("prompt: must be a string, an array of strings, or an array of token ids: %v", err)
		}
		if len(items) == 0 {
			return "", badRequest("prompt: must not be an empty array")
		}
		var b []byte
		for i, it := range items {
			var err *apiError
			if b, err = appendPromptItem(b, it, i); err != nil {
				return "", err
			}
		}
		return string(b), nil
	default:
		return "", badRequest("prompt: must be a string, an array of strings, or an array of token ids")
	}
}

func appendPromptItem(b []byte, it json.RawMessage, i int) ([]byte, *apiError) {
	it = bytes.TrimSpace(it)
	if len(it) == 0 {
		return nil, badRequest("prompt[%d]: empty", i)
	}
	switch it[0] {
	case '"':
		var s string
		if err := json.Unmarshal(it, &s); err != nil {
			return nil, badRequest("prompt[%d]: %v", i, err)
		}
		return append(b, s...), nil
	case '[':
		var ids []int64
		if err := json.Unmarshal(it, &ids); err != nil {
			return nil, badRequest("prompt[%d]: must be an array of token ids: %v", i, err)
		}
		for j, id := range ids {
			if id < 0 || id > math.MaxUint32 {
				return nil, badRequest("prompt[%d][%d]: token id %d out of range", i, j, id)
			}
			b = binary.LittleEndian.AppendUint32(b, uint32(id))
		}
		return b, nil
	default:
		var id int64
		if err := json.Unmarshal(it, &id); err != nil {
			return nil, badRequest("prompt[%d]: must be a string or a token id: %v", i, err)
		}
		if id < 0 || id > math.MaxUint32 {
			return nil, badRequest("prompt[%d]: token id %d out of range", i, id)
		}
		return binary.LittleEndian.AppendUint32(b, uint32(id)), nil
	}
}

// chatMaterial flattens chat messages into "role\ncontent\n" per message, so
// a conversation's next turn starts with the bytes of the previous one and
// hits the prefix cache. Only text content parts count.
func chatMaterial(msgs []rawMessage) (string, *apiError) {
	if len(msgs) == 0 {
		return "", badRequest("messages: must contain at least one message")
	}
	var b strings.Builder
	for i, m := range msgs {
		if m.Role == "" {
			return "", badRequest("messages[%d].role: required", i)
		}
		b.WriteString(m.Role)
		b.WriteByte('\n')
		if err := appendContent(&b, m.Content, i); err != nil {
			return "", err
		}
		b.WriteByte('\n')
	}
	return b.String(), nil
}

func appendContent(b *strings.Builder, raw json.RawMessage, i int) *apiError {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return badRequest("messages[%d].content: %v", i, err)
		}
		b.WriteString(s)
		return nil
	case '[':
		var parts []rawContentPart
		if err := json.Unmarshal(raw, &parts); err != nil {
			return badRequest("messages[%d].content: must be a string or an array of content parts: %v", i, err)
		}
		for _, p := range parts {
			if p.Text != nil {
				b.WriteString(*p.Text)
			}
		}
		return nil
	default:
		return badRequest("messages[%d].content: must be a string or an array of content parts", i)
	}
}
