package main

import (
	"bytes"
	"context"
	crand "crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/switchyard-ai/switchyard/pkg/datastore"
	"github.com/switchyard-ai/switchyard/pkg/gateway"
	"github.com/switchyard-ai/switchyard/pkg/modelsim"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/server"
)

// demoConfig is the demo's configuration without --config-file.
//
//go:embed demo_config.yaml
var demoConfig string

// demoSitesConfig is the configuration of every EPP of `epp demo --sites`
// without --config-file.
//
//go:embed demo_sites_config.yaml
var demoSitesConfig string

// demoWeight and demoPrice give the simulated servers different weights and
// prices, so WeightedRoundRobin and LeastCost have something to choose by:
// sim-i has weight demoWeight[i%4] and prices demoPrice[i%4] (USD per 1M
// tokens, input and output).
var (
	demoWeight = [...]int{1, 1, 2, 4}
	demoPrice  = [...][2]float64{{3, 15}, {1, 5}, {0.5, 1.5}, {0.2, 0.8}}
)

type demoFlags struct {
	endpoints  int
	listen     string
	configFile string
	timeScale  float64
	interval   time.Duration
	traffic    float64
	duration   time.Duration
	strategy   string
	log        logFlags

	// flowBurst is the size of the flow-control scene's burst (0: none),
	// sent burstAfter after the banner.
	flowBurst  int
	burstAfter time.Duration

	// sites > 1 runs the multi-site demo (demo_sites.go); cutSite,
	// cutAfter and cutFor cut one site's relay link on a schedule, and
	// stdin (nil in tests) carries the c key that toggles the cut.
	sites            int
	cutSite          string
	cutAfter, cutFor time.Duration
	stdin            io.Reader
}

func runDemo(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("epp demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f demoFlags
	fs.IntVar(&f.endpoints, "endpoints", 4, "number of simulated model servers (1..64)")
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8080", "the gateway's listen address")
	fs.StringVar(&f.configFile, "config-file", "", "EndpointPickerConfig file (default: the embedded config/default.yaml); hot-reloaded")
	fs.Float64Var(&f.timeScale, "time-scale", 1, "simulated time factor (0.1 = ten times faster model servers)")
	fs.DurationVar(&f.interval, "table-interval", time.Second, "refresh period of the endpoint table; 0 hides it")
	fs.Float64Var(&f.traffic, "traffic", 0, "requests per second of built-in load with shared prompt prefixes (0: none)")
	fs.DurationVar(&f.duration, "duration", 0, "stop after this long (0: until Ctrl-C)")
	fs.IntVar(&f.sites, "sites", 1, fmt.Sprintf("number of sites (1..%d); above 1, each site has simulated servers, an EPP, a site-relay and a gateway, --listen is site a's gateway and the table shows the sites", maxDemoSites))
	fs.StringVar(&f.cutSite, "cut-site", "", "with --sites: cut this site's relay link after --cut-after (the site goes silent for the others), for --cut-for")
	fs.DurationVar(&f.cutAfter, "cut-after", 20*time.Second, "with --cut-site: when to cut the link")
	fs.DurationVar(&f.cutFor, "cut-for", 20*time.Second, "with --cut-site: how long the link stays cut (0: until the end)")
	fs.IntVar(&f.flowBurst, "flow-burst", 96, "flow-control scene: send this many requests at once, two tenants and two priority bands in turn, shortly after the start (0: none); the table's flow-control lines show what waited, was released or refused")
	f.burstAfter = 2 * time.Second
	registerSelectionStrategy(fs, &f.strategy)
	f.log.register(fs)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: epp demo [flags]\n\nStarts simulated vLLM servers on loopback, the EPP in standalone mode and a gateway,\nand shows how the EPP routes; with --sites 3, three such sites linked by site-relays\n(type c and Enter to cut a site's relay link). It logs errors only, unless -v is given. Flags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	vSet := false
	fs.Visit(func(fl *flag.Flag) { vSet = vSet || fl.Name == "v" || fl.Name == "zap-log-level" })
	// Without -v the demo logs errors only, so the table stays readable.
	f.log.errorsOnly = !vSet
	if f.endpoints < 1 || f.endpoints > 64 {
		fmt.Fprintf(stderr, "epp demo: --endpoints: must be 1..64, got %d\n", f.endpoints)
		return 2
	}
	if f.flowBurst < 0 || f.flowBurst > 10000 {
		fmt.Fprintf(stderr, "epp demo: --flow-burst: must be 0..10000, got %d\n", f.flowBurst)
		return 2
	}
	if f.timeScale <= 0 || f.traffic < 0 {
		fmt.Fprintln(stderr, "epp demo: --time-scale must be positive and --traffic not negative")
		return 2
	}
	if f.sites < 1 || f.sites > maxDemoSites {
		fmt.Fprintf(stderr, "epp demo: --sites: must be 1..%d, got %d\n", maxDemoSites, f.sites)
		return 2
	}
	cutSet := false
	fs.Visit(func(fl *flag.Flag) { cutSet = cutSet || strings.HasPrefix(fl.Name, "cut-") })
	if cutSet && f.sites < 2 {
		fmt.Fprintln(stderr, "epp demo: --cut-site, --cut-after and --cut-for need --sites 2 or more")
		return 2
	}
	if f.cutAfter < 0 || f.cutFor < 0 {
		fmt.Fprintln(stderr, "epp demo: --cut-after and --cut-for must not be negative")
		return 2
	}
	if f.cutSite != "" && (len(f.cutSite) != 1 || f.cutSite[0] < 'b' || int(f.cutSite[0]-'a') >= f.sites) {
		fmt.Fprintf(stderr, "epp demo: --cut-site: %q is not a remote site (b .. %s)\n", f.cutSite, siteName(f.sites-1))
		return 2
	}
	strategy, _, err := selectionStrategy(f.strategy)
	if err != nil {
		fmt.Fprintf(stderr, "epp demo: %v\n", err)
		return 2
	}
	f.strategy = strategy
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if f.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.duration)
		defer cancel()
	}
	run := demo
	if f.sites > 1 {
		f.stdin = os.Stdin
		run = demoSites
	}
	if err := run(ctx, f, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "epp demo: %v\n", err)
		return 1
	}
	return 0
}

// simServer is one simulated model server on loopback.
type simServer struct {
	name string
	sim  *modelsim.Server
	http *http.Server
	addr *net.TCPAddr
}

func demo(ctx context.Context, f demoFlags, stdout, stderr io.Writer) error {
	logger, err := f.log.logger(stderr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()

	// 1. Model servers.
	simCfg := modelsim.DefaultConfig()
	simCfg.TimeScale = f.timeScale
	var sims []*simServer
	defer func() {
		for _, s := range sims {
			// Close the engine first: it ends open streams at once, so the
			// HTTP shutdown does not wait for them.
			_ = s.sim.Close()
			sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
			_ = s.http.Shutdown(sctx)
			c()
		}
	}()
	var endpoints strings.Builder
	endpoints.WriteString("# Written by epp demo: the simulated model servers.\nendpoints:\n")
	for i := range f.endpoints {
		name := fmt.Sprintf("sim-%d", i)
		cfg := simCfg
		cfg.Seed = uint64(i + 1)
		sim, err := modelsim.New(cfg, modelsim.WithID(name), modelsim.WithLogger(logger.WithName(name)))
		if err != nil {
			return err
		}
		if err := sim.Start(ctx); err != nil {
			return err
		}
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			_ = sim.Close()
			return err
		}
		s := &simServer{name: name, sim: sim, http: &http.Server{Handler: sim.Handler(), ReadHeaderTimeout: 10 * time.Second}, addr: lis.Addr().(*net.TCPAddr)}
		sims = append(sims, s)
		wg.Add(1)
		go func() { defer wg.Done(); _ = s.http.Serve(lis) }()
		fmt.Fprintf(&endpoints, "- name: %s\n  address: 127.0.0.1\n  port: %d\n  labels: {app: modelsim}\n  weight: %d\n  models:\n  - {name: %q, pricing: {input: %v, output: %v}}\n",
			name, s.addr.Port, demoWeight[i%4], simCfg.Model, demoPrice[i%4][0], demoPrice[i%4][1])
	}
	dir, err := os.MkdirTemp("", "switchyard-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	epFile := filepath.Join(dir, "endpoints.yaml")
	if err := os.WriteFile(epFile, []byte(endpoints.String()), 0o600); err != nil {
		return err
	}
	objFile := filepath.Join(dir, "objectives.yaml")
	if err := os.WriteFile(objFile, []byte(demoObjectives), 0o600); err != nil {
		return err
	}
	// The metrics port takes a bearer token, as in production: it guards
	// /debug/decisions, which explains every routing decision.
	token, err := demoToken()
	if err != nil {
		return err
	}
	tokenFile := filepath.Join(dir, "metrics-token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		return err
	}

	// 2. The EPP, in standalone mode, with TLS as in production.
	srv, err := server.New(server.Config{
		GRPCAddr:       "127.0.0.1:0",
		HealthAddr:     "127.0.0.1:0",
		MetricsAddr:    "127.0.0.1:0",
		SecureServing:  true,
		EnablePprof:    false,
		ConfigFile:     f.configFile,
		ConfigText:     demoConfigText(f.configFile, f.timeScale),
		EndpointsFile:  epFile,
		ObjectivesFile: objFile,
		PoolName:       "demo",

		MetricsTokenFile:   tokenFile,
		DecisionBufferSize: 256,
		Logger:             logger.WithName("epp"),

		SelectionStrategy: f.strategy,
	})
	if err != nil {
		return err
	}
	eppDone := make(chan error, 1)
	wg.Add(1)
	go func() { defer wg.Done(); eppDone <- srv.Run(ctx) }()

	// 3. The gateway.
	gw, err := gateway.New(gateway.Options{EPPAddr: srv.GRPCAddr(), EPPTLS: true, Logger: logger.WithName("gateway")})
	if err != nil {
		cancel()
		return err
	}
	defer gw.Close()
	lis, err := net.Listen("tcp", f.listen)
	if err != nil {
		cancel()
		return fmt.Errorf("gateway: %w (choose another address with --listen)", err)
	}
	gwSrv := gateway.NewHTTPServer("", gw)
	wg.Add(1)
	go func() { defer wg.Done(); _ = gwSrv.Serve(lis) }()
	defer func() {
		sctx, c := context.WithTimeout(context.Background(), 5*time.Second)
		_ = gwSrv.Shutdown(sctx)
		c()
	}()
	gwURL := "http://" + lis.Addr().String()

	// The banner invites requests: wait (briefly) until every simulated
	// server has been scraped, so that the first requests see the whole
	// pool rather than whichever server was scraped first.
	if !waitAllRoutable(ctx, srv.Store(), len(sims), 10*time.Second) && ctx.Err() == nil {
		fmt.Fprintf(stderr, "Not every server had fresh metrics within 10s; requests go to those that have.\n")
	}

	fmt.Fprintf(stdout, "Switchyard demo: %d simulated vLLM servers, the EPP and a gateway on this machine.\n\n", f.endpoints)
	fmt.Fprintf(stdout, "  gateway    %s  (OpenAI API: /v1/completions, /v1/chat/completions)\n", gwURL)
	fmt.Fprintf(stdout, "  EPP        ext_proc %s (TLS, self-signed)  metrics http://%s/metrics (bearer token %s)\n", srv.GRPCAddr(), srv.MetricsAddr(), token)
	for _, s := range sims {
		fmt.Fprintf(stdout, "  %-10s http://%s  (model %s)\n", s.name, s.addr, simCfg.Model)
	}
	fmt.Fprintf(stdout, "\nSend a request:\n\n  curl -s %s/v1/completions -H 'content-type: application/json' \\\n    -d '{\"model\": \"%s\", \"prompt\": \"Write a haiku about routers\", \"max_tokens\": 32}'\n\n", gwURL, simCfg.Model)
	fmt.Fprintf(stdout, "Requests that share a prompt prefix go to the endpoint that caches it; load spreads by queue and KV cache.\n")
	fmt.Fprintf(stdout, "Why did the last request go where it went? Every scorer's score per endpoint, the filters, the pick and its reason:\n\n"+
		"  curl -s -H 'Authorization: Bearer %s' 'http://%s/debug/decisions?limit=1'\n\n", token, srv.MetricsAddr())
	if f.strategy != "" {
		fmt.Fprintf(stdout, "Selection strategy %s decides whenever the scorers do not clearly prefer one endpoint.\n", f.strategy)
	}
	var scene *flowScene
	if f.flowBurst > 0 {
		scene = &flowScene{url: gwURL, model: simCfg.Model, n: f.flowBurst, after: f.burstAfter}
		fmt.Fprintf(stdout, "Flow control: once each server has 4 requests in flight, requests wait in the EPP, the interactive objective's band\n"+
			"(priority 10) before batch (0), tenants in turn; a burst of %d requests shows it (x-gateway-inference-objective: interactive|batch,\n"+
			"x-gateway-inference-fairness-id: tenant-a|tenant-b).\n", f.flowBurst)
	}
	fmt.Fprintf(stdout, "Press Ctrl-C to stop.\n\n")

	var load *demoLoad
	if f.traffic > 0 {
		load = &demoLoad{url: gwURL, model: simCfg.Model, rate: f.traffic}
		wg.Add(1)
		go func() { defer wg.Done(); load.run(ctx) }()
	}
	if scene != nil {
		wg.Add(1)
		go func() { defer wg.Done(); scene.run(ctx) }()
	}
	if f.interval > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			showTable(ctx, stdout, srv.Store(), f.interval, load, func(w io.Writer) { writeFlow(w, srv.Registry(), scene) })
		}()
	}
	select {
	case <-ctx.Done():
	case err := <-eppDone:
		cancel()
		if err != nil {
			return err
		}
	}
	fmt.Fprintln(stdout, "\nStopping...")
	return nil
}

// showTable prints one line per endpoint every interval. On a terminal it
// redraws in place.
//
// extra, when set, appends lines to each table (the flow-control lines).
func showTable(ctx context.Context, w io.Writer, store *datastore.Store, every time.Duration, load *demoLoad, extra func(io.Writer)) {
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
		writeTable(&table, store, load)
		if extra != nil {
			extra(&table)
		}
		var buf bytes.Buffer
		if tty && lines > 0 {
			fmt.Fprintf(&buf, "\033[%dA\033[J", lines) // redraw in place
		}
		buf.Write(table.Bytes())
		lines = bytes.Count(table.Bytes(), []byte{'\n'})
		_, _ = w.Write(buf.Bytes())
	}
}

func writeTable(w io.Writer, store *datastore.Store, load *demoLoad) {
	snap := store.Snapshot()
	fmt.Fprintf(w, "%s\n", time.Now().Format("15:04:05"))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ENDPOINT\tADDRESS\tWEIGHT\tQUEUE\tRUNNING\tKV\tPICKS\tIN-FLIGHT\tE2E\tTTFT\tHEALTH\tBREAKER\tSTATE")
	now := time.Now()
	for _, e := range snap.All() {
		m := e.Metrics()
		var picks, inflight int64
		ttft, e2e := "-", "-"
		if st, ok := scheduling.LoadKey.Get(e); ok && st != nil {
			inflight = st.InFlight()
			picks = int64(st.Served()+st.Errors()) + inflight
			if d := st.TTFT(); d > 0 {
				ttft = d.Round(time.Millisecond).String()
			}
			if d := st.E2E(); d > 0 {
				e2e = d.Round(time.Millisecond).String()
			}
		}
		weight, ok := scheduling.WeightKey.Get(e)
		if !ok {
			weight = 1
		}
		health, breaker := "-", "closed"
		if h, ok := scheduling.HealthKey.Get(e); ok && h != nil {
			switch h.Probe() {
			case scheduling.ProbeHealthy:
				health = "healthy"
			case scheduling.ProbeUnhealthy:
				health = "unhealthy"
			}
			switch h.Breaker(now) {
			case scheduling.BreakerOpen:
				breaker = "open"
			case scheduling.BreakerHalfOpen:
				breaker = "half-open"
			}
		}
		state := "ready"
		if why := snap.OutOfRotation(e); why != "" {
			state = why
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%.1f%%\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", e.Name(), e.HostPort(), weight, m.WaitingQueueSize, m.RunningRequestsSize,
			100*m.KVCacheUsagePercent, picks, inflight, e2e, ttft, health, breaker, state)
	}
	_ = tw.Flush()
	if load != nil {
		fmt.Fprintf(w, "load: %d sent, %d ok, %d failed\n", load.sent.Load(), load.ok.Load(), load.failed.Load())
	}
}

// demoConfigText is the embedded demo configuration, its flow-control
// TTL scaled with the simulated time, unless the user gave a file.
func demoConfigText(file string, timeScale float64) string {
	if file != "" {
		return ""
	}
	return scaleDemoTTL(demoConfig, timeScale)
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// demoLoad sends requests whose prompts share a few long prefixes (system
// prompts), so prefix-cache affinity is visible in the table.
type demoLoad struct {
	url, model             string
	rate                   float64
	sent, ok, shed, failed atomic.Int64
	// sites, when set, counts the OK responses by their x-grid-site.
	sites siteCounts
}

var demoSystemPrompts = []string{
	"You are a support assistant for a network equipment company. Answer briefly and cite the manual section. ",
	"You are a code reviewer. Point out bugs first, then style. Be specific and quote the lines you mean. ",
	"You translate English into French. Keep the register of the source and do not explain the translation. ",
	"You are a travel planner. Propose a day-by-day plan with times, places and one alternative per day. ",
}

func (l *demoLoad) run(ctx context.Context) {
	client := &http.Client{Timeout: time.Minute}
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	defer wg.Wait()
	t := time.NewTicker(time.Duration(float64(time.Second) / l.rate))
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		select {
		case sem <- struct{}{}:
		default:
			continue // 64 in flight: skip a beat rather than queue unboundedly
		}
		sys := demoSystemPrompts[rand.IntN(len(demoSystemPrompts))]
		body := fmt.Sprintf(`{"model":%q,"prompt":%q,"max_tokens":%d}`, l.model, strings.Repeat(sys, 8)+fmt.Sprintf("Question %d?", i), 16+rand.IntN(48))
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			l.sent.Add(1)
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.url+"/v1/completions", strings.NewReader(body))
			if err != nil {
				l.failed.Add(1)
				return
			}
			req.Header.Set("content-type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				l.failed.Add(1)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			switch {
			case resp.StatusCode == http.StatusOK:
				l.ok.Add(1)
				if l.sites != nil {
					l.sites.add(resp.Header.Get("x-grid-site"))
				}
			case resp.StatusCode == http.StatusTooManyRequests && l.sites != nil:
				l.shed.Add(1)
			default:
				l.failed.Add(1)
			}
		}()
	}
}

// waitAllRoutable waits until the store's snapshot has n routable
// endpoints with fresh metrics (not fail-open), ctx ends or timeout
// passes; it reports whether they were.
func waitAllRoutable(ctx context.Context, store *datastore.Store, n int, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		sn := store.Snapshot()
		if len(sn.Routable()) == n && !sn.RoutableFailOpen() {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			return false
		case <-tick.C:
		}
	}
}

// demoToken returns a random bearer token for the demo's metrics port.
func demoToken() (string, error) {
	b := make([]byte, 16)
	if _, err := crand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
