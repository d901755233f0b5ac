package decisions

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

func get(t *testing.T, h http.Handler, target string) (int, string) {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, target, nil))
	b, err := io.ReadAll(w.Result().Body)
	require.NoError(t, err)
	return w.Code, string(b)
}

func TestHandler(t *testing.T) {
	r := New(4)
	r.Add(rec("a", "llama", "10.0.0.1:8000"))
	r.Add(rec("b", "qwen", "10.0.0.2:8000"))
	h := Handler(r)

	code, body := get(t, h, "/debug/decisions?model=qwen")
	require.Equal(t, http.StatusOK, code, body)
	var doc Document
	require.NoError(t, json.Unmarshal([]byte(body), &doc))
	require.Equal(t, 4, doc.Size)
	require.Equal(t, uint64(2), doc.Added)
	require.Equal(t, []string{"b"}, ids(doc.Records))

	code, body = get(t, h, "/debug/decisions?request_id=zz")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `"records": []`)

	for _, tt := range []struct {
		name, query, msg string
	}{
		{"limit not a number", "limit=ten", `query parameter limit: must be an integer in [1, 4], got "ten"`},
		{"limit zero", "limit=0", `query parameter limit: must be an integer in [1, 4], got "0"`},
		{"limit above size", "limit=5", `got "5"`},
		{"unknown parameter", "requestId=a", `query parameter "requestId": unknown; use request_id, model, endpoint, limit`},
		{"repeated parameter", "model=a&model=b", `query parameter "model": given 2 times, at most once`},
		{"bad escape", "model=%zz", `query: invalid URL escape`},
		// Several bad parameters: the first in name order, every time.
		{"two unknown parameters", "zz=1&aa=2&limit=0", `query parameter "aa": unknown`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, body := get(t, h, "/debug/decisions?"+tt.query)
			require.Equal(t, http.StatusBadRequest, code)
			require.Contains(t, body, tt.msg)
		})
	}

	// Without a limit, the newest DefaultLimit records.
	big := New(DefaultLimit + 50)
	for range DefaultLimit + 20 {
		big.Add(rec("x", "m"))
	}
	for _, tt := range []struct {
		query string
		want  int
	}{{"", DefaultLimit}, {"?limit=120", 120}, {"?limit=3", 3}} {
		code, body := get(t, Handler(big), "/debug/decisions"+tt.query)
		require.Equal(t, http.StatusOK, code, body)
		var d Document
		require.NoError(t, json.Unmarshal([]byte(body), &d))
		require.Len(t, d.Records, tt.want, tt.query)
		require.Equal(t, uint64(DefaultLimit+19), d.Records[0].Seq, tt.query)
	}
	f, err := ParseFilter("", 4)
	require.NoError(t, err)
	require.Equal(t, 4, f.Limit, "the default limit is at most the ring's size")

	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/debug/decisions", nil))
	require.Equal(t, http.StatusMethodNotAllowed, w.Code)

	code, body = get(t, Handler(nil), "/debug/decisions")
	require.Equal(t, http.StatusNotFound, code)
	require.Contains(t, body, "--decision-buffer-size")
}
