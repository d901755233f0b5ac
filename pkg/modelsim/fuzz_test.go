package modelsim

import (
	"net/http"
	"testing"
)

// FuzzParseRequest feeds arbitrary bodies to the OpenAI request parser and
// the checks that follow it (tokens, block hashes, output budget).
func FuzzParseRequest(f *testing.F) {
	for _, seed := range []struct {
		chat bool
		body string
	}{
		{false, `{"prompt":"hello","max_tokens":4}`},
		{false, `{"prompt":["a","b"],"stream":true,"stream_options":{"include_usage":true}}`},
		{false, `{"prompt":[[1,2],[3]]}`},
		{true, `{"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"max_completion_tokens":2}`},
		{true, `{"messages":[{"role":"user","content":null}]}`},
	} {
		f.Add(seed.chat, []byte(seed.body))
	}
	s, err := New(DefaultConfig())
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = s.Close() })
	f.Fuzz(func(t *testing.T, chat bool, body []byte) {
		kind := kindCompletion
		if chat {
			kind = kindChat
		}
		req, perr := parseRequest(kind, body)
		if perr != nil {
			if perr.status != http.StatusBadRequest || perr.msg == "" || perr.typ != "BadRequestError" {
				t.Fatalf("bad error %+v", perr)
			}
			return
		}
		if req.maxTokens < 0 {
			t.Fatalf("negative max tokens %d", req.maxTokens)
		}
		if req.includeUsage && !req.stream {
			t.Fatal("include_usage without stream")
		}
		tokens := countTokens(len(req.material))
		if tokens < 1 {
			t.Fatalf("%d tokens", tokens)
		}
		hashes := appendBlockHashes(nil, rootHash(0, ""), req.material, 16)
		if want := len(req.material) / 64; len(hashes) != want {
			t.Fatalf("%d block hashes, want %d", len(hashes), want)
		}
		maxTokens, finish, aerr := s.outputBudget(req.maxTokens, tokens)
		if aerr != nil {
			if aerr.status != http.StatusBadRequest {
				t.Fatalf("bad budget error %+v", aerr)
			}
			return
		}
		if maxTokens < 1 || tokens+maxTokens > s.cfg.MaxModelLen || (finish != finishStop && finish != finishLength) {
			t.Fatalf("budget %d tokens (%q) for a %d-token prompt", maxTokens, finish, tokens)
		}
	})
}

// FuzzParseMetricsFault checks that every accepted name round-trips.
func FuzzParseMetricsFault(f *testing.F) {
	for _, s := range []string{"ok", "garbage", "slow", "500", "nan", "inf", "negative", "OK", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fault, err := ParseMetricsFault(s)
		if err != nil {
			return
		}
		if fault.String() != s {
			t.Fatalf("%q parsed as %v", s, fault)
		}
	})
}
