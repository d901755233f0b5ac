package prefixawarehash

import (
	"crypto/sha256"
	"unicode/utf8"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// ModelKey is the model a request is routed for: the model it is sent to
// after rewrites, else the model the client named (the consistent-hash
// picker's key, so the fallback agrees with ConsistentHash).
func ModelKey(req *scheduling.Request) string {
	if req == nil {
		return ""
	}
	if req.TargetModel != "" {
		return req.TargetModel
	}
	return req.Model
}

// KeyMaterial returns the prompt text a request's prefix key is made of:
// its system prompt (the first message with role "system" or "developer"
// and some text: a chat system message, Anthropic's top-level system, the
// Responses API's instructions, as pkg/requests renders them into
// Prompt.Messages), else its first user message when that has text. ok is
// false when there is neither (a completions or embeddings request, a
// conversation whose first user message is only images, a body that was
// not parsed): the picker then falls back to the model's hash.
func KeyMaterial(req *scheduling.Request) (text string, ok bool) {
	if req == nil {
		return "", false
	}
	msgs := req.Prompt.Messages
	for i := range msgs {
		if r := msgs[i].Role; (r == "system" || r == "developer") && msgs[i].Content != "" {
			return msgs[i].Content, true
		}
	}
	for i := range msgs {
		if msgs[i].Role == "user" {
			return msgs[i].Content, msgs[i].Content != ""
		}
	}
	return "", false
}

// Truncate cuts text to at most maxBytes bytes, at a UTF-8 character
// boundary (maxPrefixLength counts UTF-8 bytes of the key material).
func Truncate(text string, maxBytes int) string {
	if len(text) <= maxBytes {
		return text
	}
	i := maxBytes
	for i > 0 && !utf8.RuneStart(text[i]) {
		i--
	}
	return text[:i]
}

// Key returns the request's prefix key: SHA-256 of the model (ModelKey), a
// 0x00 byte, and the key material (KeyMaterial) cut to maxPrefixLength
// bytes. ok is false when the request has no key material.
func Key(req *scheduling.Request, maxPrefixLength int) (key [sha256.Size]byte, ok bool) {
	var buf []byte
	return keyInto(req, maxPrefixLength, &buf)
}

// keyInto is Key with a reusable buffer for the hashed bytes.
func keyInto(req *scheduling.Request, maxPrefixLength int, buf *[]byte) (key [sha256.Size]byte, ok bool) {
	text, ok := KeyMaterial(req)
	if !ok {
		return key, false
	}
	text = Truncate(text, maxPrefixLength)
	b := append((*buf)[:0], ModelKey(req)...)
	b = append(b, 0)
	b = append(b, text...)
	*buf = b
	return sha256.Sum256(b), true
}
