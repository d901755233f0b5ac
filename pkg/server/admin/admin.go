package admin

import (
	"encoding/json"
	"net/http"
	"sort"
	"time"

	"github.com/go-logr/logr"

	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/prefixawarehash"
	"github.com/switchyard-ai/switchyard/pkg/plugins/scorer/usageweight"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/tokenauth"
)

// Pool is the endpoint set the admin API reports on.
type Pool struct {
	// Synced says whether the endpoint source has loaded the pool.
	Synced bool
	// Endpoints are every endpoint of the pool, eligible or not.
	Endpoints []*scheduling.Endpoint
	// OutOfRotation says why an endpoint takes no requests ("" when it
	// does): unhealthy, breaker_open, stale.
	OutOfRotation func(*scheduling.Endpoint) string
	// Stale says whether the endpoint's metrics are not fresh.
	Stale func(*scheduling.Endpoint) bool
}

// Source is what the host gives the admin API.
type Source interface {
	// Pool returns the latest published pool.
	Pool() Pool
	// Plugins returns the plugin instances the serving configuration's
	// profiles reference.
	Plugins() map[string]scheduling.Plugin
}

// Backend is one endpoint of /admin/backends.
type Backend struct {
	Name          string            `json:"name"`
	Key           string            `json:"key"`
	Address       string            `json:"address"`
	Namespace     string            `json:"namespace,omitempty"`
	Site          string            `json:"site,omitempty"`
	Labels        map[string]string `json:"labels,omitempty"`
	Models        []string          `json:"models,omitempty"`
	Weight        int               `json:"weight"`
	Internal      bool              `json:"internal,omitempty"`
	ProviderTPM   int               `json:"providerTpm,omitempty"`
	ProviderRPM   int               `json:"providerRpm,omitempty"`
	Routable      bool              `json:"routable"`
	OutOfRotation string            `json:"outOfRotation,omitempty"`
	Health        string            `json:"health"`
	Breaker       string            `json:"breaker"`
}

// Backends is the /admin/backends document.
type Backends struct {
	Synced   bool      `json:"synced"`
	Backends []Backend `json:"backends"`
}

// EngineStats are an endpoint's scraped engine metrics.
type EngineStats struct {
	// Measured is false when the endpoint was never scraped (or is not
	// scraped): the numbers are then absent, not zeros.
	Measured bool `json:"measured"`
	// Fresh is whether the metrics are within the staleness threshold.
	Fresh           bool       `json:"fresh"`
	UpdatedAt       *time.Time `json:"updatedAt,omitempty"`
	AgeSeconds      *float64   `json:"ageSeconds,omitempty"`
	WaitingQueue    *int       `json:"waitingQueue,omitempty"`
	RunningRequests *int       `json:"runningRequests,omitempty"`
	KVCacheUsage    *float64   `json:"kvCacheUsage,omitempty"`
	ActiveLoRAs     []string   `json:"activeLoras,omitempty"`
	MaxLoRAs        int        `json:"maxLoras,omitempty"`
	CacheBlockSize  int        `json:"cacheBlockSize,omitempty"`
	CacheNumBlocks  int        `json:"cacheNumBlocks,omitempty"`
}

// RequestStats are the EPP's own counts of an endpoint's requests.
type RequestStats struct {
	InFlight       int64   `json:"inFlight"`
	InFlightTokens int64   `json:"inFlightTokens"`
	Served         uint64  `json:"served"`
	Errors         uint64  `json:"errors"`
	TTFTSeconds    float64 `json:"ttftEwmaSeconds,omitempty"`
	E2ESeconds     float64 `json:"e2eEwmaSeconds,omitempty"`
}

// BackendStats is one endpoint of /admin/stats/backends and the
// /admin/backends/{name}/engine-stats document.
type BackendStats struct {
	Name        string        `json:"name"`
	Key         string        `json:"key"`
	Address     string        `json:"address"`
	Routable    bool          `json:"routable"`
	EngineStats EngineStats   `json:"engineStats"`
	Requests    *RequestStats `json:"requests,omitempty"`
	// Usage is the usage-weight term's view (the first
	// usage-weight-scorer of the serving configuration, by name); absent
	// when no configuration uses the term.
	Usage *usageweight.UsageStats `json:"usage,omitempty"`
	// Quota is the endpoint's rate-limit snapshot (quota-aware
	// observation); null when there is none or observation is off.
	Quota *usageweight.QuotaStats `json:"quota"`
}

// StatsBackends is the /admin/stats/backends document.
type StatsBackends struct {
	GeneratedAt time.Time      `json:"generatedAt"`
	Backends    []BackendStats `json:"backends"`
}

// PrefixRouting is the /admin/prefix-routing/stats document.
type PrefixRouting struct {
	Pickers []prefixawarehash.RoutingStats `json:"pickers"`
}

// Handler returns the admin routes over src. now defaults to time.Now.
func Handler(src Source, now func() time.Time) http.Handler {
	if now == nil {
		now = time.Now
	}
	h := &handler{src: src, now: now}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /admin/backends", h.backends)
	mux.HandleFunc("GET /admin/stats/backends", h.stats)
	mux.HandleFunc("GET /admin/backends/{name}/engine-stats", h.engineStats)
	mux.HandleFunc("GET /admin/prefix-routing/stats", h.prefix)
	mux.HandleFunc("/admin/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, "the admin API is read-only: use GET")
			return
		}
		writeError(w, http.StatusNotFound, "no admin endpoint "+r.URL.Path+": GET /admin/backends, /admin/stats/backends, /admin/backends/{name}/engine-stats or /admin/prefix-routing/stats")
	})
	return mux
}

type handler struct {
	src Source
	now func() time.Time
}

func (h *handler) backends(w http.ResponseWriter, _ *http.Request) {
	pool := h.src.Pool()
	now := h.now()
	out := Backends{Synced: pool.Synced, Backends: []Backend{}}
	for _, e := range pool.Endpoints {
		md := e.Metadata()
		b := Backend{Name: e.Name(), Key: e.Key(), Address: e.HostPort(), Namespace: md.Namespace, Site: md.Site, Labels: md.Labels,
			Weight: 1, Health: "unknown", Breaker: "closed"}
		if pool.OutOfRotation != nil {
			b.OutOfRotation = pool.OutOfRotation(e)
		}
		b.Routable = b.OutOfRotation == ""
		if wt, ok := scheduling.WeightKey.Get(e); ok {
			b.Weight = wt
		}
		b.Internal, _ = scheduling.InternalKey.Get(e)
		if ms, ok := scheduling.ModelsKey.Get(e); ok && ms != nil {
			for _, me := range ms.Entries {
				b.Models = append(b.Models, me.Name)
			}
		}
		b.ProviderTPM, _ = scheduling.NewAttributeKey[int](usageweight.ProviderTPMAttribute).Get(e)
		b.ProviderRPM, _ = scheduling.NewAttributeKey[int](usageweight.ProviderRPMAttribute).Get(e)
		if hl, ok := scheduling.HealthKey.Get(e); ok && hl != nil {
			b.Health = probeName(hl.Probe())
			b.Breaker = breakerName(hl.Breaker(now))
		}
		out.Backends = append(out.Backends, b)
	}
	writeJSON(w, out)
}

// usageScorer returns the serving configuration's first
// usage-weight-scorer by name, nil when there is none.
func (h *handler) usageScorer() *usageweight.Scorer {
	plugins := h.src.Plugins()
	names := make([]string, 0, len(plugins))
	for n, p := range plugins {
		if _, ok := p.(*usageweight.Scorer); ok {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return nil
	}
	sort.Strings(names)
	return plugins[names[0]].(*usageweight.Scorer)
}

func (h *handler) backendStats(pool Pool, e *scheduling.Endpoint, us *usageweight.Scorer, now time.Time) BackendStats {
	b := BackendStats{Name: e.Name(), Key: e.Key(), Address: e.HostPort()}
	if pool.OutOfRotation != nil {
		b.Routable = pool.OutOfRotation(e) == ""
	} else {
		b.Routable = true
	}
	m := e.Metrics()
	if !m.UpdateTime.IsZero() {
		es := &b.EngineStats
		es.Measured = true
		es.Fresh = pool.Stale == nil || !pool.Stale(e)
		t := m.UpdateTime
		age := now.Sub(t).Seconds()
		es.UpdatedAt, es.AgeSeconds = &t, &age
		w, r, kv := m.WaitingQueueSize, m.RunningRequestsSize, m.KVCacheUsagePercent
		es.WaitingQueue, es.RunningRequests, es.KVCacheUsage = &w, &r, &kv
		for name := range m.ActiveModels {
			es.ActiveLoRAs = append(es.ActiveLoRAs, name)
		}
		sort.Strings(es.ActiveLoRAs)
		es.MaxLoRAs, es.CacheBlockSize, es.CacheNumBlocks = m.MaxActiveModels, m.CacheBlockSize, m.CacheNumBlocks
	}
	if l, ok := scheduling.LoadKey.Get(e); ok && l != nil {
		b.Requests = &RequestStats{InFlight: l.InFlight(), InFlightTokens: l.InFlightTokens(), Served: l.Served(), Errors: l.Errors(),
			TTFTSeconds: l.TTFT().Seconds(), E2ESeconds: l.E2E().Seconds()}
	}
	if us != nil {
		u := us.EndpointStats(e)
		b.Usage = &u
		b.Quota = u.Quota
	}
	return b
}

func (h *handler) stats(w http.ResponseWriter, _ *http.Request) {
	pool := h.src.Pool()
	now := h.now()
	us := h.usageScorer()
	out := StatsBackends{GeneratedAt: now, Backends: []BackendStats{}}
	for _, e := range pool.Endpoints {
		out.Backends = append(out.Backends, h.backendStats(pool, e, us, now))
	}
	writeJSON(w, out)
}

// engineStats answers for the endpoint whose name (or key, URL-escaped)
// is {name}; 404 when none, 409 when a name is shared by several sites'
// endpoints (use the key).
func (h *handler) engineStats(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	pool := h.src.Pool()
	var found []*scheduling.Endpoint
	for _, e := range pool.Endpoints {
		if e.Key() == name {
			found = []*scheduling.Endpoint{e}
			break
		}
		if e.Name() == name {
			found = append(found, e)
		}
	}
	switch len(found) {
	case 0:
		writeError(w, http.StatusNotFound, "no endpoint named "+name)
		return
	case 1:
	default:
		writeError(w, http.StatusConflict, "several endpoints are named "+name+": use the endpoint's key (URL-escaped)")
		return
	}
	writeJSON(w, h.backendStats(pool, found[0], h.usageScorer(), h.now()))
}

func (h *handler) prefix(w http.ResponseWriter, _ *http.Request) {
	plugins := h.src.Plugins()
	out := PrefixRouting{Pickers: []prefixawarehash.RoutingStats{}}
	for _, p := range plugins {
		if pk, ok := p.(*prefixawarehash.Picker); ok {
			out.Pickers = append(out.Pickers, pk.RoutingStats())
		}
	}
	sort.Slice(out.Pickers, func(i, j int) bool { return out.Pickers[i].Picker < out.Pickers[j].Picker })
	writeJSON(w, out)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// TokenGuard guards h with the bearer token of g (--admin-token-file):
// 401 with a WWW-Authenticate challenge without it. The token is compared
// by its SHA-256 in constant time (tokenauth.Guard.Check) and never
// logged; g's Run reloads the file when it changes.
func TokenGuard(g *tokenauth.Guard, log logr.Logger) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if g.Check(r) {
				next.ServeHTTP(w, r)
				return
			}
			present := r.Header.Get("Authorization") != ""
			log.V(1).Info("Admin API request refused: no valid bearer token", "path", r.URL.Path, "remote", r.RemoteAddr, "tokenPresent", present)
			challenge := `Bearer realm="switchyard-admin"`
			if present {
				challenge += `, error="invalid_token"`
			}
			w.Header().Set("WWW-Authenticate", challenge)
			writeError(w, http.StatusUnauthorized, "unauthorized: send the token of --admin-token-file (Authorization: Bearer ...)")
		})
	}
}

func probeName(p scheduling.ProbeState) string {
	switch p {
	case scheduling.ProbeHealthy:
		return "healthy"
	case scheduling.ProbeUnhealthy:
		return "unhealthy"
	}
	return "unknown"
}

func breakerName(b scheduling.BreakerState) string {
	switch b {
	case scheduling.BreakerOpen:
		return "open"
	case scheduling.BreakerHalfOpen:
		return "half_open"
	}
	return "closed"
}
