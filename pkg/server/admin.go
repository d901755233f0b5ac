package server

import (
	"fmt"
	"net/http"

	"github.com/switchyard-ai/switchyard/pkg/config"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/server/admin"
	"github.com/switchyard-ai/switchyard/pkg/tokenauth"
)

// adminOffMessage is the 404 body of /admin/ while the admin API is off.
const adminOffMessage = "the admin API is off: give --admin-token-file (standalone mode) or run in Kubernetes mode with --metrics-endpoint-auth"

// withAdmin puts the admin API (pkg/server/admin) beside the metrics
// port's other paths (inner). Its guard: Config.AdminTokenFile's bearer
// token when set (standalone mode: 401 without it); otherwise
// Config.MetricsFilter, Kubernetes mode's TokenReview and
// SubjectAccessReview on the path (401, 403); with neither the API is
// off and /admin/ answers 404. The metrics token (--metrics-token-file)
// does not open the admin API.
func (s *Server) withAdmin(inner http.Handler) (http.Handler, error) {
	var guard func(http.Handler) http.Handler
	switch {
	case s.cfg.AdminTokenFile != "":
		g, err := tokenauth.New(s.cfg.AdminTokenFile, s.log.WithName("admin-token"))
		if err != nil {
			return nil, fmt.Errorf("--admin-token-file: %w", err)
		}
		s.adminTokens = g
		guard = admin.TokenGuard(g, s.log.WithName("admin"))
	case s.cfg.MetricsFilter != nil:
		guard = s.cfg.MetricsFilter
	}
	mux := http.NewServeMux()
	mux.Handle("/", inner)
	if guard == nil {
		mux.HandleFunc("/admin/", func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, adminOffMessage, http.StatusNotFound)
		})
		return mux, nil
	}
	mux.Handle("/admin/", guard(admin.Handler(adminSource{s}, nil)))
	return mux, nil
}

// adminSource is the server as the admin API sees it.
type adminSource struct{ s *Server }

func (a adminSource) Pool() admin.Pool {
	snap := a.s.store.Snapshot()
	return admin.Pool{Synced: snap.Synced, Endpoints: snap.All(), OutOfRotation: snap.OutOfRotation, Stale: snap.Stale}
}

// Plugins returns the instances a scheduling profile of the serving
// configuration references: the usage-weight-scorer and the
// prefix-aware-hash pickers the admin API reports on act only from a
// profile, so an instance declared but unused has nothing to report.
func (a adminSource) Plugins() map[string]scheduling.Plugin {
	if g := a.s.gen.Load(); g != nil {
		return referencedPlugins(g.loaded)
	}
	return nil
}

// referencedPlugins returns the plugin instances the profiles of l
// reference.
func referencedPlugins(l *config.Loaded) map[string]scheduling.Plugin {
	if l == nil || l.Config == nil {
		return nil
	}
	out := map[string]scheduling.Plugin{}
	for _, prof := range l.Config.SchedulingProfiles {
		for _, ref := range prof.Plugins {
			if p, ok := l.Plugins[ref.PluginRef]; ok {
				out[ref.PluginRef] = p
			}
		}
	}
	return out
}
