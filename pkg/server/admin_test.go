package server

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"

	"github.com/switchyard-ai/switchyard/pkg/config"
	"github.com/switchyard-ai/switchyard/pkg/datastore"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// TestC51_AdminGuards: the admin API is off (404) without
// --admin-token-file or the Kubernetes filter; with the token file it
// answers 401 without the token and 200 with it; in Kubernetes mode the
// metrics filter's 401/403 apply; other metrics-port paths are untouched.
func TestC51_AdminGuards(t *testing.T) {
	store := datastore.New(datastore.Options{})
	if err := store.Replace([]datastore.EndpointSpec{{Name: "a", Address: "127.0.0.1", Port: 8000, ProviderRPM: 5}}); err != nil {
		t.Fatal(err)
	}
	inner := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "inner") })
	serve := func(t *testing.T, cfg Config) *httptest.Server {
		t.Helper()
		s := &Server{cfg: cfg, log: logr.Discard(), store: store}
		h, err := s.withAdmin(inner)
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		return srv
	}
	get := func(t *testing.T, url, token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	t.Run("off", func(t *testing.T) {
		srv := serve(t, Config{})
		if code, body := get(t, srv.URL+"/admin/backends", ""); code != http.StatusNotFound || !strings.Contains(body, "--admin-token-file") {
			t.Errorf("got %d %q", code, body)
		}
		if code, body := get(t, srv.URL+"/metrics", ""); code != http.StatusOK || body != "inner" {
			t.Errorf("other paths: %d %q", code, body)
		}
	})
	t.Run("token file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "admin-token")
		const tok = "admin-token-0123456789abcdef"
		if err := os.WriteFile(path, []byte(tok), 0o600); err != nil {
			t.Fatal(err)
		}
		srv := serve(t, Config{AdminTokenFile: path})
		if code, _ := get(t, srv.URL+"/admin/backends", ""); code != http.StatusUnauthorized {
			t.Errorf("without token: %d", code)
		}
		code, body := get(t, srv.URL+"/admin/backends", tok)
		if code != http.StatusOK || !strings.Contains(body, `"providerRpm": 5`) {
			t.Errorf("with token: %d %s", code, body)
		}
		if code, body := get(t, srv.URL+"/metrics", ""); code != http.StatusOK || body != "inner" {
			t.Errorf("other paths: %d %q", code, body)
		}
	})
	t.Run("bad token file", func(t *testing.T) {
		s := &Server{cfg: Config{AdminTokenFile: filepath.Join(t.TempDir(), "missing")}, log: logr.Discard(), store: store}
		if _, err := s.withAdmin(inner); err == nil || !strings.Contains(err.Error(), "--admin-token-file") {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("kubernetes filter", func(t *testing.T) {
		// A stand-in for metricsauth's TokenReview/SubjectAccessReview.
		filter := func(next http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.Header.Get("Authorization") {
				case "":
					http.Error(w, "no token", http.StatusUnauthorized)
				case "Bearer viewer-without-admin":
					http.Error(w, "forbidden", http.StatusForbidden)
				default:
					next.ServeHTTP(w, r)
				}
			})
		}
		srv := serve(t, Config{MetricsFilter: filter})
		if code, _ := get(t, srv.URL+"/admin/stats/backends", ""); code != http.StatusUnauthorized {
			t.Errorf("without token: %d", code)
		}
		if code, _ := get(t, srv.URL+"/admin/stats/backends", "viewer-without-admin"); code != http.StatusForbidden {
			t.Errorf("not allowed: %d", code)
		}
		if code, body := get(t, srv.URL+"/admin/stats/backends", "admin"); code != http.StatusOK || !strings.Contains(body, `"backends"`) {
			t.Errorf("allowed: %d %s", code, body)
		}
	})
}

type namedPlugin string

func (n namedPlugin) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: "t", Name: string(n)}
}

// TestAdminReportsOnlyReferencedPlugins: an instance declared but used by
// no profile (a usage-weight-scorer left in the plugins list) is not
// reported by the admin API.
func TestAdminReportsOnlyReferencedPlugins(t *testing.T) {
	l := &config.Loaded{
		Config: &config.EndpointPickerConfig{SchedulingProfiles: []config.SchedulingProfile{
			{Name: "a", Plugins: []config.SchedulingPlugin{{PluginRef: "used"}, {PluginRef: "picker"}}},
			{Name: "b", Plugins: []config.SchedulingPlugin{{PluginRef: "used"}}},
		}},
		Plugins: map[string]scheduling.Plugin{"used": namedPlugin("used"), "picker": namedPlugin("picker"), "unused": namedPlugin("unused")},
	}
	got := referencedPlugins(l)
	if len(got) != 2 || got["used"] == nil || got["picker"] == nil || got["unused"] != nil {
		t.Fatalf("referenced plugins = %v, want used and picker only", got)
	}
	if referencedPlugins(nil) != nil || referencedPlugins(&config.Loaded{}) != nil {
		t.Fatal("no configuration: no plugins")
	}
}
