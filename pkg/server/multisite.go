package server

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/switchyard-ai/switchyard/pkg/multisite/gwhealth"
	"github.com/switchyard-ai/switchyard/pkg/multisite/learner"
	"github.com/switchyard-ai/switchyard/pkg/multisite/poller"
	"github.com/switchyard-ai/switchyard/pkg/multisite/sitestate"
	"github.com/switchyard-ai/switchyard/pkg/multisite/sitestore"
	"github.com/switchyard-ai/switchyard/pkg/multisite/topology"
	"github.com/switchyard-ai/switchyard/pkg/tlsutil"
)

// MultisiteConfig turns on the multi-site signals source: the site
// topology, the site store and the poller of the local site-relay. The
// flags of `epp serve` that set it are named in each field's comment.
type MultisiteConfig struct {
	// Site and Cluster name the local site (--site-name, --site-cluster).
	Site, Cluster string
	// TopologyFile is the watched site topology (--site-topology-file);
	// "" means the local site and the InferencePoolImport's clusters only.
	TopologyFile string
	// RelayURL is the local relay's signals endpoint
	// (--signals-relay-url, https).
	RelayURL string
	// PollInterval and PollTimeout tune the poller
	// (--signals-poll-interval, --signals-poll-timeout); 0 means the
	// poller's defaults (500 ms, 2 s).
	PollInterval, PollTimeout time.Duration
	// CertFile and KeyFile are the EPP's client certificate for the relay
	// (--signals-cert-file, --signals-key-file); CAFile the bundle the
	// relay's chain must verify against (--signals-ca-file), required with
	// a SPIFFE ID. All are reloaded when they change.
	CertFile, KeyFile, CAFile string
	// RelayIdentity is what the relay's certificate must prove
	// (--signals-relay-identity).
	RelayIdentity tlsutil.Identity
	// Imports, in Kubernetes mode, builds the InferencePoolImport watch
	// that reports the clusters exporting the pool to set (see
	// pkg/multisite/topology/poolimport); nil means none. Its Run error
	// stops the server, like the endpoint source's.
	Imports func(set func(clusters []string)) (Runner, error)
	// Health demotes remote sites whose gateways fail their health
	// checks (G-21, G-56: pkg/multisite/gwhealth); nil demotes none.
	Health learner.Health
	// LearnInterval is the health tick of the control step, which also
	// runs after every successful poll (so that silence is judged while
	// polls fail); 0 means DefaultLearnInterval.
	LearnInterval time.Duration
}

// DefaultLearnInterval is the control step's health tick.
const DefaultLearnInterval = 500 * time.Millisecond

// Runner is a background loop that may fail.
type Runner interface {
	Run(ctx context.Context) error
}

// Validate reports every problem, each naming its flag.
func (m *MultisiteConfig) Validate() error {
	var errs []error
	if err := (topology.Local{Site: m.Site, Cluster: m.Cluster}).Validate(); err != nil {
		errs = append(errs, err)
	}
	if _, err := poller.ValidateURL(m.RelayURL); err != nil {
		errs = append(errs, fmt.Errorf("--signals-relay-url: %w", err))
	}
	if m.PollInterval < 0 {
		errs = append(errs, fmt.Errorf("--signals-poll-interval: must be positive, got %s", m.PollInterval))
	}
	if m.LearnInterval < 0 {
		errs = append(errs, fmt.Errorf("learn interval: must be positive, got %s", m.LearnInterval))
	}
	if m.PollTimeout < 0 {
		errs = append(errs, fmt.Errorf("--signals-poll-timeout: must be positive, got %s", m.PollTimeout))
	}
	if m.CertFile == "" || m.KeyFile == "" {
		errs = append(errs, errors.New("--signals-cert-file and --signals-key-file: the EPP's client certificate for its relay is required (mutual TLS)"))
	}
	switch err := m.RelayIdentity.Validate(); {
	case err != nil:
		errs = append(errs, fmt.Errorf("--signals-relay-identity: %w", err))
	case m.RelayIdentity.SPIFFEID != "" && m.CAFile == "":
		errs = append(errs, errors.New("--signals-ca-file: required with a SPIFFE ID in --signals-relay-identity (any CA could issue that ID otherwise); pin the relay's certificate (sha256:...) to go without one"))
	}
	return errors.Join(errs...)
}

// multisite is the running multi-site signals source.
type multisite struct {
	cfg     MultisiteConfig
	topo    *topology.Watcher
	store   *sitestore.Store
	poller  *poller.Poller
	cert    *tlsutil.Reloader
	ca      *tlsutil.CABundle
	imports Runner

	// The control step (pkg/multisite/learner): run by learnLoop after
	// every successful poll (wake) and on every tick, with the
	// availability settings of the configuration in effect.
	learner  *learner.Learner
	wake     chan struct{}
	settings func() learner.Settings
	step     siteStep // sitestage.go
}

// newMultisite loads the topology file and the TLS files, so that their
// errors stop the start.
func (s *Server) newMultisite(cfg MultisiteConfig) (*multisite, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m := &multisite{cfg: cfg}
	log := s.log.WithName("multisite")
	var err error
	m.topo, err = topology.NewWatcher(topology.Options{
		Local:      topology.Local{Site: cfg.Site, Cluster: cfg.Cluster},
		File:       cfg.TopologyFile,
		Logger:     log.WithName("topology"),
		Registerer: s.reg,
	})
	if err != nil {
		return nil, err
	}
	if err := m.topo.Load(); err != nil {
		return nil, fmt.Errorf("--site-topology-file: %w", err)
	}
	m.store = sitestore.New(m.topo.Topology())
	m.topo.OnChange(m.store.SetTopology)
	if m.cert, err = tlsutil.NewFileReloader(cfg.CertFile, cfg.KeyFile, log.WithName("tls"), tlsutil.WithRegisterer(s.reg), tlsutil.WithPurpose(tlsutil.PurposeSignalsClient)); err != nil {
		return nil, fmt.Errorf("--signals-cert-file, --signals-key-file: %w", err)
	}
	var roots func() *x509.CertPool
	if cfg.CAFile != "" {
		if m.ca, err = tlsutil.NewCABundle(cfg.CAFile, log.WithName("tls"), tlsutil.WithRegisterer(s.reg), tlsutil.WithPurpose(tlsutil.PurposeSignalsClient)); err != nil {
			return nil, fmt.Errorf("--signals-ca-file: %w", err)
		}
		roots = m.ca.Pool
	}
	tlsCfg := tlsutil.ClientConfig("", m.cert.GetClientCertificate,
		tlsutil.VerifyPeer([]tlsutil.Identity{cfg.RelayIdentity}, roots, x509.ExtKeyUsageServerAuth))
	lm, err := learner.NewMetrics(s.reg)
	if err != nil {
		return nil, err
	}
	m.settings = func() learner.Settings { return s.gen.Load().loaded.AvailabilitySettings() }
	health := cfg.Health
	if health == nil {
		// The gateway prober of the site step (built below) demotes.
		health = proberHealth{m}
	}
	m.learner = learner.New(learner.Options{Settings: m.settings(), Health: health, Metrics: lm, Logger: log.WithName("learner")})
	m.wake = make(chan struct{}, 1)
	m.poller, err = poller.New(poller.Options{
		URL:        cfg.RelayURL,
		TLS:        tlsCfg,
		Interval:   cfg.PollInterval,
		Timeout:    cfg.PollTimeout,
		Store:      m.store,
		Topology:   m.topo.Topology,
		Registerer: s.reg,
		Logger:     log.WithName("poller"),
		OnIngest:   m.woken,
	})
	if err != nil {
		return nil, err
	}
	if cfg.Imports != nil {
		if m.imports, err = cfg.Imports(m.topo.SetExporting); err != nil {
			return nil, fmt.Errorf("InferencePoolImport watch: %w", err)
		}
	}
	if err := s.newSiteStep(m); err != nil {
		return nil, fmt.Errorf("site stage: %w", err)
	}
	return m, nil
}

// proberHealth is the learner's Health: the site step's gateway prober.
type proberHealth struct{ m *multisite }

func (h proberHealth) Demoted(site, gateway string) bool {
	return h.m.step.health != nil && h.m.step.health.Demoted(site, gateway)
}

// start runs the multi-site loops on the server's run group.
func (m *multisite) start(goLoop func(func(context.Context)), goErr func(name string, f func(context.Context) error)) {
	goLoop(m.topo.Run)
	goLoop(m.cert.Run)
	if m.ca != nil {
		goLoop(m.ca.Run)
	}
	if m.imports != nil {
		goErr("InferencePoolImport watch", m.imports.Run)
	}
	goLoop(m.poller.Run)
	goLoop(m.learnLoop)
	m.startSiteStep(goLoop)
}

// woken asks learnLoop for a control step (after a successful poll);
// it never blocks: a step already asked for covers this poll too.
func (m *multisite) woken() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// learnLoop runs the control step after every successful poll and on
// every tick until ctx ends; the first step at once, so the site stage
// has a snapshot from the start.
func (m *multisite) learnLoop(ctx context.Context) {
	every := m.cfg.LearnInterval
	if every <= 0 {
		every = DefaultLearnInterval
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		m.learnStep()
		select {
		case <-ctx.Done():
			return
		case <-m.wake:
		case <-t.C:
		}
	}
}

// learnStep runs one control step with the settings in effect.
func (m *multisite) learnStep() {
	m.learner.SetSettings(m.settings())
	m.learner.Step(time.Now(), m.topo.Topology(), m.store.Snapshot())
}

func (m *multisite) describe() []any {
	return []any{"site", m.cfg.Site, "siteCluster", m.cfg.Cluster, "signalsRelay", m.cfg.RelayURL, "siteTopologyFile", m.cfg.TopologyFile, "relayIdentity", m.cfg.RelayIdentity.String()}
}

// SiteSnapshot returns the site store's current snapshot (one atomic
// load), or nil when the multi-site signals source is off. Part 2's site
// stage reads it.
func (s *Server) SiteSnapshot() *sitestore.Snapshot {
	if s.multisite == nil {
		return nil
	}
	return s.multisite.store.Snapshot()
}

// SiteStates returns the holder of the control step's snapshots (the
// judged state of every site, sitestate.Snapshot), or nil when the
// multi-site signals source is off. The site stage reads it per request:
// Load is one atomic load, nil until the first step (which runs as Run
// starts).
func (s *Server) SiteStates() *sitestate.Holder {
	if s.multisite == nil {
		return nil
	}
	return s.multisite.learner.Holder()
}

// SiteTopology returns the current site topology (one atomic load), or
// nil when the multi-site signals source is off.
func (s *Server) SiteTopology() *topology.Topology {
	if s.multisite == nil {
		return nil
	}
	return s.multisite.topo.Topology()
}

// SignalsStatus returns the state of the poller of the local relay, and
// false when the multi-site signals source is off.
func (s *Server) SignalsStatus() (poller.Status, bool) {
	if s.multisite == nil {
		return poller.Status{}, false
	}
	return s.multisite.poller.Status(), true
}

// SitesState is the /debug/sites document.
type SitesState struct {
	// Enabled is false when the multi-site signals source is off (the
	// rest is then empty).
	Enabled bool `json:"enabled"`
	// Poller is the state of the poller of the local relay.
	Poller *poller.Status `json:"poller,omitempty"`
	// TopologyVersion and SnapshotVersion identify what is shown.
	TopologyVersion uint64 `json:"topologyVersion,omitempty"`
	SnapshotVersion uint64 `json:"snapshotVersion,omitempty"`
	// ReadAt and Date are the last successful read of the relay (the
	// EPP's clock) and its Date header (the relay's clock).
	ReadAt time.Time `json:"readAt,omitzero"`
	Date   time.Time `json:"date,omitzero"`
	// Sites are the sites of the topology with their latest rows.
	Sites []SiteState `json:"sites,omitempty"`
	// Learner is the control step's latest judgement of every site (the
	// snapshot the site stage reads) and the models shed; absent before
	// the first step.
	Learner *learner.Debug `json:"learner,omitempty"`
}

// SiteState is one site on /debug/sites. Ages are relative to the last
// Date (the relay's clock, which the stamps are on).
type SiteState struct {
	topology.Site
	Routable      bool            `json:"routable"`
	RoundEnd      time.Time       `json:"roundEnd,omitzero"`
	Rounds        *uint64         `json:"rounds,omitempty"`
	LastRowAge    string          `json:"lastRowAge,omitempty"`
	ProviderCount int             `json:"providerCount"`
	Providers     []ProviderState `json:"providers,omitempty"`
	// GatewayHealth is the remote gateway's probe state (sitestage.go);
	// absent for the local site and sites without a gateway.
	GatewayHealth *gwhealth.State `json:"gatewayHealth,omitempty"`
}

// ProviderState is one provider of a site on /debug/sites; a nil value
// was not received (in the current generation).
type ProviderState struct {
	Name       string  `json:"name"`
	Cluster    string  `json:"cluster"`
	Generation *uint64 `json:"generation,omitempty"`
	// PublishesLoad is the provider's grid_provider_publishes_load row
	// (G-47): 1, 0 (this site's provider without metricsConfig, or a
	// peer's provider the relay has received no load for), or absent
	// when no row arrived.
	PublishesLoad *float64 `json:"publishesLoad,omitempty"`
	Running       *float64 `json:"averageRunningRequests,omitempty"`
	Queue         *float64 `json:"averageQueueSize,omitempty"`
	Ready         *float64 `json:"readyEndpoints,omitempty"`
	FlowControl   *float64 `json:"flowControlQueueSize,omitempty"`
	KVCache       *float64 `json:"averageKVCacheUtilization,omitempty"`
	// LastRowAge is the age of the provider's newest row of any kind;
	// LoadAge that of its newest load reading (running, queue, ready,
	// flow control, KV cache), which is what freshness is judged on.
	LastRowAge      string `json:"lastRowAge,omitempty"`
	LoadAge         string `json:"loadAge,omitempty"`
	GenerationSince string `json:"generationAge,omitempty"`
}

// Sites reports the multi-site state: the topology, the poller and the
// latest rows of every site.
func (s *Server) Sites() SitesState {
	if s.multisite == nil {
		return SitesState{}
	}
	m := s.multisite
	top := m.topo.Topology()
	sn := m.store.Snapshot()
	st := m.poller.Status()
	out := SitesState{Enabled: true, Poller: &st, TopologyVersion: top.Version, SnapshotVersion: sn.Version, ReadAt: sn.ReadAt, Date: sn.Date,
		Learner: learner.DebugOf(m.learner.Holder().Load(), m.learner.Settings())}
	age := func(t time.Time) string {
		if t.IsZero() || sn.Date.IsZero() {
			return ""
		}
		return sn.Date.Sub(t).Round(time.Millisecond).String()
	}
	for _, ts := range top.Sites() {
		ss := SiteState{Site: ts, Routable: ts.Routable()}
		if site, ok := sn.Site(ts.Name); ok {
			ss.RoundEnd = site.RoundEnd
			if site.RoundsKnown {
				r := site.Rounds
				ss.Rounds = &r
			}
			ss.LastRowAge = age(site.Stamp)
			ss.ProviderCount = len(site.Providers)
			for i := range site.Providers {
				p := &site.Providers[i]
				ps := ProviderState{Name: p.Name, Cluster: p.Cluster, PublishesLoad: value(p.PublishesLoad), LastRowAge: age(p.LastHeard), LoadAge: age(p.Stamp)}
				if g, ok := p.GenerationValue(); ok {
					ps.Generation = &g
					ps.GenerationSince = age(p.GenerationSince)
				}
				ps.Running, ps.Queue, ps.Ready = value(p.Running), value(p.Queue), value(p.Ready)
				ps.FlowControl, ps.KVCache = value(p.FlowControl), value(p.KVCache)
				ss.Providers = append(ss.Providers, ps)
			}
		}
		out.Sites = append(out.Sites, ss)
	}
	m.addGatewayHealth(&out)
	return out
}

func value(r sitestore.Reading) *float64 {
	if !r.Known() {
		return nil
	}
	v := r.Value
	return &v
}

func (s *Server) serveSites(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(s.Sites())
}
