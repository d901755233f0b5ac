package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/go-logr/logr"

	"github.com/switchyard-ai/switchyard/pkg/gateway"
	"github.com/switchyard-ai/switchyard/pkg/modelsim"
	"github.com/switchyard-ai/switchyard/pkg/multisite/learner"
	"github.com/switchyard-ai/switchyard/pkg/multisite/relay"
	"github.com/switchyard-ai/switchyard/pkg/multisite/sitestate"
	"github.com/switchyard-ai/switchyard/pkg/multisite/sitestore"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/server"
	"github.com/switchyard-ai/switchyard/pkg/tlsutil"
)

// `epp demo --sites N`: N sites on loopback, each with simulated model
// servers, an EPP, a site-relay and a gateway, the relays exchanging load
// over mutual TLS with certificates made at start. Site a's gateway is the
// entry (--listen, --traffic); its EPP chooses a site for every request
// and a remote site's gateway serves it. Peers reach a site's relay
// through a link proxy that --cut-site (or the c key) breaks, so the site
// goes silent in the other sites' eyes and returns when the link heals.

const (
	// MaxDemoSites bounds --sites.
	maxDemoSites = 8
	// The demo's relay timings: a scrape every 500 ms, a peer poll round
	// every second (the freshness window follows them).
	demoScrapeInterval = 500 * time.Millisecond
	demoPeerPoll       = time.Second
	demoRelayTimeout   = 500 * time.Millisecond
	demoEPPPoll        = 500 * time.Millisecond
)

// Site i has demoSiteEndpoints[i%3] simulated servers, each with
// demoSiteMaxRunning[i%3] running sequences at most: three sites of
// different capacities (a: 2×8, b: 3×16, c: 1×4) for the learner to find.
var (
	demoSiteEndpoints  = [...]int{2, 3, 1}
	demoSiteMaxRunning = [...]int{8, 16, 4}
)

// demoSite is one running site of the demo.
type demoSite struct {
	name      string
	sims      []*simServer
	srv       *server.Server
	relay     *relay.Relay
	link      *demoLink
	gwLis     net.Listener
	gwSrv     *http.Server
	gw        *gateway.Gateway
	relayAddr string // the reserved signals address
}

func (s *demoSite) gatewayURL() string { return "http://" + s.gwLis.Addr().String() }

// siteName is the name of site i: a, b, c, ...
func siteName(i int) string { return string(rune('a' + i)) }

// demoLearned returns the control step's latest snapshot of srv (what the
// site stage reads), or nil before the first step.
func demoLearned(srv *server.Server) *sitestate.Snapshot {
	h := srv.SiteStates()
	if h == nil {
		return nil
	}
	return h.Load()
}

func demoSites(ctx context.Context, f demoFlags, stdout, stderr io.Writer) error {
	logger, err := f.log.logger(stderr)
	if err != nil {
		return err
	}
	// On return (an error while starting, too): the sites' gateways and
	// servers close, ctx ends (the EPPs, relays, traffic and table stop),
	// then every goroutine is waited for, and the temporary directory
	// (certificates, topologies) goes.
	dir, err := os.MkdirTemp("", "switchyard-demo-sites-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	ca, err := newDemoCA()
	if err != nil {
		return err
	}
	caFile, err := ca.writeCA(dir)
	if err != nil {
		return err
	}

	sites := make([]*demoSite, f.sites)
	defer func() {
		// Stop in the order requests flow: gateways, then sims (the EPPs
		// and relays stop with ctx).
		for _, s := range sites {
			if s == nil {
				continue
			}
			if s.gwSrv != nil {
				sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
				_ = s.gwSrv.Shutdown(sctx)
				c()
			} else if s.gwLis != nil {
				_ = s.gwLis.Close()
			}
			if s.gw != nil {
				s.gw.Close()
			}
			if s.link != nil {
				s.link.close()
			}
			for _, sim := range s.sims {
				sim.close()
			}
		}
	}()

	// 1. Every site's listeners first, so that every topology and relay
	// configuration can name them: the gateway (site a's on --listen),
	// the link proxy peers poll through, and the relay's own address.
	for i := range sites {
		s := &demoSite{name: siteName(i)}
		sites[i] = s
		addr := "127.0.0.1:0"
		if i == 0 {
			addr = f.listen
		}
		if s.gwLis, err = net.Listen("tcp", addr); err != nil {
			if i == 0 {
				return fmt.Errorf("gateway: %w (choose another address with --listen)", err)
			}
			return err
		}
		if s.link, err = newDemoLink(); err != nil {
			return err
		}
		// The relay binds its address itself (relay.Listen); reserve a
		// free one now. Another process could take it in between, on
		// loopback a rare failure that the error below names.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		s.relayAddr = l.Addr().String()
		_ = l.Close()
	}

	// 2. Per site: the simulated servers, the EPP, the relay, the gateway.
	simCfg := modelsim.DefaultConfig()
	simCfg.TimeScale = f.timeScale
	for i, s := range sites {
		sdir := filepath.Join(dir, s.name)
		if err := os.MkdirAll(sdir, 0o700); err != nil {
			return err
		}
		var endpoints strings.Builder
		fmt.Fprintf(&endpoints, "# Written by epp demo: the simulated model servers of site %s.\nendpoints:\n", s.name)
		for j := range demoSiteEndpoints[i%3] {
			cfg := simCfg
			cfg.MaxRunning = demoSiteMaxRunning[i%3]
			cfg.Seed = uint64(10*i + j + 1)
			name := fmt.Sprintf("%s-sim-%d", s.name, j)
			sim, err := startSim(ctx, &wg, cfg, name, logger)
			if err != nil {
				return err
			}
			s.sims = append(s.sims, sim)
			fmt.Fprintf(&endpoints, "- name: %s\n  address: 127.0.0.1\n  port: %d\n  labels: {app: modelsim}\n", name, sim.addr.Port)
		}
		epFile := filepath.Join(sdir, "endpoints.yaml")
		if err := os.WriteFile(epFile, []byte(endpoints.String()), 0o600); err != nil {
			return err
		}
		var topo strings.Builder
		topo.WriteString("sites:\n")
		for _, o := range sites {
			fmt.Fprintf(&topo, "- name: %s\n  cluster: %s\n", o.name, o.name)
			if o != s {
				fmt.Fprintf(&topo, "  gateway: %s\n", o.gwLis.Addr())
			}
		}
		topoFile := filepath.Join(sdir, "topology.yaml")
		if err := os.WriteFile(topoFile, []byte(topo.String()), 0o600); err != nil {
			return err
		}
		siteID := tlsutil.SiteSPIFFEID(demoTrustDomain, s.name)
		eppCert, eppKey, err := ca.issue(filepath.Join(sdir, "epp-tls"), siteID+"/epp")
		if err != nil {
			return err
		}
		s.srv, err = server.New(server.Config{
			GRPCAddr:      "127.0.0.1:0",
			HealthAddr:    "127.0.0.1:0",
			MetricsAddr:   "127.0.0.1:0",
			SecureServing: true,
			ConfigFile:    f.configFile,
			ConfigText:    demoSitesConfigText(f.configFile),
			EndpointsFile: epFile,
			PoolName:      "pool",
			Logger:        logger.WithName("epp-" + s.name),
			Multisite: &server.MultisiteConfig{
				Site: s.name, Cluster: s.name, TopologyFile: topoFile,
				RelayURL:     "https://" + s.relayAddr + "/v1/site/signals",
				PollInterval: demoEPPPoll, PollTimeout: demoRelayTimeout,
				CAFile: caFile, CertFile: eppCert, KeyFile: eppKey,
				RelayIdentity: tlsutil.Identity{SPIFFEID: siteID},
			},
		})
		if err != nil {
			return fmt.Errorf("site %s: %w", s.name, err)
		}
		srv := s.srv

		relayCert, relayKey, err := ca.issue(filepath.Join(sdir, "relay-tls"), siteID)
		if err != nil {
			return err
		}
		rcfg := &relay.Config{
			Site: s.name, Cluster: s.name, TrustDomain: demoTrustDomain,
			ListenAddress: s.relayAddr, AdminAddress: "127.0.0.1:0",
			TLS: relay.TLSFiles{CertFile: relayCert, KeyFile: relayKey, CAFile: caFile},
			Providers: []relay.Provider{{Name: "pool", ConfigGeneration: "1",
				MetricsConfig: &relay.MetricsConfig{Endpoint: "http://" + srv.MetricsAddr() + "/metrics"}}},
			ScrapeInterval: demoScrapeInterval, ScrapeTimeout: demoRelayTimeout, PeerPollInterval: demoPeerPoll,
			ConnectTimeout: demoRelayTimeout, RequestTimeout: demoRelayTimeout,
		}
		for _, o := range sites {
			if o != s {
				rcfg.Peers = append(rcfg.Peers, relay.Peer{Site: o.name, Address: o.link.addr()})
			}
		}
		rcfg.SetDefaults()
		if s.relay, err = relay.New(rcfg, relay.Options{Logger: logger.WithName("relay-" + s.name)}); err != nil {
			return fmt.Errorf("site %s relay: %w", s.name, err)
		}
		if err := s.relay.Listen(); err != nil {
			return fmt.Errorf("site %s relay: %w (its port was taken after it was reserved: start the demo again)", s.name, err)
		}
		// The EPP runs once its relay listens, so its first polls find it.
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.Run(ctx); err != nil {
				logger.Error(err, "EPP stopped", "site", s.name)
				cancel()
			}
		}()
		rl := s.relay
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := rl.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				logger.Error(err, "site-relay stopped", "site", s.name)
				cancel()
			}
		}()
		s.link.start(rl.SignalsAddr())

		if s.gw, err = gateway.New(gateway.Options{EPPAddr: srv.GRPCAddr(), EPPTLS: true, Logger: logger.WithName("gateway-" + s.name)}); err != nil {
			return err
		}
		s.gwSrv = gateway.NewHTTPServer("", s.gw)
		gwSrv, lis := s.gwSrv, s.gwLis
		wg.Add(1)
		go func() { defer wg.Done(); _ = gwSrv.Serve(lis) }()
	}

	// 3. Ready: every site's servers scraped, and site a's EPP holds every
	// site's load.
	if !waitSitesReady(ctx, sites, 20*time.Second) && ctx.Err() == nil {
		fmt.Fprintf(stderr, "Not every site was ready within 20s; requests go to those that are.\n")
	}
	if ctx.Err() != nil {
		return nil
	}
	entry := sites[0]
	gwURL := entry.gatewayURL()
	fmt.Fprintf(stdout, "Switchyard multi-site demo: %d sites on this machine, each with simulated vLLM servers,\nan EPP, a site-relay (mutual TLS between relays) and a gateway.\n\n", len(sites))
	for i, s := range sites {
		role := "(enter here)"
		if i > 0 {
			role = "(remote site)"
		}
		servers := "servers"
		if len(s.sims) == 1 {
			servers = "server "
		}
		fmt.Fprintf(stdout, "  site %s  gateway %s %s  %d %s × max-running %-2d  relay %s  EPP metrics http://%s/metrics\n",
			s.name, s.gatewayURL(), role, len(s.sims), servers, demoSiteMaxRunning[i%3], s.relay.SignalsAddr(), s.srv.MetricsAddr())
	}
	fmt.Fprintf(stdout, "\nSend a request to site a; the x-grid-site response header names the site that served it:\n\n  curl -si %s/v1/completions -H 'content-type: application/json' \\\n    -d '{\"model\": \"%s\", \"prompt\": \"Write a haiku about routers\", \"max_tokens\": 32}'\n\n", gwURL, simCfg.Model)
	fmt.Fprintf(stdout, "The table shows the sites as site a's EPP sees them: the learned ceiling, the pressure rho,\nthe tier, the draw weight, the picks of the built-in traffic and whether the site is silent.\n")
	cutName := f.cutSite
	if cutName == "" {
		cutName = sites[len(sites)-1].name
	}
	cut := siteByName(sites, cutName)
	if cut == nil || cut == entry {
		return fmt.Errorf("--cut-site: %q is not a remote site (b .. %s)", cutName, sites[len(sites)-1].name)
	}
	fmt.Fprintf(stdout, "Type c and Enter to cut site %s's relay link (again to heal it): it goes silent, gets no\nrequest, and returns after two samples once the link is back.\n", cut.name)
	if f.cutSite != "" {
		fmt.Fprintf(stdout, "Site %s's relay link is cut after %s", cut.name, f.cutAfter)
		if f.cutFor > 0 {
			fmt.Fprintf(stdout, " for %s", f.cutFor)
		}
		fmt.Fprintln(stdout, ".")
	}
	fmt.Fprintf(stdout, "Press Ctrl-C to stop.\n\n")

	var events demoEvents
	if f.cutSite != "" {
		wg.Add(1)
		go func() { defer wg.Done(); scheduleCut(ctx, cut, f.cutAfter, f.cutFor, &events) }()
	}
	if f.stdin != nil {
		// The reader goroutine may stay blocked in Read at exit (a
		// terminal cannot be interrupted); it only sends to keys.
		keys := make(chan string, 1)
		go readKeys(f.stdin, keys)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case k, ok := <-keys:
					if !ok {
						return
					}
					if k == "c" {
						toggleCut(cut, &events)
					}
				}
			}
		}()
	}

	var load *demoLoad
	if f.traffic > 0 {
		load = &demoLoad{url: gwURL, model: simCfg.Model, rate: f.traffic, sites: newSiteCounts(sites)}
		wg.Add(1)
		go func() { defer wg.Done(); load.run(ctx) }()
	}
	if f.interval > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			redraw(ctx, stdout, f.interval, func(w io.Writer) { writeSitesTable(w, sites, load, &events) })
		}()
	}
	<-ctx.Done()
	fmt.Fprintln(stdout, "\nStopping...")
	return nil
}

func siteByName(sites []*demoSite, name string) *demoSite {
	for _, s := range sites {
		if s.name == name {
			return s
		}
	}
	return nil
}

// demoSitesConfigText is the configuration of every site's EPP, unless
// the user gave a file.
func demoSitesConfigText(file string) string {
	if file != "" {
		return ""
	}
	return demoSitesConfig
}

// startSim starts one simulated server on 127.0.0.1.
func startSim(ctx context.Context, wg *sync.WaitGroup, cfg modelsim.Config, name string, logger logr.Logger) (*simServer, error) {
	sim, err := modelsim.New(cfg, modelsim.WithID(name), modelsim.WithLogger(logger.WithName(name)))
	if err != nil {
		return nil, err
	}
	if err := sim.Start(ctx); err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = sim.Close()
		return nil, err
	}
	s := &simServer{name: name, sim: sim, http: &http.Server{Handler: sim.Handler(), ReadHeaderTimeout: 10 * time.Second}, addr: lis.Addr().(*net.TCPAddr)}
	wg.Add(1)
	go func() { defer wg.Done(); _ = s.http.Serve(lis) }()
	return s, nil
}

// close stops the engine first (it ends open streams at once, so the HTTP
// shutdown does not wait for them), then the server.
func (s *simServer) close() {
	_ = s.sim.Close()
	sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
	_ = s.http.Shutdown(sctx)
	c()
}

// waitSitesReady waits until every site's EPP has all its servers
// routable and site a's EPP has a load reading of every site.
func waitSitesReady(ctx context.Context, sites []*demoSite, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for _, s := range sites {
		if !waitAllRoutable(ctx, s.srv.Store(), len(s.sims), time.Until(deadline)) {
			return false
		}
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if sn := sites[0].srv.SiteSnapshot(); sn != nil {
			n := 0
			for _, s := range sites {
				if site, ok := sn.Site(s.name); ok {
					if p, ok := site.Provider("pool"); ok && p.Ready.Known() && p.Ready.Value > 0 {
						n++
					}
				}
			}
			if n == len(sites) {
				return true
			}
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
}

// demoEvents is the last thing the demo did to the grid (a cut, a heal),
// shown under the table.
type demoEvents struct {
	mu   sync.Mutex
	last string
}

func (e *demoEvents) set(format string, args ...any) {
	e.mu.Lock()
	e.last = time.Now().Format("15:04:05 ") + fmt.Sprintf(format, args...)
	e.mu.Unlock()
}

func (e *demoEvents) get() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.last
}

// scheduleCut cuts site's relay link after `after`, and heals it after
// `span` (never when 0).
func scheduleCut(ctx context.Context, site *demoSite, after, span time.Duration, ev *demoEvents) {
	t := time.NewTimer(after)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return
	case <-t.C:
	}
	site.link.set(true)
	ev.set("cut site %s's relay link", site.name)
	if span <= 0 {
		return
	}
	t.Reset(span)
	select {
	case <-ctx.Done():
	case <-t.C:
		site.link.set(false)
		ev.set("healed site %s's relay link", site.name)
	}
}

func toggleCut(site *demoSite, ev *demoEvents) {
	if site.link.set(!site.link.isCut()) {
		ev.set("cut site %s's relay link (c again heals it)", site.name)
	} else {
		ev.set("healed site %s's relay link", site.name)
	}
}

// readKeys sends every line of r, trimmed and lower-cased, to keys, and
// closes keys at EOF.
func readKeys(r io.Reader, keys chan<- string) {
	defer close(keys)
	sc := bufio.NewScanner(io.LimitReader(r, 1<<20))
	for sc.Scan() {
		keys <- strings.ToLower(strings.TrimSpace(sc.Text()))
	}
}

// redraw writes the table every interval; on a terminal it redraws in
// place.
func redraw(ctx context.Context, w io.Writer, every time.Duration, write func(io.Writer)) {
	tty := isTerminal(w)
	t := time.NewTicker(every)
	defer t.Stop()
	lines := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var table bytes.Buffer
		write(&table)
		var buf bytes.Buffer
		if tty && lines > 0 {
			fmt.Fprintf(&buf, "\033[%dA\033[J", lines)
		}
		buf.Write(table.Bytes())
		lines = bytes.Count(table.Bytes(), []byte{'\n'})
		_, _ = w.Write(buf.Bytes())
	}
}

// writeSitesTable prints one line per site as site a's EPP sees it: the
// relayed load (ready endpoints, running and queued per endpoint, the age
// of the newest load reading), what the learner made of it (ceiling, rho,
// tier, weight, silence), the built-in traffic's picks by the
// x-grid-site header, and what the site's own servers served.
func writeSitesTable(w io.Writer, sites []*demoSite, load *demoLoad, ev *demoEvents) {
	entry := sites[0].srv
	sn := entry.SiteSnapshot()
	learned := demoLearned(entry)
	fmt.Fprintf(w, "%s  (site a's view)\n", time.Now().Format("15:04:05"))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SITE\tREADY\tRUNNING\tQUEUE\tLOAD-AGE\tCEILING\tRHO\tTIER\tWEIGHT\tSILENT\tPICKS\tSERVED\tLINK")
	for _, s := range sites {
		ready, running, queue, age := "-", "-", "-", "-"
		if sn != nil {
			if site, ok := sn.Site(s.name); ok {
				if p, ok := site.Provider("pool"); ok {
					ready, running, queue = reading(p.Ready, "%.0f"), reading(p.Running, "%.1f"), reading(p.Queue, "%.1f")
					if !p.Stamp.IsZero() {
						// The relays' clock is this machine's.
						age = max(0, time.Since(p.Stamp)).Round(100 * time.Millisecond).String()
					}
				}
			}
		}
		ceiling, rho, tier, weight, silent := "-", "-", "-", "-", "-"
		if learned != nil {
			for i := range learned.Sites {
				ls := &learned.Sites[i]
				if ls.Name != s.name {
					continue
				}
				ceiling, rho = number(ls.Ceiling, "%.0f"), number(ls.Rho, "%.2f")
				if !ls.RhoFresh && !math.IsNaN(ls.Rho) {
					rho += "~"
				}
				tier = siteTier(ls)
				if ls.CapacityKnown {
					weight = fmt.Sprintf("%.0f", ls.Capacity)
				} else {
					weight = "mean"
				}
				silent = "no"
				if ls.Silent {
					silent = "SILENT"
				}
			}
		}
		picks := "-"
		if load != nil {
			picks = fmt.Sprint(load.sites.get(s.name))
		}
		link := "up"
		if s.link.isCut() {
			link = "CUT"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", s.name, ready, running, queue, age,
			ceiling, rho, tier, weight, silent, picks, served(s), link)
	}
	_ = tw.Flush()
	if load != nil {
		fmt.Fprintf(w, "load: %d sent, %d ok, %d shed (429), %d failed\n", load.sent.Load(), load.ok.Load(), load.shed.Load(), load.failed.Load())
	}
	if e := ev.get(); e != "" {
		fmt.Fprintf(w, "last: %s\n", e)
	}
}

// siteTier is the site's own tier class (learner.TierOf, the site
// stage's rule: T1 … T4, unready, silent, fallback for no telemetry or
// an unmeasured site without room), marked when health-demoted (a last
// resort).
func siteTier(s *sitestate.Site) string {
	t := learner.TierOf(s)
	if s.Demoted {
		t += " demoted"
	}
	return t
}

func reading(r sitestore.Reading, format string) string {
	if !r.Known() {
		return "-"
	}
	return fmt.Sprintf(format, r.Value)
}

func number(v float64, format string) string {
	if math.IsNaN(v) {
		return "-"
	}
	return fmt.Sprintf(format, v)
}

// served is what the site's servers served (and are serving), from its
// EPP's endpoint state.
func served(s *demoSite) int64 {
	var n int64
	for _, e := range s.srv.Store().Snapshot().All() {
		if st, ok := scheduling.LoadKey.Get(e); ok && st != nil {
			n += int64(st.Served()+st.Errors()) + st.InFlight()
		}
	}
	return n
}

// siteCounts counts the built-in traffic's responses by x-grid-site; a
// fixed map built at start, so counting takes no lock.
type siteCounts map[string]*atomic.Int64

func newSiteCounts(sites []*demoSite) siteCounts {
	c := siteCounts{"": new(atomic.Int64)}
	for _, s := range sites {
		c[s.name] = new(atomic.Int64)
	}
	return c
}

func (c siteCounts) add(site string) {
	if n, ok := c[site]; ok {
		n.Add(1)
		return
	}
	c[""].Add(1)
}

func (c siteCounts) get(site string) int64 {
	if n, ok := c[site]; ok {
		return n.Load()
	}
	return 0
}

// demoLink carries TCP from the other sites' relays to a site's relay,
// until it is cut: then it closes every connection it carries and every
// new one at once, so that the peers' polls fail (unreachable) and the
// site goes silent in their eyes; set(false) carries again.
type demoLink struct {
	ln     net.Listener
	target atomic.Pointer[string]
	cut    atomic.Bool
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

func newDemoLink() (*demoLink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	return &demoLink{ln: ln, conns: map[net.Conn]struct{}{}}, nil
}

func (l *demoLink) addr() string { return l.ln.Addr().String() }

// start carries connections to target.
func (l *demoLink) start(target string) {
	l.target.Store(&target)
	l.wg.Add(1)
	go l.accept()
}

func (l *demoLink) isCut() bool { return l.cut.Load() }

// set cuts (true) or heals the link and returns the new state.
func (l *demoLink) set(cut bool) bool {
	l.cut.Store(cut)
	if cut {
		l.mu.Lock()
		for c := range l.conns {
			_ = c.Close()
		}
		l.mu.Unlock()
	}
	return cut
}

func (l *demoLink) track(c net.Conn, add bool) {
	l.mu.Lock()
	if add {
		l.conns[c] = struct{}{}
	} else {
		delete(l.conns, c)
	}
	l.mu.Unlock()
}

func (l *demoLink) accept() {
	defer l.wg.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		if l.cut.Load() {
			_ = c.Close()
			continue
		}
		up, err := net.DialTimeout("tcp", *l.target.Load(), time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		l.track(c, true)
		l.track(up, true)
		if l.cut.Load() {
			// Cut while dialing: set may have missed these two.
			_ = c.Close()
			_ = up.Close()
		}
		l.wg.Add(2)
		go l.pipe(up, c)
		go l.pipe(c, up)
	}
}

func (l *demoLink) pipe(dst, src net.Conn) {
	defer l.wg.Done()
	_, _ = io.Copy(dst, src)
	_ = dst.Close()
	_ = src.Close()
	l.track(src, false)
	l.track(dst, false)
}

// close stops accepting, closes every connection and waits for the pipes.
func (l *demoLink) close() {
	_ = l.ln.Close()
	l.mu.Lock()
	for c := range l.conns {
		_ = c.Close()
	}
	l.mu.Unlock()
	l.wg.Wait()
}
