//go:build bench

package quality

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/bench/matrix"
	"github.com/switchyard-ai/switchyard/bench/report"
	"github.com/switchyard-ai/switchyard/internal/kubetest"
	"github.com/switchyard-ai/switchyard/pkg/gateway"
	"github.com/switchyard-ai/switchyard/pkg/modelsim"
)

var (
	full      = flag.Bool("full", false, "the full-size run (make bench-quality-full); default the short one (make bench-quality)")
	results   = flag.String("results", "", "folder the tables and charts are written to (default bench/results)")
	routersF  = flag.String("routers", "", "comma-separated subset of the routers to run (default all: "+strings.Join(allRouters, ",")+")")
	workloadF = flag.String("workloads", "", "comma-separated subset of the workloads (default all)")
	traces    = flag.String("traces", "", "folder the trace files are written to (default a temporary folder)")
	stepF     = flag.Duration("step", 0, "override every step's duration (trial runs)")
	bestF     = flag.String("best", bestProfile, "the switchyard-best router's configuration file, absolute or relative to the repository root (trial runs of another profile)")
)

// The routers, in the tables' order.
const (
	rrRouter   = "round-robin"
	gieRouter  = "gie-v1.5.0"
	syDefault  = "switchyard-default"
	syBest     = "switchyard-best"
	release    = "bench"
	simPort    = 8000
	grpcPort   = 19002
	healthPort = 19003
	eppMetrics = 19090
	// gatewayStreams is the gateway listener's HTTP/2 stream cap; the
	// client opens another connection past it.
	gatewayStreams = 1000
)

var allRouters = []string{rrRouter, gieRouter, syDefault, syBest}

// roundRobin is the round-robin router: Switchyard with its RoundRobin
// strategy and nothing else in the profile.
const roundRobin = `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: strategy-picker
  parameters:
    strategy: RoundRobin
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: strategy-picker
`

// bestProfile is Switchyard's best profile for these workloads: the
// prefix-heavy sample (affinity filter whose TTFT escape counts the
// prefill in flight, the least prefill in flight among the endpoints that
// hold the prefix, new prefixes placed evenly by LRU, prefix scorer
// auto-tuned to the engines' KV-cache size). Trial runs point -best at
// another file.
const bestProfile = "config/samples/prefix-heavy.yaml"

// bestAbout describes the best router's profile for the tables: what
// prefix-heavy.yaml does, or nothing for another file (-best).
func bestAbout() string {
	if *bestF != bestProfile {
		return ""
	}
	return " (prefix affinity filter that stops narrowing when the prefill in flight costs more TTFT than a cold start, the least prefill in flight among the endpoints holding the prefix, new prefixes rotated by LRU, prefix scorer sized from the engines' KV metrics)"
}

// scale is the size of one run: the fleet, its engines and the workloads.
type scale struct {
	endpoints int
	engine    modelsim.Config
	workloads []Workload
}

func sizes(fullRun bool) scale {
	eng := modelsim.DefaultConfig()
	eng.TimeScale = 1
	if fullRun {
		// 16 endpoints of 131k KV tokens: with affinity each holds its
		// ~9.4 prefixes of 6000 tokens; round robin cycles all 150 (900k
		// tokens) through every cache.
		eng.KVBlocks = 8192
		steps := []Step{{4, time.Minute}, {8, time.Minute}, {16, time.Minute}, {24, time.Minute}, {32, time.Minute}, {48, time.Minute}, {64, time.Minute}}
		return scale{endpoints: 16, engine: eng, workloads: []Workload{
			{Name: "shared-prefix", Seed: 15, Prefixes: 150, PrefixTokens: 6000, QuestionTokens: 1200, OutputTokens: 64, Steps: steps},
			{Name: "low-sharing", Seed: 16, Prefixes: 1 << 30, PrefixTokens: 6000, QuestionTokens: 1200, OutputTokens: 64, Steps: steps},
		}}
	}
	// The short run: 8 endpoints of 16k KV tokens, 40 prefixes of 2000
	// tokens (5 per endpoint fit with affinity; round robin cycles 80k
	// tokens through each cache), 400-token questions, 16 output tokens.
	eng.KVBlocks = 1024
	steps := []Step{{8, 15 * time.Second}, {16, 15 * time.Second}, {24, 15 * time.Second}, {32, 15 * time.Second}, {48, 15 * time.Second}}
	return scale{endpoints: 8, engine: eng, workloads: []Workload{
		{Name: "shared-prefix", Seed: 15, Prefixes: 40, PrefixTokens: 2000, QuestionTokens: 400, OutputTokens: 16, Steps: steps},
		{Name: "low-sharing", Seed: 16, Prefixes: 1 << 30, PrefixTokens: 2000, QuestionTokens: 400, OutputTokens: 16, Steps: steps},
	}}
}

// TestRoutingQuality replays each workload's trace through the gateway
// with each router in turn, on a fresh fleet (empty caches) each time.
func TestRoutingQuality(t *testing.T) {
	root := matrix.RepoRoot(t)
	sc := sizes(*full)
	routers := pick(t, allRouters, *routersF)
	var names []string
	for _, w := range sc.workloads {
		names = append(names, w.Name)
	}
	wanted := pick(t, names, *workloadF)
	binDir := t.TempDir()
	var epp, gie string
	if slices.Contains(routers, gieRouter) {
		epp, gie = matrix.Build(t, root, binDir)
	} else {
		epp = filepath.Join(binDir, "epp")
		run(t, root, "go", "build", "-o", epp, "./cmd/epp")
	}
	best := *bestF
	if !filepath.IsAbs(best) {
		best = filepath.Join(root, best)
	}
	if slices.Contains(routers, syBest) {
		if _, err := os.Stat(best); err != nil {
			t.Fatalf("-best %s: the switchyard-best router's configuration file: %v", *bestF, err)
		}
	}
	cfgDir := t.TempDir()
	rrFile := filepath.Join(cfgDir, "round-robin.yaml")
	must(t, os.WriteFile(rrFile, []byte(roundRobin), 0o644))

	env := kubetest.Start(t, kubetest.Options{})
	ns := env.Namespace(t, "quality")
	must(t, env.Client.Create(context.Background(), kubetest.Pool(ns, release, map[string]string{"app": "sim"}, simPort)))
	ips := make([]string, sc.endpoints)
	ids := make([]string, sc.endpoints)
	for i := range ips {
		ips[i] = fmt.Sprintf("127.10.200.%d", i+1)
		ids[i] = fmt.Sprintf("sim-%d", i)
		env.CreatePod(t, kubetest.Pod{Name: ids[i], Namespace: ns, IP: ips[i], Ready: true, Labels: map[string]string{"app": "sim"}})
	}
	chart := matrix.RenderChart(t, ns, release)
	kube := append([]string{"KUBECONFIG=" + env.Kubeconfig}, chart.Env...)
	ports := []string{"--grpc-port", strconv.Itoa(grpcPort), "--grpc-health-port", strconv.Itoa(healthPort), "--metrics-port", strconv.Itoa(eppMetrics)}
	argsFor := func(router string) (string, []string) {
		switch router {
		case gieRouter:
			return gie, append(slices.Clone(chart.Args), ports...)
		case syDefault:
			return epp, append(WithConfig(chart.Args, ""), ports...)
		case syBest:
			return epp, append(WithConfig(chart.Args, best), ports...)
		default:
			return epp, append(WithConfig(chart.Args, rrFile), ports...)
		}
	}

	traceDir := *traces
	if traceDir == "" {
		traceDir = t.TempDir()
	}
	must(t, os.MkdirAll(traceDir, 0o755))
	var all []StepResult
	var ran []Workload
	for _, w := range sc.workloads {
		if !slices.Contains(wanted, w.Name) {
			continue
		}
		if *stepF > 0 {
			w.Steps = slices.Clone(w.Steps)
			for i := range w.Steps {
				w.Steps[i].Duration = *stepF
			}
		}
		reqs := traceFile(t, w, filepath.Join(traceDir, w.Name+".trace.jsonl"))
		ran = append(ran, w)
		for _, router := range routers {
			bin, args := argsFor(router)
			res := runRouter(t, router, bin, kube, args, chart.ProbeService, sc, ips, ids, w, reqs)
			for _, r := range res {
				t.Logf("%s %s %.0f/s: sent %d errors %d TTFT p50/p90/p99 %.0f/%.0f/%.0f ms, %.0f tok/s, hit %s, per endpoint %v",
					w.Name, router, r.Rate, r.Sent, r.Errors, r.TTFTp50, r.TTFTp90, r.TTFTp99, r.TokensPerSec, pct(r.HitRate), r.PerEndpoint)
			}
			all = append(all, res...)
		}
	}
	write(t, root, sc, routers, ran, all)
}

// traceFile generates the workload's trace, writes it to path and
// replays what it reads back from there.
func traceFile(t *testing.T, w Workload, path string) []Request {
	t.Helper()
	reqs, err := Generate(w)
	must(t, err)
	f, err := os.Create(path)
	must(t, err)
	must(t, WriteTrace(f, w, reqs))
	must(t, f.Close())
	f, err = os.Open(path)
	must(t, err)
	defer f.Close()
	_, back, err := ReadTrace(f)
	must(t, err)
	return back
}

// runRouter starts a fresh fleet and the router's EPP, a gateway in front
// of it, replays the trace and stops everything.
func runRouter(t *testing.T, router, bin string, env, args []string, probeService string, sc scale, ips, ids []string, w Workload, reqs []Request) []StepResult {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopSims := fleet(ctx, t, sc.engine, ips, ids)
	defer stopSims()
	p := matrix.Start(t, router+"-"+w.Name, bin, env, args)
	defer p.Stop()

	g, err := gateway.New(gateway.Options{EPPAddr: "127.0.0.1:" + strconv.Itoa(grpcPort), EPPTLS: true})
	must(t, err)
	defer g.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	// Clients reach the gateway over plaintext HTTP/2, as they reach an
	// Envoy listener: one connection carries many requests, so past the
	// knee (thousands in flight, all in this process) the open files are
	// the upstream connections rather than twice as many. HTTP/1.1 stays
	// on for curl against a running gateway. The HTTP/2 flow-control
	// windows are Go's defaults, 1 MB per connection and per stream (the
	// connection window Envoy's edge best practices recommend; Envoy's own
	// default is 256 MiB): a handler that stops reading its body holds
	// back the connection's other uploads once a megabyte is unread.
	srv := gateway.NewHTTPServer("", g)
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	srv.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: gatewayStreams}
	served := make(chan struct{})
	go func() { _ = srv.Serve(ln); close(served) }()
	defer func() { _ = srv.Close(); <-served }()

	h2 := &http.Transport{IdleConnTimeout: 30 * time.Second, DisableCompression: true, Protocols: new(http.Protocols)}
	h2.Protocols.SetUnencryptedHTTP2(true)
	defer h2.CloseIdleConnections()
	client := &http.Client{Transport: h2}
	// modelsim's /metrics speaks HTTP/1.1.
	tr := &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second, DisableCompression: true}
	defer tr.CloseIdleConnections()
	scrapeClient := &http.Client{Transport: tr}
	base := "http://" + ln.Addr().String()
	waitReady(t, p, probeService, client, base)

	endpoints := make([]string, len(ips))
	for i, ip := range ips {
		endpoints[i] = fmt.Sprintf("http://%s:%d", ip, simPort)
	}
	scrapes := make([][]Counters, len(w.Steps)+1)
	rp := &Replayer{URL: base, Model: modelsim.DefaultModel, Client: client, Timeout: 3 * time.Minute,
		OnStep: func(i int) {
			c, err := Scrape(ctx, scrapeClient, endpoints)
			if err != nil {
				t.Logf("%s: scrape at step %d: %v", router, i, err)
				return
			}
			scrapes[i] = c // OnStep calls are sequential
		}}
	outs := rp.Replay(ctx, w, reqs)
	// The last scrape is taken when the trace's last step ends; requests
	// still running then are counted in the table (TTFT, tokens) but their
	// cache lookups already happened at admission.
	errs := map[string]int{}
	for _, o := range outs {
		if !o.OK() && o.Err != "" {
			errs[firstWords(o.Err)]++
		}
	}
	if len(errs) > 0 {
		t.Logf("%s %s: errors %v", router, w.Name, errs)
	}
	if done, log := p.Exited(); done {
		t.Fatalf("%s exited during the run:\n%s", router, log)
	}
	return Summarize(w, router, outs, scrapes, ids)
}

// fleet starts one modelsim server per address and returns the function
// that stops them all.
func fleet(ctx context.Context, t *testing.T, cfg modelsim.Config, ips, ids []string) func() {
	t.Helper()
	type srv struct {
		sim  *modelsim.Server
		http *http.Server
		done chan struct{}
	}
	var servers []srv
	stop := func() {
		for _, s := range servers {
			_ = s.http.Close()
			<-s.done
			_ = s.sim.Close()
		}
		servers = nil
	}
	for i, ip := range ips {
		sim, err := modelsim.New(cfg, modelsim.WithID(ids[i]))
		must(t, err)
		must(t, sim.Start(ctx))
		ln, err := listenRetry(fmt.Sprintf("%s:%d", ip, simPort))
		if err != nil {
			stop()
			t.Fatal(err)
		}
		s := srv{sim: sim, http: &http.Server{Handler: sim.Handler(), ReadHeaderTimeout: 5 * time.Second}, done: make(chan struct{})}
		go func() { _ = s.http.Serve(ln); close(s.done) }()
		servers = append(servers, s)
	}
	return stop
}

// listenRetry listens on addr, retrying for a few seconds while the
// previous router's fleet releases it.
func listenRetry(addr string) (net.Listener, error) {
	var err error
	for range 50 {
		var ln net.Listener
		if ln, err = net.Listen("tcp", addr); err == nil {
			return ln, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, err
}

// waitReady waits for the EPP's readiness probe and then for 20 routed
// completions in a row through the gateway (tiny prompts, so the caches
// stay empty), then for a few metric scrapes of every endpoint.
func waitReady(t *testing.T, p *matrix.Proc, service string, client *http.Client, base string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	probe := net.JoinHostPort("127.0.0.1", strconv.Itoa(healthPort))
	for !matrix.Healthy(probe, service) {
		if done, log := p.Exited(); done {
			t.Fatalf("EPP exited:\n%s", log)
		}
		if time.Now().After(deadline) {
			t.Fatal("the EPP's readiness probe never passed")
		}
		time.Sleep(200 * time.Millisecond)
	}
	w := Workload{Name: "warmup", Prefixes: 1, QuestionTokens: 4, OutputTokens: 1, Steps: []Step{{1, time.Millisecond}}}
	for ok, i := 0, 0; ok < 20; i++ {
		if done, log := p.Exited(); done {
			t.Fatalf("EPP exited:\n%s", log)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the EPP never routed 20 requests in a row")
		}
		rp := &Replayer{URL: base, Model: modelsim.DefaultModel, Client: client, Timeout: 5 * time.Second}
		o := rp.Replay(context.Background(), w, []Request{{ID: i, Question: uint64(i)}})[0]
		if o.OK() {
			ok++
		} else {
			ok = 0
			time.Sleep(200 * time.Millisecond)
		}
	}
	time.Sleep(2 * time.Second)
}

func pick(t *testing.T, all []string, subset string) []string {
	t.Helper()
	if subset == "" {
		return all
	}
	var out []string
	for _, s := range strings.Split(subset, ",") {
		if !slices.Contains(all, s) {
			t.Fatalf("unknown name %q (have %v)", s, all)
		}
		out = append(out, s)
	}
	return out
}

func firstWords(s string) string {
	if len(s) > 60 {
		return s[:60]
	}
	return s
}

// write publishes bench/results/quality[-short].{json,md} and the charts.
func write(t *testing.T, root string, sc scale, routers []string, ws []Workload, all []StepResult) {
	t.Helper()
	dir := *results
	if dir == "" {
		dir = filepath.Join(root, "bench", "results")
	}
	must(t, os.MkdirAll(dir, 0o755))
	name := "quality"
	if !*full {
		name += "-short"
	}
	js, err := json.MarshalIndent(all, "", "  ")
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dir, name+".json"), append(js, '\n'), 0o644))
	var md strings.Builder
	fmt.Fprintf(&md, "# Routing quality: round robin, GIE v1.5.0's default profile, Switchyard's default and best profiles\n\n")
	var trial []string
	flag.Visit(func(f *flag.Flag) {
		if f.Name != "full" && f.Name != "results" && f.Name != "traces" && !strings.HasPrefix(f.Name, "test.") {
			trial = append(trial, "-"+f.Name+" "+f.Value.String())
		}
	})
	how := map[bool]string{true: "make bench-quality-full", false: "make bench-quality"}[*full]
	if len(trial) > 0 {
		how += " -args " + strings.Join(trial, " ") // a trial: not the published configuration
	}
	fmt.Fprintf(&md, "Machine: %s. Produced by `%s` (bench/quality/quality_test.go).\n\n", report.Machine(), how)
	e := sc.engine
	fmt.Fprintf(&md, "Fleet: %d modelsim endpoints (KV cache %d blocks × %d tokens, max %d running, prefill %s/token, decode %s + %s per extra sequence, at most %d batched tokens per step, real time), pods of one InferencePool in a real kube-apiserver. ",
		sc.endpoints, e.KVBlocks, e.BlockSize, e.MaxRunning, e.PrefillPerToken, e.DecodeBase, e.DecodePerSeq, e.MaxBatchedTokens)
	fmt.Fprintf(&md, "Requests are streamed `/v1/completions` through the in-repo gateway (pkg/gateway, Envoy's ext_proc sequence) to each EPP in Kubernetes mode with GIE's Helm chart arguments; every router replays the same seeded trace on a fresh fleet (empty caches). Routers: **round-robin** is Switchyard with only the `RoundRobin` strategy-picker; **%s** is GIE's own binary with its chart's default plugins; **%s** is Switchyard with no config file (its built-in default, GIE's default profile); **%s** is Switchyard with `%s`%s. ",
		gieRouter, syDefault, syBest, *bestF, bestAbout())
	md.WriteString("TTFT is measured at the client (request sent → first streamed token, HdrHistogram); output tok/s is the tokens of the step's requests over the time from the step's start to its last request's end; prefix hit is the fleet's `vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total` between scrapes at the step's boundaries; per endpoint counts the `x-modelsim-id` of the responses.\n\n")
	for _, w := range ws {
		fmt.Fprintf(&md, "## %s\n\n", w.Name)
		share := fmt.Sprintf("%d shared prefixes", w.Prefixes)
		if w.Prefixes >= 1<<20 {
			share = "a unique prefix per request"
		}
		fmt.Fprintf(&md, "%s of %d tokens, %d-token questions, %d output tokens; Poisson arrivals, steps of %s at ", share, w.PrefixTokens, w.QuestionTokens, w.OutputTokens, w.Steps[0].Duration)
		var rates []string
		for _, s := range w.Steps {
			rates = append(rates, strconv.FormatFloat(s.Rate, 'g', -1, 64))
		}
		md.WriteString(strings.Join(rates, ", ") + " requests/s (seed " + strconv.FormatUint(w.Seed, 10) + ").\n\n")
		md.WriteString(Compare(all, w.Name, [][2]string{{gieRouter, syBest}, {gieRouter, syDefault}, {rrRouter, syBest}}).Markdown() + "\n")
		md.WriteString(Table(all, w.Name, routers).Markdown() + "\n")
		for _, c := range []struct {
			suffix, title, y string
			log              bool
			v                func(StepResult) float64
		}{
			{"p90", "p90 TTFT per load step — " + w.Name, "ms", true, func(r StepResult) float64 { return r.TTFTp90 }},
			{"tokens", "Output tokens/s per load step — " + w.Name, "tokens/s", false, func(r StepResult) float64 { return r.TokensPerSec }},
			{"hit", "Prefix-cache hit rate per load step — " + w.Name, "%", false, func(r StepResult) float64 {
				if r.HitRate < 0 {
					return 0
				}
				return 100 * r.HitRate
			}},
		} {
			file := fmt.Sprintf("%s-%s-%s.svg", name, w.Name, c.suffix)
			must(t, os.WriteFile(filepath.Join(dir, file), []byte(Chart(all, w.Name, routers, c.title, c.y, c.log, c.v).SVG()), 0o644))
			fmt.Fprintf(&md, "![%s](%s)\n", c.suffix, file)
		}
		md.WriteString("\n")
	}
	must(t, os.WriteFile(filepath.Join(dir, name+".md"), []byte(md.String()), 0o644))
}

func run(t *testing.T, dir, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
