package scheduling

import (
	"context"
	"hash/fnv"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
)

// Handle gives plugin factories what they need from their host.
type Handle interface {
	// Context lives as long as the plugin instance: the configuration
	// loader cancels it when the instance is dropped (see Lifecycle in the
	// package documentation). Background work a plugin starts must stop
	// when it is done.
	Context() context.Context
	// Logger is the plugin's logger.
	Logger() logr.Logger
	// Registerer is where plugins register their metrics.
	Registerer() prometheus.Registerer
	// Rand returns a random source for the named plugin instance, safe for
	// concurrent use, deterministic when the host was given a seed.
	Rand(pluginName string) *rand.Rand
	// Plugin returns an instance constructed earlier from the same
	// configuration, by name. It is meant for factories: once the
	// configuration is built, the loader seals its handle and Plugin finds
	// nothing.
	Plugin(name string) (Plugin, bool)
}

// HandleOptions configures NewHandle.
type HandleOptions struct {
	// Context defaults to context.Background().
	Context context.Context
	// Logger defaults to logr.Discard().
	Logger logr.Logger
	// Registerer defaults to a fresh private registry.
	Registerer prometheus.Registerer
	// Seed makes plugin randomness reproducible; 0 draws a random seed.
	Seed uint64
	// APIVersion is the apiVersion of the configuration the plugins come
	// from, for plugins whose GIE and llm-d versions behave differently.
	APIVersion string
	// ScrapeInterval is the host's model-server metrics scrape interval
	// (epp serve's --refresh-metrics-interval), for plugins that judge
	// the age of scraped metrics; 0 when the host does not say.
	ScrapeInterval time.Duration
}

// HostSettings is implemented by handles that pass on host settings
// plugins adapt to (BasicHandle and the handles built on it do).
type HostSettings interface {
	// ScrapeInterval is HandleOptions.ScrapeInterval: the host's metrics
	// scrape interval, 0 when unknown.
	ScrapeInterval() time.Duration
}

// ScrapeIntervalOf returns the host's metrics scrape interval as h knows
// it (HostSettings), 0 when it does not.
func ScrapeIntervalOf(h Handle) time.Duration {
	if hs, ok := h.(HostSettings); ok {
		return hs.ScrapeInterval()
	}
	return 0
}

// APIVersionLLMD is the apiVersion of llm-d router configurations.
const APIVersionLLMD = "llm-d.ai/v1alpha1"

// ConfigDialect is implemented by handles that know the apiVersion of the
// configuration being loaded.
type ConfigDialect interface {
	APIVersion() string
}

// BasicHandle is the Handle the configuration loader gives plugins.
type BasicHandle struct {
	ctx     context.Context
	logger  logr.Logger
	reg     prometheus.Registerer
	seed    uint64
	apiVer  string
	scrape  time.Duration
	mu      sync.RWMutex
	plugins map[string]Plugin
	params  map[string]any
}

// NewHandle returns a Handle.
func NewHandle(opts HandleOptions) *BasicHandle {
	h := &BasicHandle{ctx: opts.Context, logger: opts.Logger, reg: opts.Registerer, seed: opts.Seed, apiVer: opts.APIVersion, scrape: max(opts.ScrapeInterval, 0), plugins: map[string]Plugin{}, params: map[string]any{}}
	if h.ctx == nil {
		h.ctx = context.Background()
	}
	if h.logger.GetSink() == nil {
		h.logger = logr.Discard()
	}
	if h.reg == nil {
		h.reg = prometheus.NewRegistry()
	}
	if h.seed == 0 {
		h.seed = rand.Uint64() | 1
	}
	return h
}

// Context implements Handle.
func (h *BasicHandle) Context() context.Context { return h.ctx }

// Logger implements Handle.
func (h *BasicHandle) Logger() logr.Logger { return h.logger }

// Registerer implements Handle.
func (h *BasicHandle) Registerer() prometheus.Registerer { return h.reg }

// Rand implements Handle. Each plugin name gets its own stream.
func (h *BasicHandle) Rand(pluginName string) *rand.Rand {
	f := fnv.New64a()
	_, _ = f.Write([]byte(pluginName))
	return NewRand(h.seed ^ f.Sum64())
}

// Plugin implements Handle.
func (h *BasicHandle) Plugin(name string) (Plugin, bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	p, ok := h.plugins[name]
	return p, ok
}

// AddPlugin records a constructed instance so later factories can find
// it. It does nothing once the handle is sealed.
func (h *BasicHandle) AddPlugin(name string, p Plugin) {
	h.mu.Lock()
	if h.plugins != nil {
		h.plugins[name] = p
	}
	h.mu.Unlock()
}

// RecordParams implements ParamsRecorder.
func (h *BasicHandle) RecordParams(name string, params any) {
	h.mu.Lock()
	h.params[name] = params
	h.mu.Unlock()
}

// Params returns the effective parameters recorded for an instance.
func (h *BasicHandle) Params(name string) (any, bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	p, ok := h.params[name]
	return p, ok
}

// APIVersion implements ConfigDialect.
func (h *BasicHandle) APIVersion() string { return h.apiVer }

// ScrapeInterval implements HostSettings.
func (h *BasicHandle) ScrapeInterval() time.Duration { return h.scrape }
