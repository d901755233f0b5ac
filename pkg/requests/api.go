package requests

import "strings"

// API is the inference API a request addresses, from its path.
type API uint8

// The APIs Switchyard parses.
const (
	// APIUnknown is a path no parser knows. Parse treats it as
	// /v1/completions, as GIE v1.5 does.
	APIUnknown API = iota
	// APICompletions is OpenAI /v1/completions.
	APICompletions
	// APIChatCompletions is OpenAI /v1/chat/completions.
	APIChatCompletions
	// APIResponses is OpenAI /v1/responses.
	APIResponses
	// APIEmbeddings is OpenAI /v1/embeddings.
	APIEmbeddings
	// APIConversations is OpenAI /v1/conversations.
	APIConversations
	// APIMessages is Anthropic /v1/messages.
	APIMessages

	numAPIs
)

var apiNames = [numAPIs]string{
	APIUnknown:         "unknown",
	APICompletions:     "completions",
	APIChatCompletions: "chat-completions",
	APIResponses:       "responses",
	APIEmbeddings:      "embeddings",
	APIConversations:   "conversations",
	APIMessages:        "anthropic-messages",
}

// String returns the API's stable name, usable as a metric label value:
// "unknown", "completions", "chat-completions", "responses", "embeddings",
// "conversations" or "anthropic-messages". Values outside the constants
// above are "unknown".
func (a API) String() string {
	if a >= numAPIs {
		return apiNames[APIUnknown]
	}
	return apiNames[a]
}

// APIs returns every API constant, APIUnknown first: the closed set of
// values a metric label by API can take.
func APIs() []API {
	out := make([]API, numAPIs)
	for i := range out {
		out[i] = API(i)
	}
	return out
}

// apiSuffixes are checked in this order, so /chat/completions wins over
// /completions.
var apiSuffixes = [...]struct {
	suffix string
	api    API
}{
	{"/conversations", APIConversations},
	{"/responses", APIResponses},
	{"/chat/completions", APIChatCompletions},
	{"/completions", APICompletions},
	{"/embeddings", APIEmbeddings},
	{"/messages", APIMessages},
}

// DetectAPI maps a request path to its API by its suffix, as GIE v1.5's
// openai-parser does, so provider paths such as Vertex AI's
// /v1/projects/p/locations/l/endpoints/openapi/chat/completions work. The
// suffixes are, in order: /conversations, /responses, /chat/completions,
// /completions, /embeddings, and /messages (Anthropic; also
// /anthropic/v1/messages). A query (?...) or fragment (#...) and trailing
// slashes are ignored; GIE sees paths the proxy already normalised. The
// match is case-sensitive. An empty path means /v1/completions (GIE's
// default when no path header is present); any other path is APIUnknown.
func DetectAPI(path string) API {
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
	}
	if path == "" {
		return APICompletions
	}
	path = strings.TrimRight(path, "/")
	for _, s := range apiSuffixes {
		if strings.HasSuffix(path, s.suffix) {
			return s.api
		}
	}
	return APIUnknown
}
