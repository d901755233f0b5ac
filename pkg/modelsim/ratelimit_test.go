package modelsim

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func doReq(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestRateLimitHeaders: no headers by default; the budget set with the
// runtime control is reported on generation responses, changed and
// turned off again.
func TestRateLimitHeaders(t *testing.T) {
	s, url := startServer(t, httpConfig())
	const body = `{"prompt":"hi","max_tokens":2}`
	resp, _ := post(t, t.Context(), url+"/v1/completions", body)
	assert.Empty(t, resp.Header.Get(HeaderRemainingRequests))

	code, out := doReq(t, http.MethodPut, url+RateLimitPath, `{"limitRequests":100,"remainingRequests":2,"limitTokens":-1,"remainingTokens":-1}`)
	require.Equal(t, http.StatusOK, code, out)
	assert.JSONEq(t, `{"limitRequests":100,"remainingRequests":2,"limitTokens":-1,"remainingTokens":-1}`, out)
	resp, _ = post(t, t.Context(), url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}`)
	assert.Equal(t, "100", resp.Header.Get(HeaderLimitRequests))
	assert.Equal(t, "2", resp.Header.Get(HeaderRemainingRequests))
	assert.Empty(t, resp.Header.Get(HeaderLimitTokens))

	s.SetRateLimit(&RateLimit{LimitRequests: 100, RemainingRequests: 100, LimitTokens: 1000, RemainingTokens: 10})
	resp, _ = post(t, t.Context(), url+"/v1/completions", body)
	assert.Equal(t, "100", resp.Header.Get(HeaderRemainingRequests))
	assert.Equal(t, "10", resp.Header.Get(HeaderRemainingTokens))
	r2, _ := http.Get(url + "/health")
	r2.Body.Close()
	assert.Empty(t, r2.Header.Get(HeaderRemainingRequests), "only generation responses")

	code, out = doReq(t, http.MethodDelete, url+RateLimitPath, "")
	require.Equal(t, http.StatusOK, code)
	assert.Equal(t, "null\n", out)
	resp, _ = post(t, t.Context(), url+"/v1/completions", body)
	assert.Empty(t, resp.Header.Get(HeaderRemainingRequests))

	for _, bad := range []string{`{"limitRequests":"x"}`, `{"limit":1}`, `{} {}`, `{"limitTokens":1125899906842625}`} {
		code, out = doReq(t, http.MethodPut, url+RateLimitPath, bad)
		assert.Equal(t, http.StatusBadRequest, code, bad+": "+out)
	}
	code, _ = doReq(t, http.MethodPost, url+RateLimitPath, "{}")
	assert.Equal(t, http.StatusMethodNotAllowed, code)
	assert.Nil(t, s.RateLimitBudget())
}

func TestParseRateLimit(t *testing.T) {
	rl, err := ParseRateLimit("requests=2/100, tokens=90000/100000")
	require.NoError(t, err)
	assert.Equal(t, RateLimit{LimitRequests: 100, RemainingRequests: 2, LimitTokens: 100000, RemainingTokens: 90000}, rl)
	rl, err = ParseRateLimit("tokens=1/2")
	require.NoError(t, err)
	assert.Equal(t, RateLimit{-1, -1, 2, 1}, rl)
	for _, bad := range []string{"", "requests", "requests=1", "requests=a/2", "requests=-1/2", "bytes=1/2", "requests=1/2,requests=1/2"} {
		_, err := ParseRateLimit(bad)
		assert.Error(t, err, bad)
	}
}

// FuzzParseRateLimit: any flag value gives a valid budget or an error,
// never a panic; an accepted budget has both values of an axis or neither.
func FuzzParseRateLimit(f *testing.F) {
	for _, s := range []string{"requests=2/100", "tokens=1/2,requests=3/4", "", "requests=-1/2", "requests=1/2,requests=1/2", "tokens= 9 / 10 ,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		rl, err := ParseRateLimit(s)
		if err != nil {
			return
		}
		if rl.Validate() != nil {
			t.Fatalf("accepted an invalid budget %+v", rl)
		}
		if (rl.LimitRequests < 0) != (rl.RemainingRequests < 0) || (rl.LimitTokens < 0) != (rl.RemainingTokens < 0) {
			t.Fatalf("half an axis: %+v", rl)
		}
		if rl.LimitRequests < 0 && rl.LimitTokens < 0 {
			t.Fatalf("no axis: %+v", rl)
		}
	})
}
