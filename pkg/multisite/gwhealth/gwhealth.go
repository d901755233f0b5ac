package gwhealth

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
)

// Defaults (G-56: probed every 3 s, up after 2 passes).
const (
	DefaultInterval = 3 * time.Second
	DefaultTimeout  = time.Second
	DefaultRise     = 2
	DefaultFall     = 2
	// MaxTargets bounds the gateways probed (the topology's MaxSites).
	MaxTargets = 64
)

// Target is one remote site's gateway.
type Target struct {
	Site    string
	Gateway string // host:port
}

// Options configures a Prober.
type Options struct {
	// Targets returns the remote sites' gateways to probe, from the
	// topology (called once per round); required. Only these are probed;
	// the first MaxTargets by site name count.
	Targets func() []Target
	// Interval between rounds (DefaultInterval, 3 s).
	Interval time.Duration
	// Timeout of one probe (DefaultTimeout, 1 s; at most Interval).
	Timeout time.Duration
	// Rise is the consecutive passes that bring a gateway up (2); Fall the
	// consecutive failures that take an up gateway down (2).
	Rise, Fall int
	// Probe checks one gateway; nil means a TCP connect within the
	// timeout (the in-repo gateway speaks plain HTTP; a probe that
	// completes a mutual TLS handshake can replace it).
	Probe func(ctx context.Context, addr string) error
	// Registerer receives grid_route_gateway_up{site}; nil registers
	// nothing.
	Registerer prometheus.Registerer
	// Logger logs each transition (V(0) down, V(1) up, V(4) each probe).
	Logger logr.Logger
}

// State is one gateway's health.
type State struct {
	Gateway string `json:"gateway"`
	// Up is true after Rise consecutive passes, until Fall consecutive
	// failures. A gateway starts down (pending).
	Up bool `json:"up"`
	// Passes and Fails are the current run of consecutive results.
	Passes int `json:"passes"`
	Fails  int `json:"fails"`
	// Probed is false until the first probe ended.
	Probed bool `json:"probed"`
	// LastError is the last failure's message ("" after a pass).
	LastError string `json:"lastError,omitempty"`
	// Since is when Up last changed (or the target appeared).
	Since time.Time `json:"since"`
	// told is set once a pending gateway's Fall failures were logged at
	// V(0), so a target that never comes up is reported once.
	told bool
}

// View is an immutable set of gateway states by site.
type View struct {
	Sites map[string]State `json:"sites"`
}

// Prober probes the remote gateways of the topology in the background and
// publishes a View by atomic swap. Safe for concurrent use.
type Prober struct {
	opts Options
	view atomic.Pointer[View]
	up   *prometheus.GaugeVec
}

// New returns a Prober; Run starts it.
func New(opts Options) (*Prober, error) {
	if opts.Targets == nil {
		return nil, errors.New("gwhealth: Targets is required")
	}
	if opts.Interval < 0 || opts.Timeout < 0 || opts.Rise < 0 || opts.Fall < 0 {
		return nil, errors.New("gwhealth: Interval, Timeout, Rise and Fall must not be negative")
	}
	if opts.Interval == 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	opts.Timeout = min(opts.Timeout, opts.Interval)
	if opts.Rise == 0 {
		opts.Rise = DefaultRise
	}
	if opts.Fall == 0 {
		opts.Fall = DefaultFall
	}
	if opts.Probe == nil {
		opts.Probe = dialProbe
	}
	p := &Prober{opts: opts}
	p.view.Store(&View{Sites: map[string]State{}})
	p.up = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "grid_route_gateway_up",
		Help: "1 while a remote site's gateway passes its health probes (up after 2 passes, down after 2 failures), 0 while not; NaN once the site left the topology.",
	}, []string{"site"})
	if opts.Registerer != nil {
		if err := opts.Registerer.Register(p.up); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// dialProbe is a TCP connect check of a literal ip:port. A host name
// fails without a lookup: the data plane routes to literal addresses
// only (Envoy's ORIGINAL_DST, pkg/gateway), so a site whose gateway is a
// name could not take a forwarded request anyway (topology.Parse refuses
// such a gateway; a Target from elsewhere may still carry one).
func dialProbe(ctx context.Context, addr string) error {
	if _, err := netip.ParseAddrPort(addr); err != nil {
		return fmt.Errorf("gateway %q is not a literal ip:port (the data plane does not resolve names): %w", addr, err)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}

// View returns the current view (read-only).
func (p *Prober) View() *View { return p.view.Load() }

// Demoted reports whether the remote site's gateway at address gateway
// is not (yet) known to be up: true unless the latest round found that
// very address up (Rise passes in a row, not Fall failures since). So a
// site never probed (a new one, or before Run's first round) and a site
// whose gateway moved are demoted until the new address passed Rise
// probes (G-56): they take no traffic before any probe. A site without a
// gateway ("": the local one, or an exporting cluster with no address,
// which is not routable anyway) is never demoted. One atomic load and a
// map lookup; for the learner's control step.
func (p *Prober) Demoted(site, gateway string) bool {
	if gateway == "" {
		return false
	}
	st, ok := p.view.Load().Sites[site]
	return !ok || !st.Up || st.Gateway != gateway
}

// Run probes every Interval, the first round at once, until ctx ends.
// Each round probes every target concurrently and waits for all of them
// (each bounded by Timeout), so no probe outlives Run.
func (p *Prober) Run(ctx context.Context) {
	t := time.NewTicker(p.opts.Interval)
	defer t.Stop()
	for {
		p.Round(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Round runs one round of probes and publishes the new view (Run calls
// it; tests call it to step the state machine).
func (p *Prober) Round(ctx context.Context) {
	targets := slices.Clone(p.opts.Targets())
	slices.SortFunc(targets, func(a, b Target) int {
		if a.Site < b.Site {
			return -1
		}
		if a.Site > b.Site {
			return 1
		}
		return 0
	})
	targets = slices.CompactFunc(targets, func(a, b Target) bool { return a.Site == b.Site })
	if len(targets) > MaxTargets {
		targets = targets[:MaxTargets]
	}
	errs := make([]error, len(targets))
	var wg sync.WaitGroup
	for i, tg := range targets {
		if tg.Gateway == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
			defer cancel()
			errs[i] = p.opts.Probe(pctx, tg.Gateway)
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return // a cancelled round judges nothing
	}
	now := time.Now()
	old := p.view.Load().Sites
	next := make(map[string]State, len(targets))
	for i, tg := range targets {
		if tg.Gateway == "" {
			continue
		}
		st, ok := old[tg.Site]
		if !ok || st.Gateway != tg.Gateway {
			st = State{Gateway: tg.Gateway, Since: now} // new or moved: pending
		}
		st.Probed = true
		if err := errs[i]; err == nil {
			st.Passes++
			st.Fails = 0
			st.LastError = ""
			if !st.Up && st.Passes >= p.opts.Rise {
				st.Up, st.Since = true, now
				p.opts.Logger.V(1).Info("Remote gateway is up", "site", tg.Site, "gateway", tg.Gateway, "passes", st.Passes)
			}
		} else {
			st.Fails++
			st.Passes = 0
			st.LastError = err.Error()
			if st.Up && st.Fails >= p.opts.Fall {
				st.Up, st.Since, st.told = false, now, true
				p.opts.Logger.Info("Remote gateway is down: the site is demoted to a last resort", "site", tg.Site, "gateway", tg.Gateway, "error", err.Error())
			} else if !st.Up && !st.told && st.Fails >= p.opts.Fall {
				st.told = true
				p.opts.Logger.Info("Remote gateway has not come up: the site stays demoted to a last resort", "site", tg.Site, "gateway", tg.Gateway, "error", err.Error())
			}
			p.opts.Logger.V(4).Info("Gateway probe failed", "site", tg.Site, "gateway", tg.Gateway, "error", err.Error())
		}
		next[tg.Site] = st
		v := 0.0
		if st.Up {
			v = 1
		}
		p.up.WithLabelValues(tg.Site).Set(v)
	}
	for site := range old {
		if _, ok := next[site]; !ok {
			p.up.WithLabelValues(site).Set(math.NaN())
		}
	}
	p.view.Store(&View{Sites: next})
}
