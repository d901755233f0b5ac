package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/tlsutil"
	"github.com/switchyard-ai/switchyard/pkg/tlsutil/tlstest"
)

// The three-site grid of the multi-site e2e tests (issue 13): every site
// has its own loopback address (127.0.42.N) and on it modelsim servers, an
// EPP in standalone mode with the multi-site flags, a site-relay that
// scrapes the EPP and polls its peers over mutual TLS (certificates this
// test issues), and the in-repo gateway (`epp gateway`) in front of the
// EPP, at the address the other sites' topologies name. Peers reach a
// site's relay through a freezer on the site's address, so that the test
// can cut the site's relay link (its peers' polls hang and time out) while
// the site itself, its EPP's poll of its relay included, keeps running.

// gridSiteOpts shape one site.
type gridSiteOpts struct {
	// sims is the number of modelsim servers (default 2).
	sims int
	// simArgs are more modelsim flags, for every sim of the site.
	simArgs []string
	// eppArgs are more EPP flags.
	eppArgs []string
	// gatewayArgs are more `epp gateway` flags.
	gatewayArgs []string
}

// gridOpts shape the grid.
type gridOpts struct {
	// sites are the sites' names, in order; site i lives on 127.0.42.(i+1).
	sites []string
	// site gives each site's shape by name.
	site map[string]gridSiteOpts
	// config is every EPP's configuration file (--config-file), "" for
	// the default.
	config string
	// relayPoll is the relays' peer poll and scrape interval (default
	// 300 ms); eppPoll the EPPs' poll of their relays (default 300 ms).
	relayPoll, eppPoll time.Duration
}

// gridSite is one running site.
type gridSite struct {
	name, ip   string
	dir        string
	sims       []*proc
	simAddr    []string
	simName    []string
	epp        *proc
	metrics    string // the EPP's metrics base URL
	grpc       string
	gwProc     *proc
	gateway    string // the gateway's base URL
	gatewayAt  string // the gateway's host:port (what the topologies name)
	relay      *proc
	relayPort  int
	adminPort  int
	link       *freezer // peers' way to this site's relay
	relayCert  *tlstest.Leaf
	eppCert    *tlstest.Leaf
	token      string
	client     *http.Client
	view       *cluster // the EPP seen through the helpers of cluster
	relayAdmin string
}

// grid is the running three (or more) sites.
type grid struct {
	order  []string
	sites  map[string]*gridSite
	caFile string
}

func (g *grid) site(name string) *gridSite { return g.sites[name] }

// startFreezerOn is startFreezer listening on ip (a site's own address).
func startFreezerOn(t *testing.T, ip, target string) *freezer {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	require.NoError(t, err)
	f := &freezer{ln: ln, target: target}
	f.cond = sync.NewCond(&f.mu)
	f.wg.Add(1)
	go f.accept()
	t.Cleanup(f.close)
	return f
}

// startGrid starts every site and waits until every relay scraped its EPP
// and every EPP's site store holds every site's load.
func startGrid(t *testing.T, o gridOpts) *grid {
	t.Helper()
	if o.relayPoll == 0 {
		o.relayPoll = 300 * time.Millisecond
	}
	if o.eppPoll == 0 {
		o.eppPoll = 300 * time.Millisecond
	}
	ca := tlstest.NewCA(t, "grid2")
	caDir := t.TempDir()
	g := &grid{order: o.sites, sites: map[string]*gridSite{}, caFile: ca.WriteFile(t, caDir)}
	for i, n := range o.sites {
		ip := fmt.Sprintf("127.0.42.%d", i+1)
		s := &gridSite{name: n, ip: ip, dir: t.TempDir(), token: metricsToken,
			relayPort: freePortOn(t, ip), adminPort: freePortOn(t, ip),
			client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}}
		t.Cleanup(s.client.CloseIdleConnections)
		s.gatewayAt = net.JoinHostPort(ip, strconv.Itoa(freePortOn(t, ip)))
		s.gateway = "http://" + s.gatewayAt
		s.relayAdmin = "http://" + net.JoinHostPort(ip, strconv.Itoa(s.adminPort))
		s.relayCert = ca.SiteLeaf(t, n, ip)
		s.eppCert = ca.Issue(t, tlsutil.SiteSPIFFEID(tlstest.TrustDomain, n)+"/epp")
		s.link = startFreezerOn(t, ip, net.JoinHostPort(ip, strconv.Itoa(s.relayPort)))
		g.sites[n] = s
	}
	for _, n := range o.sites {
		g.startSite(t, g.sites[n], o, o.site[n])
	}
	for _, n := range o.sites {
		g.startRelay(t, g.sites[n], o)
	}
	for _, n := range o.sites {
		s := g.sites[n]
		require.Eventually(t, func() bool {
			return value(t, seriesAt(t, s.relayAdmin+"/metrics", ""), "grid_relay_scrapes_total", "provider", "pool", "result", "ok") >= 1
		}, 60*time.Second, 20*time.Millisecond, "relay %s never scraped its EPP", n)
	}
	for _, n := range o.sites {
		s := g.sites[n]
		var st sitesState
		require.Eventually(t, func() bool {
			st = s.view.sites(t)
			got := 0
			for _, ss := range st.Sites {
				if p, ok := ss.provider("pool"); ok && p.Ready != nil && *p.Ready > 0 {
					got++
				}
			}
			return got == len(o.sites)
		}, 60*time.Second, 20*time.Millisecond, "site %s: the site store never held every site: %s", n, st)
	}
	// Every remote gateway passed its health probes (2, 3 s apart: a
	// site is demoted, a last resort, until then).
	for _, n := range o.sites {
		s := g.sites[n]
		require.Eventually(t, func() bool {
			m := seriesAt(t, s.metrics+"/metrics", metricsToken)
			for _, p := range o.sites {
				if p != n && m[series("grid_route_gateway_up", "site", p)] != 1 {
					return false
				}
			}
			return true
		}, 60*time.Second, 50*time.Millisecond, "site %s: the other sites' gateways never counted as up", n)
	}
	return g
}

// topology is the site topology file of site n: every site, the others
// with their gateways.
func (g *grid) topology(n string) string {
	var b strings.Builder
	b.WriteString("sites:\n")
	for _, m := range g.order {
		fmt.Fprintf(&b, "- name: %s\n  cluster: %s\n", m, m)
		if m != n {
			fmt.Fprintf(&b, "  gateway: %s\n", g.sites[m].gatewayAt)
		}
	}
	return b.String()
}

func (g *grid) startSite(t *testing.T, s *gridSite, o gridOpts, so gridSiteOpts) {
	t.Helper()
	if so.sims == 0 {
		so.sims = 2
	}
	var eps strings.Builder
	eps.WriteString("endpoints:\n")
	for i := range so.sims {
		name := fmt.Sprintf("%s-sim-%d", s.name, i)
		args := append([]string{"--host", s.ip, "--port", "0", "--id", name, "--time-scale", "0.1", "--seed", strconv.Itoa(i + 1)}, so.simArgs...)
		p := startProc(t, name, "modelsim", args...)
		addr := p.waitFor(t, simAddrRE)
		s.sims = append(s.sims, p)
		s.simAddr = append(s.simAddr, addr)
		s.simName = append(s.simName, name)
		host, port, err := net.SplitHostPort(addr)
		require.NoError(t, err)
		fmt.Fprintf(&eps, "- name: %s\n  address: %s\n  port: %s\n  labels: {app: modelsim}\n", name, host, port)
	}
	epFile := filepath.Join(s.dir, "endpoints.yaml")
	require.NoError(t, os.WriteFile(epFile, []byte(eps.String()), 0o600))
	tokenFile := filepath.Join(s.dir, "metrics-token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(metricsToken+"\n"), 0o600))
	topoFile := filepath.Join(s.dir, "topology.yaml")
	require.NoError(t, os.WriteFile(topoFile, []byte(g.topology(s.name)), 0o600))
	certDir := filepath.Join(s.dir, "epp-tls")
	require.NoError(t, os.MkdirAll(certDir, 0o700))
	cert, key := s.eppCert.WriteFiles(t, certDir)

	metricsPort := freePortOn(t, s.ip)
	s.metrics = "http://" + net.JoinHostPort(s.ip, strconv.Itoa(metricsPort))
	args := []string{"--endpoints-file", epFile, "--pool-name", "pool",
		"--grpc-port", "0", "--grpc-health-port", "0", "--metrics-port", strconv.Itoa(metricsPort),
		"--metrics-bind-address", s.ip, "--grpc-bind-address", s.ip, "--grpc-health-bind-address", s.ip,
		"--metrics-token-file", tokenFile, "--refresh-prometheus-metrics-interval", "100ms",
		"--zap-encoder", "json", "-v", "3", "--seed", "7",
		"--site-name", s.name, "--site-cluster", s.name, "--site-topology-file", topoFile,
		"--signals-relay-url", fmt.Sprintf("https://%s/v1/site/signals", net.JoinHostPort(s.ip, strconv.Itoa(s.relayPort))),
		"--signals-poll-interval", o.eppPoll.String(), "--signals-poll-timeout", "500ms",
		"--signals-ca-file", g.caFile, "--signals-cert-file", cert, "--signals-key-file", key,
		"--signals-relay-identity", tlsutil.SiteSPIFFEID(tlstest.TrustDomain, s.name),
	}
	if o.config != "" {
		cfgFile := filepath.Join(s.dir, "config.yaml")
		require.NoError(t, os.WriteFile(cfgFile, []byte(o.config), 0o600))
		args = append(args, "--config-file", cfgFile)
	}
	s.epp = startProc(t, "epp-"+s.name, "epp", append(args, so.eppArgs...)...)
	serving := s.epp.waitFor(t, regexp.MustCompile(`"msg":"Switchyard serving".*"extProc":"([^"]+)"`))
	_, grpcPort, err := net.SplitHostPort(serving)
	require.NoError(t, err)
	s.grpc = net.JoinHostPort(s.ip, grpcPort)
	gwArgs := append([]string{"gateway", "--listen", s.gatewayAt, "--epp-addr", s.grpc}, so.gatewayArgs...)
	s.gwProc = startProc(t, "gateway-"+s.name, "epp", gwArgs...)
	s.gwProc.waitFor(t, gatewayAddrRE)
	s.view = &cluster{epp: s.epp, gateway: s.gateway, metrics: s.metrics, token: metricsToken, grpc: s.grpc, client: s.client, simAddr: s.simAddr}

	require.Eventually(t, func() bool {
		st, err := s.view.state()
		if err != nil || len(st.Endpoints) != so.sims {
			return false
		}
		for _, e := range st.Endpoints {
			if !e.Ready {
				return false
			}
		}
		return true
	}, 30*time.Second, 50*time.Millisecond, "site %s: endpoints never became ready", s.name)
}

func (g *grid) startRelay(t *testing.T, s *gridSite, o gridOpts) {
	t.Helper()
	certDir := filepath.Join(s.dir, "relay-tls")
	require.NoError(t, os.MkdirAll(certDir, 0o700))
	cert, key := s.relayCert.WriteFiles(t, certDir)
	tokenFile := filepath.Join(s.dir, "epp-token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(metricsToken), 0o600))
	var cfg strings.Builder
	fmt.Fprintf(&cfg, `apiVersion: switchyard.ai/v1alpha1
kind: SiteRelayConfig
site: %s
cluster: %s
trustDomain: %s
listenAddress: %s
adminAddress: %s
scrapeInterval: %s
scrapeTimeout: 300ms
peerPollInterval: %s
connectTimeout: 250ms
requestTimeout: 250ms
tls: {certFile: %s, keyFile: %s, caFile: %s}
providers:
- name: pool
  configGeneration: "1"
  metricsConfig: {endpoint: %s/metrics, bearerTokenFile: %s}
peers:
`, s.name, s.name, tlstest.TrustDomain, net.JoinHostPort(s.ip, strconv.Itoa(s.relayPort)), net.JoinHostPort(s.ip, strconv.Itoa(s.adminPort)),
		o.relayPoll, o.relayPoll, cert, key, g.caFile, s.metrics, tokenFile)
	for _, m := range g.order {
		if m != s.name {
			fmt.Fprintf(&cfg, "- {site: %s, address: %s}\n", m, g.sites[m].link.ln.Addr())
		}
	}
	cfgFile := filepath.Join(s.dir, "relay.yaml")
	require.NoError(t, os.WriteFile(cfgFile, []byte(cfg.String()), 0o600))
	s.relay = startProc(t, "relay-"+s.name, "site-relay", "--config", cfgFile, "--log-format", "json")
	s.relay.waitFor(t, regexp.MustCompile(`"msg":"site-relay serving".*"(site)"`))
}

// cut stops carrying the site's relay link: its peers' polls hang and
// time out (unreachable); heal carries it again.
func (s *gridSite) cut()  { s.link.set(true) }
func (s *gridSite) heal() { s.link.set(false) }

// served is the number of generation requests each of the site's sims
// served, from the EPP's /debug/endpoints (name -> served).
func (s *gridSite) served(t *testing.T) map[string]uint64 {
	t.Helper()
	st, err := s.view.state()
	require.NoError(t, err)
	out := map[string]uint64{}
	for _, e := range st.Endpoints {
		out[e.Name] = e.Served
	}
	return out
}

// gridReply is one client request's outcome through a site's gateway.
type gridReply struct {
	status     int
	site       string // x-grid-site
	backend    string // x-grid-backend
	sim        string // x-modelsim-id
	retryAfter string
	body       string
	err        error
}

// send posts one completion through the site's gateway.
func (s *gridSite) send(ctx context.Context, prompt string, maxTokens int) gridReply {
	body := fmt.Sprintf(`{"model":%q,"prompt":%q,"max_tokens":%d}`, modelName, prompt, maxTokens)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.gateway+"/v1/completions", strings.NewReader(body))
	if err != nil {
		return gridReply{err: err}
	}
	req.Header.Set("content-type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return gridReply{err: err}
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	_ = resp.Body.Close()
	return gridReply{status: resp.StatusCode, site: resp.Header.Get("x-grid-site"), backend: resp.Header.Get("x-grid-backend"),
		sim: resp.Header.Get("x-modelsim-id"), retryAfter: resp.Header.Get("Retry-After"), body: string(b)}
}

// burst sends n requests through the site's gateway, at most conc at once,
// and returns every reply in order.
func (s *gridSite) burst(ctx context.Context, n, conc, maxTokens int, tag string) []gridReply {
	out := make([]gridReply, n)
	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			out[i] = s.send(ctx, fmt.Sprintf("%s request %d: say something", tag, i), maxTokens)
		}()
	}
	wg.Wait()
	return out
}

// learnedSite is what a site's EPP learned of one site: the learner's
// part of /debug/sites ("learner", pkg/multisite/learner.Debug); a
// number without a reading is NaN.
type learnedSite struct {
	Ceiling, Rho, Weight              float64
	RhoFresh, Room, Queued, Full      bool
	Ready, Silent, Demoted, Telemetry bool
}

type learnerDebug struct {
	Learner *struct {
		Shed       []string `json:"shed"`
		ShedOthers bool     `json:"shedOthers"`
		Sites      []struct {
			Name      string   `json:"name"`
			Ceiling   *float64 `json:"ceiling"`
			Rho       *float64 `json:"rho"`
			Weight    *float64 `json:"weight"`
			RhoFresh  bool     `json:"rhoFresh"`
			Room      bool     `json:"room"`
			Queued    bool     `json:"queued"`
			Full      bool     `json:"full"`
			Ready     bool     `json:"ready"`
			Silent    bool     `json:"silent"`
			Demoted   bool     `json:"demoted"`
			Telemetry bool     `json:"telemetry"`
		} `json:"sites"`
	} `json:"learner"`
}

// learnedView reads the EPP's learned state of every site (empty before
// the first control step).
func (s *gridSite) learnedView(t *testing.T) map[string]learnedSite {
	t.Helper()
	v, _ := s.learned(t)
	return v
}

// learned reads the EPP's learned state of every site and whether the
// test's model is shed.
func (s *gridSite) learned(t *testing.T) (map[string]learnedSite, bool) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.metrics+"/debug/sites", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+metricsToken)
	resp, err := s.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var d learnerDebug
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&d))
	out := map[string]learnedSite{}
	if d.Learner == nil {
		return out, false
	}
	num := func(p *float64) float64 {
		if p == nil {
			return math.NaN()
		}
		return *p
	}
	for _, ls := range d.Learner.Sites {
		out[ls.Name] = learnedSite{Ceiling: num(ls.Ceiling), Rho: num(ls.Rho), Weight: num(ls.Weight),
			RhoFresh: ls.RhoFresh, Room: ls.Room, Queued: ls.Queued, Full: ls.Full,
			Ready: ls.Ready, Silent: ls.Silent, Demoted: ls.Demoted, Telemetry: ls.Telemetry}
	}
	return out, d.Learner.ShedOthers || slices.Contains(d.Learner.Shed, modelName)
}
