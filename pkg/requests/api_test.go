package requests

import "testing"

func TestDetectAPI(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		path string
		want API
	}{
		{"", APICompletions},
		{"/v1/completions", APICompletions},
		{"/v1/chat/completions", APIChatCompletions},
		{"/v1/responses", APIResponses},
		{"/v1/embeddings", APIEmbeddings},
		{"/v1/conversations", APIConversations},
		{"/v1/messages", APIMessages},
		{"/anthropic/v1/messages", APIMessages},
		{"/v1/chat/completions?api-version=2024-02-01", APIChatCompletions},
		{"/v1/chat/completions/", APIChatCompletions},
		{"/v1/completions#frag", APICompletions},
		{"/v1/projects/p/locations/us-central1/endpoints/openapi/chat/completions", APIChatCompletions},
		{"/openai/deployments/gpt/completions?x=/chat/completions", APICompletions},
		{"/v1/models", APIUnknown},
		{"/v1/messages/count_tokens", APIUnknown},
		{"/v1/conversations/c1/items", APIUnknown},
		{"/", APIUnknown},
		{"?a=b", APICompletions},
		{"/V1/CHAT/COMPLETIONS", APIUnknown},
		{"chat/completions", APICompletions}, // suffix "/completions", as in GIE
		{"/chat/completions", APIChatCompletions},
	} {
		if got := DetectAPI(tc.path); got != tc.want {
			t.Errorf("DetectAPI(%q) = %v, want %v", tc.path, got, tc.want)
		}
	}
}

func TestAPIString(t *testing.T) {
	t.Parallel()
	want := map[API]string{
		APIUnknown:         "unknown",
		APICompletions:     "completions",
		APIChatCompletions: "chat-completions",
		APIResponses:       "responses",
		APIEmbeddings:      "embeddings",
		APIConversations:   "conversations",
		APIMessages:        "anthropic-messages",
		API(99):            "unknown",
	}
	for a, s := range want {
		if got := a.String(); got != s {
			t.Errorf("API(%d).String() = %q, want %q", a, got, s)
		}
	}
	all := APIs()
	if len(all) != int(numAPIs) || all[0] != APIUnknown || all[len(all)-1] != APIMessages {
		t.Errorf("APIs() = %v", all)
	}
	seen := map[string]bool{}
	for _, a := range all {
		if seen[a.String()] {
			t.Errorf("duplicate name %q", a)
		}
		seen[a.String()] = true
	}
}
