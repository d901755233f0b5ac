package metricsauth_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
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
