// Package requests reads inference request bodies for the scheduler and
// token usage from response bodies. The ext_proc handler (pkg/extproc)
// calls Parse once per request when the whole body has arrived,
// RewriteModel when the target model differs from the requested one, and
// ParseUsage, SSEScanner and RewriteResponseModel on the response path.
// It depends only on pkg/scheduling (for Prompt and Usage) and may be
// imported by any package; it keeps no state between calls.
//
// # APIs and formats
//
// DetectAPI maps a request path to an API by its suffix, as GIE v1.5's
// openai-parser does: /conversations, /responses, /chat/completions,
// /completions and /embeddings (OpenAI), and /messages (Anthropic).
//
// Parse knows two formats, named like the parser plugins:
//   - "openai" (FormatOpenAI, also the default for ""): JSON bodies of the
//     OpenAI-compatible APIs and Anthropic Messages, validated as below.
//     An APIUnknown request is parsed as /v1/completions, as GIE v1.5
//     defaults unknown paths to completions.
//   - "passthrough" (FormatPassthrough): nothing is read; Parse returns a
//     Parsed holding only the API and never fails.
//
// # What is validated
//
// Problems are reported as *Error (HTTP 400) with a JSON path and a
// precise message, checked in this order, the first one found returned:
//
//  1. The body: not empty, valid JSON (the message carries
//     encoding/json's description and byte offset), a JSON object.
//  2. model: present, a string, not empty (GIE: "model not found in
//     request body").
//  3. The prompt material the API requires (next section).
//  4. Optional fields, when present and not null: stream is a boolean;
//     stream_options an object whose include_usage is a boolean;
//     cache_salt a string; max_completion_tokens, max_tokens and
//     max_output_tokens non-negative integers (an integral 100.0 or 1e3
//     counts; larger than MaxOutputTokensLimit is clamped, negative or
//     fractional is an error); for chat, the chat-template fields GIE
//     decodes (documents array, chat_template string, chat_template_kwargs
//     object, return_assistant_tokens_mask, continue_final_message and
//     add_generation_prompt booleans).
//
// The prompt material, by API:
//   - completions: prompt is a non-empty string, or a non-empty array of
//     strings, of integer token ids in [0, 2^32-1], or of non-empty arrays
//     of token ids (one kind per array).
//   - embeddings: input, with the same rules.
//   - chat completions: messages is a non-empty array of objects, each
//     with a string role and a content that is a string, an array of
//     content parts, or null/absent (assistant messages with tool_calls,
//     tool results and older clients send that). Each part is an object
//     with a string type; "text" parts need a string text; the payload of
//     image_url, input_audio and video_url parts, when present, is an
//     object; other part types pass (the model server decides). tool_calls
//     is an array and function_call an object when present; tools is an
//     array.
//   - responses: input is a string or an array of objects (items); an
//     item's type and role are strings when present; the content of an
//     item with a role is a string, an array of parts (as for chat, with
//     input_text, output_text and text as the text types), or absent.
//     instructions is a string and tools an array when present.
//   - conversations: items is a non-empty array of items as above.
//   - Anthropic messages: messages is a non-empty array of objects with a
//     string role and a content that is a string or an array of blocks
//     (objects with a string type; "text" blocks need a string text);
//     system is a string or an array of "text" blocks when present; tools
//     is an array; max_tokens is required and at least 1.
//
// JSON null counts as absent for optional fields. Keys match exactly
// (unlike encoding/json's case-insensitive struct matching, but like GIE's
// map lookup and the model servers); for duplicate keys the last wins.
// Unknown fields are ignored.
//
// # Prompt.Text
//
// Text is the byte string prefix-cache plugins hash; PromptTokens is
// max(1, (len(Text)+2)/4), GIE's bytes/4 estimate rounded to nearest.
//   - completions and embeddings: a string prompt is its decoded text. An
//     array of one string is that string; several strings are joined with
//     0x00. Token ids are 4 bytes each, little-endian (so PromptTokens is
//     exactly the token count); arrays of token arrays are concatenated.
//   - conversations (chat messages, Anthropic messages, Responses input,
//     Conversations items) are rendered as a sequence of entries,
//     role 0x00 text placeholders 0x00, where text is the entry's text
//     parts joined by "\n" and each non-text part (image, audio, file,
//     tool call, tool result, ...) is a placeholder 0x1A type "#" and 16
//     hex digits of the xxhash64 of its JSON (members named cache_control
//     left out at any depth, so moving Anthropic cache breakpoints keeps
//     the rendering). Entries come in prompt order: a "tools" entry when
//     tools is a non-empty array (its placeholder only), then the system
//     prompt (Anthropic system, Responses instructions, as role
//     "system"), then the messages; a Responses string input is one "user"
//     entry, and an input item without a role is an entry "item" holding
//     the item's placeholder. Each entry depends only on its own message,
//     so a conversation that grows by appending messages keeps its earlier
//     Text as a byte prefix.
//
// Prompt.Messages lists the entries that are messages (not tools or
// role-less items), with Content their text parts joined by "\n".
// Prompt.CacheSalt is cache_salt.
//
// # Aliasing and copies
//
// Parse decodes each body once: one validation pass (a scanner that
// accepts exactly what encoding/json.Valid accepts, checked by a fuzz
// test, but reads strings eight bytes at a time; encoding/json itself
// describes the error when a body is invalid), then one walk over the
// top-level object finds the fields, and the prompt material is read from
// their spans in place. Nothing is unmarshalled into maps or structs
// (encoding/json would copy every json.RawMessage and match keys
// case-insensitively). What is copied:
//   - Model and CacheSalt: small strings, copied.
//   - completions/embeddings: when the prompt is one string without JSON
//     escapes, Prompt.Text is a sub-slice of body: zero copy. The caller
//     must then keep body alive and must not modify it while Text is in
//     use. A string with escapes, several strings, or token ids are
//     decoded into one new buffer.
//   - conversations: Text is one new buffer holding the rendering (one
//     copy of the text); every Message.Content (and uncommon role) is a
//     substring of it, without another copy.
//
// Text and Messages are read-only, as scheduling.Prompt says.
//
// # Responses
//
// ParseUsage reads usage from a complete JSON body; SSEScanner reads it
// from a server-sent-events stream chunk by chunk, keeping at most
// MaxSSELineBytes of a partial line. Both understand OpenAI, Responses
// API and Anthropic usage and convert them to OpenAI's meaning
// (scheduling.Usage). RewriteModel and RewriteResponseModel splice model
// names into request and response bytes without re-encoding them.
package requests
