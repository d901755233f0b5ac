package metricsauth_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/client-go/rest"

	"github.com/switchyard-ai/switchyard/pkg/server/metricsauth"
)

// Requests without a bearer token are refused before any API call; the
// full path (TokenReview, SubjectAccessReview) runs against a real API
// server in test/e2e's TestGIEHelmChartDropIn.
func TestNoTokenIsUnauthorized(t *testing.T) {
	filter, err := metricsauth.Filter(&rest.Config{Host: "https://127.0.0.1:1"}, logr.Discard())
	require.NoError(t, err)
	called := false
	h := filter(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { called = true }))
	for _, auth := range []string{"", "Basic dXNlcjpwYXNz", "Bearer"} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		h.ServeHTTP(rec, req)
		require.Equal(t, http.StatusUnauthorized, rec.Code, auth)
		require.Contains(t, rec.Header().Get("WWW-Authenticate"), "Bearer")
	}
	require.False(t, called)
}

// stubReviewer answers reviews from tables and counts calls.
type stubReviewer struct {
	users               map[string]string // token → user
	allowed             map[string]bool   // user+" "+path → allowed
	down                bool
	tokenCalls, sarCall int
}

func (s *stubReviewer) ReviewToken(_ context.Context, token string) (*authnv1.TokenReviewStatus, error) {
	s.tokenCalls++
	if s.down {
		return nil, errors.New("connection refused")
	}
	u, ok := s.users[token]
	return &authnv1.TokenReviewStatus{Authenticated: ok, User: authnv1.UserInfo{Username: u}}, nil
}

func (s *stubReviewer) ReviewAccess(_ context.Context, u authnv1.UserInfo, verb, path string) (*authzv1.SubjectAccessReviewStatus, error) {
	s.sarCall++
	if s.down {
		return nil, errors.New("connection refused")
	}
	return &authzv1.SubjectAccessReviewStatus{Allowed: verb == "get" && s.allowed[u.Username+" "+path]}, nil
}

func TestStatusCodesAndCache(t *testing.T) {
	r := &stubReviewer{users: map[string]string{"good": "prometheus", "other": "stranger"}, allowed: map[string]bool{"prometheus /metrics": true}}
	h := metricsauth.FilterWith(r, logr.Discard())(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	get := func(path, auth string) int {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("Authorization", auth)
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	tests := []struct {
		path, auth string
		want       int
	}{
		{"/metrics", "Bearer good", http.StatusOK},
		{"/metrics", "bearer good", http.StatusOK}, // the scheme is case-insensitive
		{"/metrics", "Bearer nope", http.StatusUnauthorized},
		{"/metrics", "Bearer other", http.StatusForbidden},
		{"/debug/pprof/", "Bearer good", http.StatusForbidden},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, get(tc.path, tc.auth), "%s %s", tc.path, tc.auth)
	}
	tokenCalls, sarCalls := r.tokenCalls, r.sarCall
	for range 5 {
		require.Equal(t, http.StatusOK, get("/metrics", "Bearer good"))
	}
	require.Equal(t, tokenCalls, r.tokenCalls, "accepted tokens are cached")
	require.Equal(t, sarCalls, r.sarCall, "allowed paths are cached")

	r.down = true
	require.Equal(t, http.StatusOK, get("/metrics", "Bearer good"), "cached answers survive an API-server outage")
	require.Equal(t, http.StatusServiceUnavailable, get("/metrics", "Bearer new-token"), "an unanswered review is not a rejection")
}
