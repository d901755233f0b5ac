package requests_test

import (
	"errors"
	"fmt"

	"github.com/switchyard-ai/switchyard/pkg/requests"
)

// The request path: find the API, parse the body, rewrite the model.
func Example() {
	body := []byte(`{"model":"chat","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}],"max_tokens":64,"stream":true}`)
	api := requests.DetectAPI("/v1/chat/completions")

	var p requests.Parsed
	if err := requests.Parse(requests.FormatOpenAI, api, body, &p); err != nil {
		var bad *requests.Error
		if errors.As(err, &bad) {
			fmt.Println("400:", bad)
		}
		return
	}
	fmt.Println(p.API, p.Model, len(p.Prompt.Messages), p.PromptTokens, p.MaxOutputTokens, p.Stream)
	fmt.Printf("%q\n", p.Prompt.Text)

	out, err := requests.RewriteModel(body, "llama-3.1-8b")
	if err != nil {
		return
	}
	fmt.Println(string(out[:24]))
	// Output:
	// chat-completions chat 2 6 64 true
	// "system\x00Be brief.\x00user\x00Hi\x00"
	// {"model":"llama-3.1-8b",
}

func ExampleError() {
	var p requests.Parsed
	err := requests.Parse("", requests.APIChatCompletions, []byte(`{"model":"m","messages":[{"role":"user","content":42}]}`), &p)
	fmt.Println(err)
	// Output:
	// messages[0].content: must be a string or an array of content parts, got a number
}

// The response path of a streamed request.
func ExampleSSEScanner() {
	var s requests.SSEScanner
	for _, chunk := range []string{
		"data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}],\"usage\":null}\n\nda",
		"ta: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":2,\"total_tokens\":11}}\n\n",
		"data: [DONE]\n\n",
	} {
		s.Feed([]byte(chunk))
	}
	u, ok := s.Usage()
	fmt.Println(u.PromptTokens, u.CompletionTokens, u.TotalTokens, ok, s.Done())
	// Output:
	// 9 2 11 true true
}
