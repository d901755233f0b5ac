package tokenauth

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
)

const goodToken = "0123456789abcdef0123456789abcdef"

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, []byte(content), 0o600))
	require.NoError(t, os.Rename(tmp, path)) // atomic, as a Secret update is
}

func status(t *testing.T, h http.Handler, auth string) (int, http.Header) {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/debug/endpoints", nil)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Header()
}

func TestWrap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	writeFile(t, path, goodToken+"\n")
	g, err := New(path, logr.Discard())
	require.NoError(t, err)
	h := g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	for _, tc := range []struct {
		name, auth string
		want       int
		challenge  string
	}{
		{"no header", "", http.StatusUnauthorized, `Bearer realm="switchyard-metrics"`},
		{"basic scheme", "Basic " + goodToken, http.StatusUnauthorized, `Bearer realm="switchyard-metrics"`},
		{"empty bearer", "Bearer ", http.StatusUnauthorized, `Bearer realm="switchyard-metrics"`},
		{"wrong token", "Bearer " + strings.Repeat("x", len(goodToken)), http.StatusUnauthorized, `Bearer realm="switchyard-metrics", error="invalid_token"`},
		{"prefix of the token", "Bearer " + goodToken[:20], http.StatusUnauthorized, `Bearer realm="switchyard-metrics", error="invalid_token"`},
		{"token with a suffix", "Bearer " + goodToken + "x", http.StatusUnauthorized, `Bearer realm="switchyard-metrics", error="invalid_token"`},
		{"good token", "Bearer " + goodToken, http.StatusTeapot, ""},
		{"scheme case-insensitive", "bearer " + goodToken, http.StatusTeapot, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, hdr := status(t, h, tc.auth)
			require.Equal(t, tc.want, code)
			require.Equal(t, tc.challenge, hdr.Get("WWW-Authenticate"))
		})
	}
}

func TestReadToken(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, content, err string
	}{
		{"trailing newline", goodToken + "\n", ""},
		{"surrounding blanks", "  " + goodToken + " \r\n", ""},
		{"empty", "", "the token is 0 bytes long; use at least 16"},
		{"short", "abc", "the token is 3 bytes long"},
		{"inner space", "0123456789 abcdef0123", `byte 10 of the token is ' '`},
		{"control byte", "0123456789\x01abcdef0123", `byte 10 of the token is '\x01'`},
		{"too large", strings.Repeat("a", MaxTokenBytes+1), "larger than 4096 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			require.NoError(t, os.WriteFile(p, []byte(tc.content), 0o600))
			tok, _, err := ReadToken(p)
			if tc.err == "" {
				require.NoError(t, err)
				require.Equal(t, goodToken, string(tok))
				return
			}
			require.ErrorContains(t, err, tc.err)
		})
	}
	_, _, err := ReadToken(filepath.Join(dir, "missing"))
	require.ErrorContains(t, err, "no such file")
	_, err = New(filepath.Join(dir, "missing"), logr.Discard())
	require.Error(t, err)
}

// TestRotation follows the file with Run: a new token replaces the old
// one; a broken file keeps the last good token.
func TestRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	writeFile(t, path, goodToken)
	g, err := New(path, logr.Discard())
	require.NoError(t, err)
	var wg sync.WaitGroup
	runCtx, stop := context.WithCancel(t.Context())
	wg.Go(func() { g.Run(runCtx) })
	defer func() { stop(); wg.Wait() }()
	h := g.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))

	next := strings.Repeat("n", 32)
	writeFile(t, path, next+"\n")
	require.Eventually(t, func() bool {
		c, _ := status(t, h, "Bearer "+next)
		return c == http.StatusOK
	}, 5*time.Second, 10*time.Millisecond, "the rotated token is accepted")
	c, _ := status(t, h, "Bearer "+goodToken)
	require.Equal(t, http.StatusUnauthorized, c, "the old token is refused after rotation")

	writeFile(t, path, "short")
	time.Sleep(400 * time.Millisecond) // > debounce: the broken file has been read
	c, _ = status(t, h, "Bearer "+next)
	require.Equal(t, http.StatusOK, c, "a broken file keeps the last good token")
	c, _ = status(t, h, "Bearer short")
	require.Equal(t, http.StatusUnauthorized, c)
}
