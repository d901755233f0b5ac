package requests

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// parsedView is Parsed with Text as a string, for readable diffs.
type parsedView struct {
	API             API
	Model           string
	Text            string
	Messages        []scheduling.Message
	CacheSalt       string
	PromptTokens    int
	MaxOutputTokens int
	Stream          bool
	IncludeUsage    bool
}

func view(p *Parsed) parsedView {
	return parsedView{
		API: p.API, Model: p.Model, Text: string(p.Prompt.Text), Messages: p.Prompt.Messages,
		CacheSalt: p.Prompt.CacheSalt, PromptTokens: p.PromptTokens, MaxOutputTokens: p.MaxOutputTokens,
		Stream: p.Stream, IncludeUsage: p.IncludeUsage,
	}
}

// tokens is the documented PromptTokens formula.
func tokens(text string) int { return max(1, (len(text)+2)/4) }

func msgs(kv ...string) []scheduling.Message {
	var out []scheduling.Message
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, scheduling.Message{Role: kv[i], Content: kv[i+1]})
	}
	return out
}

// ph renders the placeholder of a non-text part whose JSON is raw.
func ph(typ, raw string) string {
	d := digestValue([]byte(raw))
	b := []byte{placeholderMark}
	b = append(b, typ...)
	b = append(b, '#')
	for shift := 60; shift >= 0; shift -= 4 {
		b = append(b, hexDigits[d>>uint(shift)&0xf])
	}
	return string(b)
}

func TestParseAccepts(t *testing.T) {
	t.Parallel()
	img := `{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}`
	toolCalls := `[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]`
	tools := `[{"type":"function","function":{"name":"f"}}]`
	for _, tc := range []struct {
		name string
		api  API
		body string
		want parsedView // PromptTokens 0 means the formula over Text
	}{
		{
			name: "completions string with options",
			api:  APICompletions,
			body: `{"model":"llama","prompt":"hello world","max_tokens":5,"stream":true,"stream_options":{"include_usage":true},"cache_salt":"s1"}`,
			want: parsedView{API: APICompletions, Model: "llama", Text: "hello world", CacheSalt: "s1", MaxOutputTokens: 5, Stream: true, IncludeUsage: true},
		},
		{
			name: "completions escaped prompt is decoded",
			api:  APICompletions,
			body: `{"model":"m","prompt":"a\nb\t\"c\"\\ \u00e9 \ud83d\ude00 \/"}`,
			want: parsedView{API: APICompletions, Model: "m", Text: "a\nb\t\"c\"\\ é 😀 /"},
		},
		{
			name: "unpaired surrogate becomes U+FFFD as in encoding/json",
			api:  APICompletions,
			body: `{"model":"m","prompt":"x\ud800y"}`,
			want: parsedView{API: APICompletions, Model: "m", Text: "x\uFFFDy"},
		},
		{
			name: "completions array of one string",
			api:  APICompletions,
			body: `{"model":"m","prompt":["only"]}`,
			want: parsedView{API: APICompletions, Model: "m", Text: "only"},
		},
		{
			name: "completions array of strings joined with NUL",
			api:  APICompletions,
			body: `{"model":"m","prompt":["a","b\n",""]}`,
			want: parsedView{API: APICompletions, Model: "m", Text: "a\x00b\n\x00"},
		},
		{
			name: "GIE accepts an array holding an empty string",
			api:  APICompletions,
			body: `{"model":"m","prompt":[""]}`,
			want: parsedView{API: APICompletions, Model: "m", Text: "", PromptTokens: 1},
		},
		{
			name: "completions token ids, 4 bytes each",
			api:  APICompletions,
			body: `{"model":"m","prompt":[1, 256, 4294967295, 7.0]}`,
			want: parsedView{API: APICompletions, Model: "m", Text: "\x01\x00\x00\x00\x00\x01\x00\x00\xff\xff\xff\xff\x07\x00\x00\x00", PromptTokens: 4},
		},
		{
			name: "completions arrays of token ids",
			api:  APICompletions,
			body: `{"model":"m","prompt":[[1],[2,3]]}`,
			want: parsedView{API: APICompletions, Model: "m", Text: "\x01\x00\x00\x00\x02\x00\x00\x00\x03\x00\x00\x00", PromptTokens: 3},
		},
		{
			name: "unknown API parses as completions",
			api:  APIUnknown,
			body: `{"model":"m","prompt":"p"}`,
			want: parsedView{API: APICompletions, Model: "m", Text: "p"},
		},
		{
			name: "out of range API parses as completions",
			api:  API(200),
			body: `{"model":"m","prompt":"p"}`,
			want: parsedView{API: APICompletions, Model: "m", Text: "p"},
		},
		{
			name: "embeddings string",
			api:  APIEmbeddings,
			body: `{"model":"e5","input":"embed me","cache_salt":""}`,
			want: parsedView{API: APIEmbeddings, Model: "e5", Text: "embed me"},
		},
		{
			name: "embeddings token arrays",
			api:  APIEmbeddings,
			body: `{"model":"e5","input":[[5]]}`,
			want: parsedView{API: APIEmbeddings, Model: "e5", Text: "\x05\x00\x00\x00", PromptTokens: 1},
		},
		{
			name: "chat text messages",
			api:  APIChatCompletions,
			body: `{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}],"max_completion_tokens":20,"max_tokens":10}`,
			want: parsedView{API: APIChatCompletions, Model: "m", Text: "system\x00be brief\x00user\x00hi\x00",
				Messages: msgs("system", "be brief", "user", "hi"), MaxOutputTokens: 20},
		},
		{
			name: "chat parts, null content with tool_calls, tool message, tools",
			api:  APIChatCompletions,
			body: `{"model":"m","tools":` + tools + `,"messages":[` +
				`{"role":"user","content":[{"type":"text","text":"look"},` + img + `,{"type":"text","text":"here"}]},` +
				`{"role":"assistant","content":null,"tool_calls":` + toolCalls + `},` +
				`{"role":"tool","tool_call_id":"c1","content":"42"},` +
				`{"role":"assistant"}]}`,
			want: parsedView{API: APIChatCompletions, Model: "m",
				Text: "tools\x00" + ph("tools", tools) + "\x00" +
					"user\x00look\nhere" + ph("image_url", img) + "\x00" +
					"assistant\x00" + ph("tool_calls", toolCalls) + "\x00" +
					"tool\x0042\x00" +
					"assistant\x00\x00",
				Messages: msgs("user", "look\nhere", "assistant", "", "tool", "42", "assistant", "")},
		},
		{
			name: "chat unknown part types and null payloads pass",
			api:  APIChatCompletions,
			body: `{"model":"m","messages":[{"role":"user","content":[{"type":"file","file":{"file_id":"f"}},{"type":"image_url","image_url":null},{"type":"input_audio","input_audio":{"data":"AA=="}},{"type":"video_url","video_url":{"url":"v"}}]},{"role":"assistant","content":[{"type":"refusal","refusal":"no"}]}],"documents":null,"chat_template":"t","chat_template_kwargs":{},"add_generation_prompt":true,"continue_final_message":false,"return_assistant_tokens_mask":null}`,
			want: parsedView{API: APIChatCompletions, Model: "m",
				Text: "user\x00" + ph("file", `{"type":"file","file":{"file_id":"f"}}`) + ph("image_url", `{"type":"image_url","image_url":null}`) +
					ph("input_audio", `{"type":"input_audio","input_audio":{"data":"AA=="}}`) + ph("video_url", `{"type":"video_url","video_url":{"url":"v"}}`) + "\x00" +
					"assistant\x00" + ph("refusal", `{"type":"refusal","refusal":"no"}`) + "\x00",
				Messages: msgs("user", "", "assistant", "")},
		},
		{
			name: "chat uncommon and escaped roles",
			api:  APIChatCompletions,
			body: `{"model":"m","messages":[{"role":"narr\u0061tor","content":"once"},{"role":"developer","content":"dev"}]}`,
			want: parsedView{API: APIChatCompletions, Model: "m", Text: "narrator\x00once\x00developer\x00dev\x00",
				Messages: msgs("narrator", "once", "developer", "dev")},
		},
		{
			name: "responses string input and instructions",
			api:  APIResponses,
			body: `{"model":"m","instructions":"sys","input":"hello","max_output_tokens":64}`,
			want: parsedView{API: APIResponses, Model: "m", Text: "system\x00sys\x00user\x00hello\x00",
				Messages: msgs("system", "sys", "user", "hello"), MaxOutputTokens: 64},
		},
		{
			name: "responses items",
			api:  APIResponses,
			body: `{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"q"},{"type":"input_image","image_url":"u"}]},{"type":"function_call","call_id":"1","name":"f","arguments":"{}"},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"a"}]}]}`,
			want: parsedView{API: APIResponses, Model: "m",
				Text: "user\x00q" + ph("input_image", `{"type":"input_image","image_url":"u"}`) + "\x00" +
					"item\x00" + ph("function_call", `{"type":"function_call","call_id":"1","name":"f","arguments":"{}"}`) + "\x00" +
					"assistant\x00a\x00",
				Messages: msgs("user", "q", "assistant", "a")},
		},
		{
			name: "responses empty input is accepted as by GIE",
			api:  APIResponses,
			body: `{"model":"m","input":[]}`,
			want: parsedView{API: APIResponses, Model: "m", Text: "", PromptTokens: 1},
		},
		{
			name: "conversations items",
			api:  APIConversations,
			body: `{"model":"m","items":[{"type":"message","role":"user","content":"hi"},{"type":"reasoning"}]}`,
			want: parsedView{API: APIConversations, Model: "m",
				Text:     "user\x00hi\x00item\x00" + ph("reasoning", `{"type":"reasoning"}`) + "\x00",
				Messages: msgs("user", "hi")},
		},
		{
			name: "anthropic system string",
			api:  APIMessages,
			body: `{"model":"claude","max_tokens":1024,"system":"you are helpful","messages":[{"role":"user","content":"hi"}],"stream":true}`,
			want: parsedView{API: APIMessages, Model: "claude", Text: "system\x00you are helpful\x00user\x00hi\x00",
				Messages: msgs("system", "you are helpful", "user", "hi"), MaxOutputTokens: 1024, Stream: true},
		},
		{
			name: "anthropic blocks, cache_control ignored, tools first",
			api:  APIMessages,
			body: `{"model":"claude","max_tokens":8,"tools":[{"name":"t","cache_control":{"type":"ephemeral"}}],"system":[{"type":"text","text":"s1"},{"type":"text","text":"s2","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}},{"type":"image","source":{"type":"base64","data":"AA=="}}]},{"role":"assistant","content":[{"type":"tool_use","id":"u1","name":"t","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"u1","content":"ok","cache_control":{"type":"ephemeral"}}]}]}`,
			want: parsedView{API: APIMessages, Model: "claude", MaxOutputTokens: 8,
				Text: "tools\x00" + ph("tools", `[{"name":"t"}]`) + "\x00" +
					"system\x00s1\ns2\x00" +
					"user\x00hi" + ph("image", `{"type":"image","source":{"type":"base64","data":"AA=="}}`) + "\x00" +
					"assistant\x00" + ph("tool_use", `{"type":"tool_use","id":"u1","name":"t","input":{}}`) + "\x00" +
					"user\x00" + ph("tool_result", `{"type":"tool_result","tool_use_id":"u1","content":"ok"}`) + "\x00",
				Messages: msgs("system", "s1\ns2", "user", "hi", "assistant", "", "user", "")},
		},
		{
			name: "nulls are absent",
			api:  APICompletions,
			body: `{"model":"m","prompt":"p","stream":null,"stream_options":null,"cache_salt":null,"max_tokens":null,"max_output_tokens":3}`,
			want: parsedView{API: APICompletions, Model: "m", Text: "p", MaxOutputTokens: 3},
		},
		{
			name: "stream_options without include_usage",
			api:  APICompletions,
			body: `{"model":"m","prompt":"p","stream_options":{"continuous_usage_stats":true,"include_usage":null}}`,
			want: parsedView{API: APICompletions, Model: "m", Text: "p"},
		},
		{
			name: "max tokens: integral float, exponent, clamping, zero",
			api:  APICompletions,
			body: `{"model":"m","prompt":"p","max_tokens":100.0,"max_output_tokens":1e400}`,
			want: parsedView{API: APICompletions, Model: "m", Text: "p", MaxOutputTokens: 100},
		},
		{
			name: "max tokens clamped",
			api:  APICompletions,
			body: `{"model":"m","prompt":"p","max_tokens":99999999999999999999999}`,
			want: parsedView{API: APICompletions, Model: "m", Text: "p", MaxOutputTokens: MaxOutputTokensLimit},
		},
		{
			name: "max tokens exponent",
			api:  APICompletions,
			body: `{"model":"m","prompt":"p","max_tokens":1e3}`,
			want: parsedView{API: APICompletions, Model: "m", Text: "p", MaxOutputTokens: 1000},
		},
		{
			name: "max tokens zero is present",
			api:  APICompletions,
			body: `{"model":"m","prompt":"p","max_completion_tokens":0,"max_tokens":7}`,
			want: parsedView{API: APICompletions, Model: "m", Text: "p"},
		},
		{
			name: "duplicate keys: last wins",
			api:  APICompletions,
			body: `{"model":"a","prompt":"x","model":"b","prompt":"y"}`,
			want: parsedView{API: APICompletions, Model: "b", Text: "y"},
		},
		{
			name: "escaped keys and model; unicode model",
			api:  APICompletions,
			body: ` {"mod\u0065l":"\u6a21\u578b-\"q\"","pro\u006dpt":"x"} `,
			want: parsedView{API: APICompletions, Model: `模型-"q"`, Text: "x"},
		},
		{
			name: "nested model keys are not the model",
			api:  APICompletions,
			body: `{"metadata":{"model":"wrong"},"prompt":"\"model\":\"wrong\"","model":"right"}`,
			want: parsedView{API: APICompletions, Model: "right", Text: `"model":"wrong"`},
		},
		{
			name: "unknown fields ignored",
			api:  APIChatCompletions,
			body: `{"model":"m","temperature":0.5,"n":2,"logit_bias":{"1":2},"messages":[{"role":"user","content":"x","name":"bob"}],"extra":[1,{"a":[]}]}`,
			want: parsedView{API: APIChatCompletions, Model: "m", Text: "user\x00x\x00", Messages: msgs("user", "x")},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var got Parsed
			if err := Parse(FormatOpenAI, tc.api, []byte(tc.body), &got); err != nil {
				t.Fatalf("Parse: %v", err)
			}
			want := tc.want
			if want.PromptTokens == 0 {
				want.PromptTokens = tokens(want.Text)
			}
			if diff := cmp.Diff(want, view(&got)); diff != "" {
				t.Errorf("Parse (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	const m = `"model":"m",`
	chat := func(messages string) string { return `{` + m + `"messages":` + messages + `}` }
	anth := func(rest string) string { return `{` + m + `"max_tokens":5,` + rest + `}` }
	for _, tc := range []struct {
		name         string
		api          API
		body         string
		field, error string
	}{
		// The body.
		{"empty", APICompletions, ``, "", "body is empty"},
		{"white space", APIChatCompletions, " \n\t", "", "body is empty"},
		{"truncated", APICompletions, `{"model":`, "", "body is not valid JSON: unexpected end of JSON input (at byte offset 9)"},
		{"trailing comma", APICompletions, `{"model":"m",}`, "", "body is not valid JSON: invalid character '}' looking for beginning of object key string (at byte offset 13)"},
		{"not json", APICompletions, `nope`, "", "body is not valid JSON: invalid character 'o' in literal null (expecting 'u') (at byte offset 1)"},
		{"garbage after", APICompletions, `{"model":"m"} x`, "", "body is not valid JSON: invalid character 'x' after top-level value (at byte offset 14)"},
		{"array", APICompletions, `[1]`, "", "body must be a JSON object, got an array"},
		{"string", APICompletions, `"x"`, "", "body must be a JSON object, got a string"},
		{"null", APICompletions, `null`, "", "body must be a JSON object, got null"},
		{"number", APIMessages, ` 12 `, "", "body must be a JSON object, got a number"},
		// The model.
		{"model missing", APICompletions, `{"prompt":"p"}`, "model", "is required"},
		{"model case matters", APICompletions, `{"Model":"m","prompt":"p"}`, "model", "is required"},
		{"model number", APICompletions, `{"model":123,"prompt":"p"}`, "model", "must be a string, got a number"},
		{"model null", APICompletions, `{"model":null,"prompt":"p"}`, "model", "must be a string, got null"},
		{"model array", APIChatCompletions, `{"model":["m"]}`, "model", "must be a string, got an array"},
		{"model empty", APICompletions, `{"model":"","prompt":"p"}`, "model", "must not be empty"},
		{"model before prompt", APICompletions, `{}`, "model", "is required"},
		// Completions.
		{"prompt missing", APICompletions, `{` + m + `"messages":[]}`, "prompt", "is required"},
		{"prompt number", APICompletions, `{` + m + `"prompt":123}`, "prompt", "must be a string or an array of strings or token ids, got a number"},
		{"prompt null", APICompletions, `{` + m + `"prompt":null}`, "prompt", "must be a string or an array of strings or token ids, got null"},
		{"prompt object", APIUnknown, `{` + m + `"prompt":{}}`, "prompt", "must be a string or an array of strings or token ids, got an object"},
		{"prompt empty string", APICompletions, `{` + m + `"prompt":""}`, "prompt", "must not be empty"},
		{"prompt empty array", APICompletions, `{` + m + `"prompt":[ ]}`, "prompt", "must not be empty"},
		{"prompt mixed strings", APICompletions, `{` + m + `"prompt":["a",1]}`, "prompt[1]", "must be a string, like prompt[0], got a number"},
		{"prompt mixed ids", APICompletions, `{` + m + `"prompt":[1,"a"]}`, "prompt[1]", `must be an integer token id in [0, 4294967295], got "a"`},
		{"prompt negative id", APICompletions, `{` + m + `"prompt":[1,-1]}`, "prompt[1]", "must be an integer token id in [0, 4294967295], got -1"},
		{"prompt fractional id", APICompletions, `{` + m + `"prompt":[1.5]}`, "prompt[0]", "must be an integer token id in [0, 4294967295], got 1.5"},
		{"prompt id too large", APICompletions, `{` + m + `"prompt":[4294967296]}`, "prompt[0]", "must be an integer token id in [0, 4294967295], got 4294967296"},
		{"prompt empty token array", APICompletions, `{` + m + `"prompt":[[1],[]]}`, "prompt[1]", "must not be empty"},
		{"prompt token arrays mixed", APICompletions, `{` + m + `"prompt":[[1],2]}`, "prompt[1]", "must be an array of token ids, like prompt[0], got a number"},
		{"prompt nested bad id", APICompletions, `{` + m + `"prompt":[[1,"x"]]}`, "prompt[0][1]", `must be an integer token id in [0, 4294967295], got "x"`},
		{"prompt object element", APICompletions, `{` + m + `"prompt":[{}]}`, "prompt[0]", "must be a string, a token id or an array of token ids, got an object"},
		{"prompt bool element", APICompletions, `{` + m + `"prompt":[true]}`, "prompt[0]", "must be a string, a token id or an array of token ids, got a boolean"},
		{"prompt long value truncated", APICompletions, `{` + m + `"prompt":[1234567890123456789012345678901234567890]}`, "prompt[0]", "must be an integer token id in [0, 4294967295], got 12345678901234567890123456789012..."},
		// Embeddings.
		{"input missing", APIEmbeddings, `{` + m + `"prompt":"p"}`, "input", "is required"},
		{"input bool", APIEmbeddings, `{` + m + `"input":true}`, "input", "must be a string or an array of strings or token ids, got a boolean"},
		{"input bad element", APIEmbeddings, `{` + m + `"input":["a",null]}`, "input[1]", "must be a string, like input[0], got null"},
		// Chat completions.
		{"messages missing", APIChatCompletions, `{` + m + `"prompt":"p"}`, "messages", "is required"},
		{"messages string", APIChatCompletions, chat(`"hi"`), "messages", "must be an array of messages, got a string"},
		{"messages null", APIChatCompletions, chat(`null`), "messages", "must be an array of messages, got null"},
		{"messages empty", APIChatCompletions, chat(`[]`), "messages", "must contain at least one message"},
		{"message string", APIChatCompletions, chat(`["hi"]`), "messages[0]", "must be an object, got a string"},
		{"message null", APIChatCompletions, chat(`[null]`), "messages[0]", "must be an object, got null"},
		{"role missing", APIChatCompletions, chat(`[{"content":"x"}]`), "messages[0].role", "is required"},
		{"role number", APIChatCompletions, chat(`[{"role":1,"content":"x"}]`), "messages[0].role", "must be a string, got a number"},
		{"content number at index 2", APIChatCompletions, chat(`[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":5}]`), "messages[2].content", "must be a string or an array of content parts, got a number"},
		{"content object", APIChatCompletions, chat(`[{"role":"user","content":{"text":"x"}}]`), "messages[0].content", "must be a string or an array of content parts, got an object"},
		{"part number", APIChatCompletions, chat(`[{"role":"user","content":[1]}]`), "messages[0].content[0]", "must be an object, got a number"},
		{"part type missing", APIChatCompletions, chat(`[{"role":"user","content":[{"type":"text","text":"a"},{"text":"x"}]}]`), "messages[0].content[1].type", "is required"},
		{"part type number", APIChatCompletions, chat(`[{"role":"user","content":[{"type":5}]}]`), "messages[0].content[0].type", "must be a string, got a number"},
		{"text missing", APIChatCompletions, chat(`[{"role":"user","content":[{"type":"text"}]}]`), "messages[0].content[0].text", "is required"},
		{"text number", APIChatCompletions, chat(`[{"role":"user","content":[{"type":"text","text":5}]}]`), "messages[0].content[0].text", "must be a string, got a number"},
		{"image_url string", APIChatCompletions, chat(`[{"role":"user","content":[{"type":"image_url","image_url":"http://example.com"}]}]`), "messages[0].content[0].image_url", "must be an object, got a string"},
		{"input_audio string", APIChatCompletions, chat(`[{"role":"user","content":[{"type":"input_audio","input_audio":"x"}]}]`), "messages[0].content[0].input_audio", "must be an object, got a string"},
		{"video_url number", APIChatCompletions, chat(`[{"role":"user","content":[{"type":"video_url","video_url":5}]}]`), "messages[0].content[0].video_url", "must be an object, got a number"},
		{"tool_calls object", APIChatCompletions, chat(`[{"role":"assistant","content":null,"tool_calls":{}}]`), "messages[0].tool_calls", "must be an array, got an object"},
		{"function_call string", APIChatCompletions, chat(`[{"role":"assistant","function_call":"f"}]`), "messages[0].function_call", "must be an object, got a string"},
		{"tools string", APIChatCompletions, `{` + m + `"tools":"x","messages":[{"role":"user","content":"x"}]}`, "tools", "must be an array, got a string"},
		{"documents string", APIChatCompletions, `{` + m + `"documents":"x","messages":[{"role":"user","content":"x"}]}`, "documents", "must be an array, got a string"},
		{"chat_template number", APIChatCompletions, `{` + m + `"chat_template":1,"messages":[{"role":"user","content":"x"}]}`, "chat_template", "must be a string, got a number"},
		{"chat_template_kwargs string", APIChatCompletions, `{` + m + `"chat_template_kwargs":"x","messages":[{"role":"user","content":"x"}]}`, "chat_template_kwargs", "must be an object, got a string"},
		{"return_assistant_tokens_mask string", APIChatCompletions, `{` + m + `"return_assistant_tokens_mask":"x","messages":[{"role":"user","content":"x"}]}`, "return_assistant_tokens_mask", "must be a boolean, got a string"},
		{"continue_final_message number", APIChatCompletions, `{` + m + `"continue_final_message":1,"messages":[{"role":"user","content":"x"}]}`, "continue_final_message", "must be a boolean, got a number"},
		{"add_generation_prompt string", APIChatCompletions, `{` + m + `"add_generation_prompt":"yes","messages":[{"role":"user","content":"x"}]}`, "add_generation_prompt", "must be a boolean, got a string"},
		// Responses.
		{"responses input missing", APIResponses, `{` + m + `"instructions":"x"}`, "input", "is required"},
		{"responses input number", APIResponses, `{` + m + `"input":5}`, "input", "must be a string or an array of input items, got a number"},
		{"responses input null", APIResponses, `{` + m + `"input":null}`, "input", "must be a string or an array of input items, got null"},
		{"responses item number", APIResponses, `{` + m + `"input":[5]}`, "input[0]", "must be an object, got a number"},
		{"responses role number", APIResponses, `{` + m + `"input":[{"role":5}]}`, "input[0].role", "must be a string, got a number"},
		{"responses type number", APIResponses, `{` + m + `"input":[{"type":5}]}`, "input[0].type", "must be a string, got a number"},
		{"responses content number", APIResponses, `{` + m + `"input":[{"role":"user","content":5}]}`, "input[0].content", "must be a string or an array of content parts, got a number"},
		{"responses text missing", APIResponses, `{` + m + `"input":[{"role":"user","content":[{"type":"input_text"}]}]}`, "input[0].content[0].text", "is required"},
		{"responses instructions number", APIResponses, `{` + m + `"input":"x","instructions":5}`, "instructions", "must be a string, got a number"},
		{"responses tools object", APIResponses, `{` + m + `"input":"x","tools":{}}`, "tools", "must be an array, got an object"},
		// Conversations.
		{"items missing", APIConversations, `{` + m + `"input":[]}`, "items", "is required"},
		{"items empty", APIConversations, `{` + m + `"items":[]}`, "items", "must contain at least one item"},
		{"items string", APIConversations, `{` + m + `"items":"x"}`, "items", "must be an array of items, got a string"},
		{"item number", APIConversations, `{` + m + `"items":[{"role":"user","content":"x"},1]}`, "items[1]", "must be an object, got a number"},
		// Anthropic messages.
		{"anthropic messages missing", APIMessages, anth(`"system":"s"`), "messages", "is required"},
		{"anthropic messages empty", APIMessages, anth(`"messages":[]`), "messages", "must contain at least one message"},
		{"anthropic content missing", APIMessages, anth(`"messages":[{"role":"user"}]`), "messages[0].content", "is required"},
		{"anthropic content null", APIMessages, anth(`"messages":[{"role":"user","content":null}]`), "messages[0].content", "must be a string or an array of content blocks, got null"},
		{"anthropic role missing", APIMessages, anth(`"messages":[{"content":"x"}]`), "messages[0].role", "is required"},
		{"anthropic block text missing", APIMessages, anth(`"messages":[{"role":"user","content":[{"type":"text"}]}]`), "messages[0].content[0].text", "is required"},
		{"anthropic block not object", APIMessages, anth(`"messages":[{"role":"user","content":["x"]}]`), "messages[0].content[0]", "must be an object, got a string"},
		{"anthropic system number", APIMessages, anth(`"system":5,"messages":[{"role":"user","content":"x"}]`), "system", "must be a string or an array of content blocks, got a number"},
		{"anthropic system image", APIMessages, anth(`"system":[{"type":"image"}],"messages":[{"role":"user","content":"x"}]`), "system[0].type", `must be "text"`},
		{"anthropic system text number", APIMessages, anth(`"system":[{"type":"text","text":5}],"messages":[{"role":"user","content":"x"}]`), "system[0].text", "must be a string, got a number"},
		{"anthropic max_tokens missing", APIMessages, `{` + m + `"messages":[{"role":"user","content":"x"}]}`, "max_tokens", "is required"},
		{"anthropic max_tokens null", APIMessages, `{` + m + `"max_tokens":null,"max_completion_tokens":5,"messages":[{"role":"user","content":"x"}]}`, "max_tokens", "is required"},
		{"anthropic max_tokens zero", APIMessages, `{` + m + `"max_tokens":0,"messages":[{"role":"user","content":"x"}]}`, "max_tokens", "must be at least 1"},
		{"anthropic max_tokens string", APIMessages, `{` + m + `"max_tokens":"5","messages":[{"role":"user","content":"x"}]}`, "max_tokens", "must be an integer, got a string"},
		// Optional fields.
		{"stream string", APICompletions, `{` + m + `"prompt":"p","stream":"true"}`, "stream", "must be a boolean, got a string"},
		{"stream_options number", APICompletions, `{` + m + `"prompt":"p","stream_options":1}`, "stream_options", "must be an object, got a number"},
		{"include_usage string", APICompletions, `{` + m + `"prompt":"p","stream_options":{"include_usage":"yes"}}`, "stream_options.include_usage", "must be a boolean, got a string"},
		{"cache_salt number", APICompletions, `{` + m + `"prompt":"p","cache_salt":1}`, "cache_salt", "must be a string, got a number"},
		{"max_tokens fraction", APICompletions, `{` + m + `"prompt":"p","max_tokens":1.5}`, "max_tokens", "must be an integer, got 1.5"},
		{"max_tokens negative", APICompletions, `{` + m + `"prompt":"p","max_tokens":-3}`, "max_tokens", "must not be negative, got -3"},
		{"max_tokens huge negative", APICompletions, `{` + m + `"prompt":"p","max_tokens":-1e400}`, "max_tokens", "must not be negative, got -1e400"},
		{"max_completion_tokens bool", APIChatCompletions, `{` + m + `"messages":[{"role":"user","content":"x"}],"max_completion_tokens":true}`, "max_completion_tokens", "must be an integer, got a boolean"},
		{"max_output_tokens checked after the first", APIResponses, `{` + m + `"input":"x","max_tokens":5,"max_output_tokens":"x"}`, "max_output_tokens", "must be an integer, got a string"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := Parsed{Model: "stale", Stream: true}
			err := Parse("", tc.api, []byte(tc.body), &got)
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("Parse error = %v (%T), want *Error", err, err)
			}
			if pe.Field != tc.field || pe.Message != tc.error {
				t.Errorf("Parse error = {Field: %q, Message: %q}, want {%q, %q}", pe.Field, pe.Message, tc.field, tc.error)
			}
			want := tc.error
			if tc.field != "" {
				want = tc.field + ": " + tc.error
			}
			if pe.Error() != want {
				t.Errorf("Error() = %q, want %q", pe.Error(), want)
			}
			wantAPI := tc.api
			if wantAPI == APIUnknown {
				wantAPI = APICompletions
			}
			if diff := cmp.Diff(parsedView{API: wantAPI}, view(&got)); diff != "" {
				t.Errorf("out after an error (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseFormats(t *testing.T) {
	t.Parallel()
	t.Run("passthrough reads nothing and never fails", func(t *testing.T) {
		t.Parallel()
		for _, body := range []string{"", "not json", `{"model":"m","prompt":"p"}`} {
			got := Parsed{Model: "stale"}
			if err := Parse(FormatPassthrough, APIChatCompletions, []byte(body), &got); err != nil {
				t.Fatalf("Parse(passthrough, %q) = %v", body, err)
			}
			if diff := cmp.Diff(parsedView{API: APIChatCompletions}, view(&got)); diff != "" {
				t.Errorf("Parse(passthrough, %q) (-want +got):\n%s", body, diff)
			}
		}
		var got Parsed
		if err := Parse(FormatPassthrough, APIUnknown, nil, &got); err != nil || got.API != APIUnknown {
			t.Errorf("Parse(passthrough, APIUnknown) = %v, API %v; want nil, unknown", err, got.API)
		}
	})
	t.Run("openai is the default", func(t *testing.T) {
		t.Parallel()
		var a, b Parsed
		body := []byte(`{"model":"m","prompt":"p"}`)
		if err := Parse("", APICompletions, body, &a); err != nil {
			t.Fatal(err)
		}
		if err := Parse(FormatOpenAI, APICompletions, body, &b); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(view(&b), view(&a)); diff != "" {
			t.Errorf("format \"\" differs from openai (-openai +default):\n%s", diff)
		}
	})
	t.Run("unknown format", func(t *testing.T) {
		t.Parallel()
		var got Parsed
		err := Parse("vllmgrpc", APICompletions, []byte(`{}`), &got)
		if !errors.Is(err, ErrUnknownFormat) {
			t.Fatalf("Parse(vllmgrpc) = %v, want ErrUnknownFormat", err)
		}
		if pe, ok := errors.AsType[*Error](err); ok {
			t.Errorf("unknown format returned a client error %v", pe)
		}
		if !strings.Contains(err.Error(), `"vllmgrpc"`) {
			t.Errorf("error %q does not name the format", err)
		}
	})
}

// aliases reports whether sub lies inside body's memory.
func aliases(body, sub []byte) bool {
	if len(sub) == 0 {
		return false
	}
	for i := range body {
		if &body[i] == &sub[0] {
			return i+len(sub) <= len(body)
		}
	}
	return false
}

func TestParseAliasing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		api     API
		body    string
		aliased bool
	}{
		{"completions plain string", APICompletions, `{"model":"m","prompt":"plain text"}`, true},
		{"completions one-string array", APICompletions, `{"model":"m","prompt":["plain"]}`, true},
		{"embeddings plain string", APIEmbeddings, `{"model":"m","input":"plain"}`, true},
		{"completions escaped string", APICompletions, `{"model":"m","prompt":"line\n"}`, false},
		{"completions two strings", APICompletions, `{"model":"m","prompt":["a","b"]}`, false},
		{"completions token ids", APICompletions, `{"model":"m","prompt":[1]}`, false},
		{"chat", APIChatCompletions, `{"model":"m","messages":[{"role":"user","content":"plain"}]}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			body := []byte(tc.body)
			var got Parsed
			if err := Parse(FormatOpenAI, tc.api, body, &got); err != nil {
				t.Fatal(err)
			}
			if a := aliases(body, got.Prompt.Text); a != tc.aliased {
				t.Errorf("Text aliases body = %v, want %v", a, tc.aliased)
			}
			if aliases(body, []byte(got.Model)) {
				t.Errorf("Model aliases body")
			}
		})
	}
}

// TestParsePrefixStable checks that a conversation growing by appended
// messages keeps its earlier Text as a byte prefix, for every
// conversational API.
func TestParsePrefixStable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		api   API
		wrap  func(items string) string
		turns []string
	}{
		{
			name: "chat",
			api:  APIChatCompletions,
			wrap: func(items string) string {
				return `{"model":"m","tools":[{"type":"function"}],"messages":[` + items + `]}`
			},
			turns: []string{
				`{"role":"system","content":"sys"}`,
				`{"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"u"}}]}`,
				`{"role":"assistant","content":null,"tool_calls":[{"id":"1"}]}`,
				`{"role":"tool","content":"r"}`,
				`{"role":"assistant","content":"done"}`,
			},
		},
		{
			name: "anthropic with moving cache breakpoints",
			api:  APIMessages,
			// cache_control sits on the last message only, as clients do.
			wrap: func(items string) string {
				return `{"model":"m","max_tokens":5,"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}],"messages":[` + items + `]}`
			},
			turns: []string{
				`{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":"x"%s}]}`,
				`{"role":"assistant","content":[{"type":"tool_use","id":"b","name":"t","input":{}%s}]}`,
				`{"role":"user","content":[{"type":"text","text":"next"%s}]}`,
			},
		},
		{
			name: "responses",
			api:  APIResponses,
			wrap: func(items string) string {
				return `{"model":"m","instructions":"i","input":[` + items + `]}`
			},
			turns: []string{
				`{"role":"user","content":"q"}`,
				`{"type":"function_call","name":"f","arguments":"{}"}`,
				`{"type":"function_call_output","output":"o"}`,
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var prev []byte
			for n := 1; n <= len(tc.turns); n++ {
				items := make([]string, n)
				for i := range n {
					cc := ""
					if i == n-1 {
						cc = `,"cache_control":{"type":"ephemeral"}`
					}
					items[i] = strings.ReplaceAll(tc.turns[i], "%s", cc)
				}
				var got Parsed
				if err := Parse(FormatOpenAI, tc.api, []byte(tc.wrap(strings.Join(items, ","))), &got); err != nil {
					t.Fatalf("%d turns: %v", n, err)
				}
				if !bytes.HasPrefix(got.Prompt.Text, prev) {
					t.Fatalf("%d turns: Text %q does not start with the previous Text %q", n, got.Prompt.Text, prev)
				}
				prev = got.Prompt.Text
			}
		})
	}
}

func TestPromptTokens(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		prompt string
		want   int
	}{
		{"a", 1}, {"ab", 1}, {"abcde", 1}, {"abcdef", 2}, {"abcdefgh", 2}, {"abcdefghij", 3},
		{strings.Repeat("x", 4000), 1000}, {strings.Repeat("x", 4001), 1000}, {strings.Repeat("x", 4002), 1001},
	} {
		var got Parsed
		if err := Parse(FormatOpenAI, APICompletions, []byte(`{"model":"m","prompt":"`+tc.prompt+`"}`), &got); err != nil {
			t.Fatal(err)
		}
		if got.PromptTokens != tc.want {
			t.Errorf("PromptTokens for %d bytes = %d, want %d", len(tc.prompt), got.PromptTokens, tc.want)
		}
		// The estimate agrees with the scheduler's fallback over Text.
		req := &scheduling.Request{Prompt: got.Prompt}
		if est := scheduling.EstimateInputTokens(req); est != int64(got.PromptTokens) {
			t.Errorf("EstimateInputTokens over Text = %d, PromptTokens = %d", est, got.PromptTokens)
		}
	}
}
