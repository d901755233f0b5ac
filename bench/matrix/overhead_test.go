//go:build bench

package matrix

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/bench/loadgen"
	"github.com/switchyard-ai/switchyard/bench/report"
	"github.com/switchyard-ai/switchyard/internal/kubetest"
)

var (
	full    = flag.Bool("full", false, "the whole matrix (make bench-full); default the short one (make bench)")
	results = flag.String("results", "", "folder the tables and plots are written to (default bench/results)")
	smoke   = flag.Bool("smoke", false, "one tiny cell per EPP, results in a temporary folder: checks the driver, measures nothing")
	// Filters for investigating one cell; with any of them the results go
	// to a temporary folder unless -results names one.
	onlyEPP     = flag.String("epp", "", "only these EPPs (comma-separated: null, switchyard, gie-v1.5.0)")
	onlyCounts  = flag.String("endpoints", "", "only these endpoint counts (comma-separated)")
	onlyPrompts = flag.String("prompts", "", "only these prompt sizes in bytes (comma-separated)")
	profileDir  = flag.String("profile", "", "write Switchyard's CPU profile of each cell's first fixed-rate round to this folder (it runs with --enable-pprof behind a metrics token)")
)

// ints parses a comma-separated list of positive integers ("" = nil).
func ints(t *testing.T, flagName, s string) []int {
	t.Helper()
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			t.Fatalf("-%s: %q is not a positive integer", flagName, f)
		}
		out = append(out, n)
	}
	return out
}

// Point is one cell of the overhead matrix for one EPP.
type Point struct {
	EPP         string  `json:"epp"`
	Endpoints   int     `json:"endpoints"`
	PromptBytes int     `json:"promptBytes"`
	MaxRate     float64 `json:"maxRate"`     // highest open-loop rate with p99 ≤ 5 ms, no error or drop, at the arrivals' pace (Search)
	Plateau     float64 `json:"plateau"`     // highest throughput seen in the search
	FixedRate   float64 `json:"fixedRate"`   // the rate every EPP is measured at
	FixedServed float64 `json:"fixedServed"` // exchanges answered per second at FixedRate
	FixedFailed int64   `json:"fixedFailed"` // exchanges at FixedRate that failed or were dropped
	P50us       int64   `json:"p50us"`       // decision latency at FixedRate
	P99us       int64   `json:"p99us"`       // decision latency at FixedRate
	CPUms       float64 `json:"cpuMsPerReq"` // EPP CPU per request at FixedRate
	PerCPUSec   float64 `json:"reqPerCpuSecond"`
	C16P99us    int64   `json:"c16P99us,omitempty"` // 16 concurrent streams, closed loop
	C16Tput     float64 `json:"c16Throughput,omitempty"`
	C16Failed   int64   `json:"c16Failed,omitempty"`
	PeakRSS     int64   `json:"peakRssBytes"`
	Errors      int64   `json:"errors"`
	// NoRoute says why the EPP was not measured: it did not start
	// routing (the other fields are then zero).
	NoRoute string `json:"noRoute,omitempty"`
}

const (
	p99Bound = 5 * time.Millisecond
	// retryBelow: a search step failing by its p99 alone, by less than
	// this factor, is run once more (see Search).
	retryBelow = 4.0
	release    = "bench"
)

// TestOverheadMatrix runs the null EPP, Switchyard and GIE's v1.5.0 EPP,
// one after the other for each endpoint count, each with the arguments
// GIE's Helm chart gives its EPP, and measures the request path at each
// prompt size.
func TestOverheadMatrix(t *testing.T) {
	root := repoRoot(t)
	binDir := t.TempDir()
	epp, gie := build(t, root, binDir)
	null := filepath.Join(binDir, "nullepp")
	run(t, root, "go", "build", "-o", null, "./bench/cmd/nullepp")
	fleet := filepath.Join(binDir, "simfleet")
	run(t, root, "go", "build", "-o", fleet, "./bench/cmd/simfleet")

	endpoints := []int{10, 100}
	prompts := []int{1 << 10, 32 << 10, 200 << 10}
	step, fixed := 2*time.Second, 300.0
	if *full {
		endpoints = []int{10, 100, 1000}
		step = 5 * time.Second
	}
	if *smoke {
		endpoints, prompts, step, fixed = []int{10}, []int{1 << 10, 200 << 10}, 500*time.Millisecond, 100
		if *results == "" {
			*results = t.TempDir()
		}
	}
	if c := ints(t, "endpoints", *onlyCounts); c != nil {
		endpoints = c
	}
	if c := ints(t, "prompts", *onlyPrompts); c != nil {
		prompts = c
	}
	// A filtered or profiled run is an investigation, not the results.
	if (*onlyEPP != "" || *onlyCounts != "" || *onlyPrompts != "" || *profileDir != "") && *results == "" {
		*results = t.TempDir()
	}
	env := kubetest.Start(t, kubetest.Options{})
	var points []Point
	for _, n := range endpoints {
		// One subtest per endpoint count, so its model servers (which
		// reuse the addresses 127.10.0.1… of the previous count) are
		// closed by its cleanups before the next count starts.
		ok := t.Run(fmt.Sprintf("endpoints=%d", n), func(t *testing.T) {
			points = append(points, cell(t, env, n, prompts, step, fixed, fleet, null, epp, gie)...)
		})
		if !ok {
			t.FailNow()
		}
	}
	write(t, root, points, prompts, endpoints)
}

// cell measures every EPP against one InferencePool of n endpoints.
func cell(t *testing.T, env *kubetest.Env, n int, prompts []int, step time.Duration, fixed float64, fleet, null, epp, gie string) []Point {
	var points []Point
	{
		ns := env.Namespace(t, fmt.Sprintf("bench-%d", n))
		if err := env.Client.Create(context.Background(), kubetest.Pool(ns, release, map[string]string{"app": "sim"}, 8000)); err != nil {
			t.Fatal(err)
		}
		sim, ips := sims(t, fleet, n, 8000)
		for i, ip := range ips {
			env.CreatePod(t, kubetest.Pod{Name: fmt.Sprintf("sim-%d", i), Namespace: ns, IP: ip, Ready: true, Labels: map[string]string{"app": "sim"}})
		}
		chart := renderChart(t, ns, release)
		kube := append([]string{"KUBECONFIG=" + env.Kubeconfig}, chart.Env...)
		for _, e := range []struct {
			name, bin string
			args      []string
		}{
			{"null", null, []string{"-addr", "127.0.0.1:9002", "-endpoint", ips[0] + ":8000"}},
			{"switchyard", epp, chart.Args},
			{"gie-v1.5.0", gie, chart.Args},
		} {
			if *onlyEPP != "" && !slices.ContainsFunc(strings.Split(*onlyEPP, ","), func(f string) bool { return strings.TrimSpace(f) == e.name }) {
				continue
			}
			args, prof := e.args, (*profiler)(nil)
			if *profileDir != "" && e.name == "switchyard" {
				prof = newProfiler(t, *profileDir)
				args = append(slices.Clone(args), prof.args...)
			}
			p := start(t, fmt.Sprintf("%s-%d", e.name, n), e.bin, kube, args)
			if err := waitRouting(p, chart, e.name == "null"); err != nil {
				// An EPP that does not start routing is a result (GIE's
				// at 1000 endpoints is at that edge on 2 cores), not the
				// end of the matrix.
				t.Logf("%s: %v", p.name, err)
				for _, size := range prompts {
					points = append(points, Point{EPP: e.name, Endpoints: n, PromptBytes: size, FixedRate: fixedFor(fixed, size), NoRoute: strings.SplitN(err.Error(), "\n", 2)[0]})
				}
				p.stop()
				continue
			}
			for _, size := range prompts {
				pt := measure(t, p, e.name, n, size, step, fixed, prof)
				t.Logf("%+v", pt)
				points = append(points, pt)
			}
			if u, err := loadgen.ReadProc(p.pid()); err == nil {
				for i := range points {
					if points[i].EPP == e.name && points[i].Endpoints == n {
						points[i].PeakRSS = u.PeakRSS
					}
				}
			}
			p.stop()
			if ended, out := sim.exited(); ended {
				t.Fatalf("simfleet exited during %s's measurements:\n%s", e.name, out)
			}
		}
	}
	return points
}

// waitRouting waits until the EPP routes: its readiness probe passes and
// 20 exchanges in a row are routed, within 3 minutes.
func waitRouting(p *proc, c Chart, null bool) error {
	deadline := time.Now().Add(3 * time.Minute)
	probe := net.JoinHostPort("127.0.0.1", strconv.Itoa(int(c.ProbePort)))
	for !null {
		if done, log := p.exited(); done {
			return fmt.Errorf("exited; its output:\n%s", log)
		}
		if healthy(probe, c.ProbeService) {
			break
		}
		if time.Now().After(deadline) {
			return errors.New("its readiness probe did not pass within 3 minutes")
		}
		time.Sleep(200 * time.Millisecond)
	}
	xs := loadgen.ChatExchanges("meta-llama/Llama-3.1-8B-Instruct", 1024, 1)
	for ok := 0; ok < 20; {
		if done, log := p.exited(); done {
			return fmt.Errorf("exited; its output:\n%s", log)
		}
		if time.Now().After(deadline) {
			return errors.New("it did not route 20 requests in a row within 3 minutes")
		}
		conns, err := loadgen.Dial(loadgen.Config{Target: "127.0.0.1:9002", TLS: true, Conns: 1})
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		res, err := xs[0].Run(ctx, newClient(conns[0]), "probe")
		cancel()
		_ = conns[0].Close()
		if err == nil && res.Status == 0 && res.Destination != "" {
			ok++
		} else {
			ok = 0
			time.Sleep(200 * time.Millisecond)
		}
	}
	time.Sleep(2 * time.Second) // a few scrape rounds of every endpoint
	return nil
}

// fixedFor is the fixed rate for a prompt size: with 200 KB prompts a
// tenth of the small prompts' rate (at 250/s they are 50 MB/s of body,
// more than even the null EPP takes on 2 cores).
func fixedFor(fixed float64, size int) float64 {
	if size >= 200<<10 {
		return fixed / 10
	}
	return fixed
}

// measure runs one matrix cell: a rate search, a run at the fixed rate
// and, for the largest prompts, 16 concurrent streams.
func measure(t *testing.T, p *proc, name string, n, size int, step time.Duration, fixed float64, prof *profiler) Point {
	t.Helper()
	xs := loadgen.ChatExchanges("meta-llama/Llama-3.1-8B-Instruct", size, 64)
	cfg := loadgen.Config{Target: "127.0.0.1:9002", TLS: true, Conns: 2, PID: p.pid(), Timeout: 5 * time.Second,
		Exchange: func(i int) *loadgen.Exchange { return xs[i%len(xs)] }}
	fixed = fixedFor(fixed, size)
	pt := Point{EPP: name, Endpoints: n, PromptBytes: size, FixedRate: fixed}
	runAt := func(rate float64, d time.Duration) *loadgen.Report {
		c := cfg
		c.Rate, c.Duration, c.Warmup, c.Seed = rate, d, d/4, uint64(rate)
		rep, err := loadgen.Run(context.Background(), c)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		t.Logf("%s %d×%d B @ %.0f/s: served %.0f/s, p50 %v, p99 %v, errors %d, dropped %d", name, n, size, rate,
			rep.Throughput, rep.Decision.P50, rep.Decision.P99, rep.Errors, rep.Dropped)
		return rep
	}
	// The search's failures are its answer, not errors: Errors counts
	// the fixed-rate and closed-loop runs only. A 200 KB prompt is 50 MB/s
	// of body at 250/s, past what the null EPP holds on 2 cores, so large
	// prompts start lower.
	search := Search{First: 250, Max: 128000, P99: p99Bound, Retry: retryBelow}
	if size >= 200<<10 {
		search.First = 25
	}
	pt.MaxRate, pt.Plateau = search.Run(func(rate float64) Step {
		rep := runAt(rate, step)
		return Step{Rate: rate, Served: rep.Throughput, Duration: step, Arrivals: rep.Sent + rep.Dropped,
			Errors: rep.Errors, Dropped: rep.Dropped, P99: rep.Decision.P99}
	})
	// The fixed rate runs FixedRounds times on the same arrival times
	// (runAt's seed is the rate), so the rounds differ only in what the
	// machine did; the profile covers the first. The point is their
	// median p99 and their CPU together.
	round := time.Duration(roundSteps(*full)) * step
	rounds := make([]Round, FixedRounds)
	for i := range rounds {
		done := func() {}
		if i == 0 {
			done = prof.start(t, fmt.Sprintf("cpu-%d-%d.pb.gz", n, size), round)
		}
		rep := runAt(fixed, round)
		done()
		pt.Errors += rep.Errors
		rounds[i] = Round{P50: rep.Decision.P50, P99: rep.Decision.P99, Served: rep.Throughput,
			Answered: rep.Routed + rep.Refused, Failed: rep.Errors + rep.Dropped, CPU: rep.CPU}
	}
	f := Combine(rounds)
	pt.FixedServed, pt.FixedFailed = f.Served, f.Failed
	pt.P50us, pt.P99us = f.P50.Microseconds(), f.P99.Microseconds()
	pt.CPUms = f.CPUms
	if pt.CPUms > 0 {
		pt.PerCPUSec = 1000 / pt.CPUms
	}
	if size >= 200<<10 {
		c := cfg
		c.Concurrency, c.Duration, c.Warmup = 16, 2*step, step/2
		r16, err := loadgen.Run(context.Background(), c)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		pt.Errors += r16.Errors
		pt.C16Failed = r16.Errors
		pt.C16P99us, pt.C16Tput = r16.Decision.P99.Microseconds(), r16.Throughput
	}
	return pt
}

// write publishes the points as bench/results/overhead[-full].{json,md}
// and SVG charts.
func write(t *testing.T, root string, points []Point, prompts, endpoints []int) {
	t.Helper()
	dir := *results
	if dir == "" {
		dir = filepath.Join(root, "bench", "results")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	name := "overhead"
	if !*full {
		name += "-short"
	}
	js, _ := json.MarshalIndent(points, "", "  ")
	must(t, os.WriteFile(filepath.Join(dir, name+".json"), append(js, '\n'), 0o644))
	find := func(epp string, n, size int) *Point {
		for i := range points {
			if points[i].EPP == epp && points[i].Endpoints == n && points[i].PromptBytes == size {
				return &points[i]
			}
		}
		return nil
	}
	ratio := func(a, b float64) string {
		if a <= 0 || b <= 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f×", a/b)
	}
	tb := &report.Table{Header: []string{"endpoints", "prompt", "EPP", "max rate (p99 ≤ 5 ms)", "plateau", "at the fixed rate: served, p50 / p99", "CPU ms/req", "req per CPU-s", "16 streams p99", "peak RSS"}}
	cmp := &report.Table{Header: []string{"endpoints", "prompt", "rate: SY / GIE", "req per CPU-s: SY / GIE", "p99: GIE / SY", "rate: SY / null", "16 streams p99: GIE / SY"}}
	var groups []string
	footnote := false
	series := map[string]*report.Series{}
	p99s := map[string]*report.Series{}
	cpus := map[string]*report.Series{}
	epps := []string{"null", "switchyard", "gie-v1.5.0"}
	for _, e := range epps {
		series[e] = &report.Series{Name: e}
		p99s[e] = &report.Series{Name: e}
		cpus[e] = &report.Series{Name: e}
	}
	for _, n := range endpoints {
		for _, size := range prompts {
			groups = append(groups, fmt.Sprintf("%d × %s", n, kb(size)))
			for _, e := range epps {
				p := find(e, n, size)
				if p == nil {
					series[e].Values = append(series[e].Values, math.NaN())
					p99s[e].Values = append(p99s[e].Values, math.NaN())
					cpus[e].Values = append(cpus[e].Values, math.NaN())
					continue
				}
				c16 := "–"
				if p.C16P99us > 0 {
					c16 = fmt.Sprintf("%.2f ms", float64(p.C16P99us)/1000)
				}
				if p.C16Failed > 0 {
					c16 += fmt.Sprintf(" (%d failed)", p.C16Failed)
				}
				tb.Rows = append(tb.Rows, []string{strconv.Itoa(n), kb(size), e, report.Num(p.MaxRate) + "/s", report.Num(p.Plateau) + "/s",
					fixedCell(p), cpuCell(p.CPUms), cpuCell(p.PerCPUSec), c16, fmt.Sprintf("%.0f MiB", float64(p.PeakRSS)/(1<<20))})
				series[e].Values = append(series[e].Values, p.MaxRate)
				p99s[e].Values = append(p99s[e].Values, float64(p.P99us)/1000)
				cpus[e].Values = append(cpus[e].Values, p.PerCPUSec)
			}
			sy, g, nl := find("switchyard", n, size), find("gie-v1.5.0", n, size), find("null", n, size)
			if sy != nil && g != nil && nl != nil {
				perCPU, p99 := ratio(sy.PerCPUSec, g.PerCPUSec), ratio(float64(g.P99us), float64(sy.P99us))
				if g.FixedFailed > 0 || sy.FixedFailed > 0 {
					perCPU, p99 = perCPU+" ¹", p99+" ¹"
					footnote = true
				}
				c16 := ratio(float64(g.C16P99us), float64(sy.C16P99us))
				if g.C16Failed > 0 || sy.C16Failed > 0 {
					c16 += " ¹"
					footnote = true
				}
				cmp.Rows = append(cmp.Rows, []string{strconv.Itoa(n), kb(size), ratio(sy.MaxRate, g.MaxRate), perCPU,
					p99, ratio(sy.MaxRate, nl.MaxRate), c16})
			}
		}
	}
	chart := func(file, title, y string, m map[string]*report.Series, log bool) {
		c := &report.BarChart{Title: title, YLabel: y, Groups: groups, Log: log}
		for _, e := range epps {
			c.Series = append(c.Series, *m[e])
		}
		must(t, os.WriteFile(filepath.Join(dir, file), []byte(c.SVG()), 0o644))
	}
	chart(name+"-max-rate.svg", "Highest rate with p99 ≤ 5 ms (endpoints × prompt)", "requests/s", series, true)
	chart(name+"-p99.svg", "Decision p99 at the fixed rate (see the table)", "ms", p99s, true)
	chart(name+"-per-cpu.svg", "Requests per EPP CPU-second", "requests", cpus, true)
	fixedRate := 0.0 // the small prompts' rate
	for _, p := range points {
		fixedRate = math.Max(fixedRate, p.FixedRate)
	}
	var md strings.Builder
	fmt.Fprintf(&md, "# Request-path overhead: Switchyard vs GIE v1.5.0's EPP vs the null EPP\n\n")
	fmt.Fprintf(&md, "Machine: %s. Produced by `%s` (bench/matrix/overhead_test.go).\n\n", report.Machine(), map[bool]string{true: "make bench-full", false: "make bench"}[*full])
	fmt.Fprintf(&md, "Each EPP runs in Kubernetes mode with the arguments GIE v1.5.0's Helm chart gives its EPP (its default plugins file, TLS with a self-signed certificate), against one kube-apiserver and etcd, on an InferencePool whose pods have loopback addresses and serve modelsim's metrics (from a process of their own, bench/cmd/simfleet); the EPPs run one after the other, alone on the machine with the load generator (bench/loadgen: Envoy's FULL_DUPLEX_STREAMED ext_proc sequence over 2 TLS connections, open-loop Poisson arrivals, HdrHistogram). Latency is the time from the first ext_proc message to the routing answer. Max rate: the highest rate (doubling from 250/s, or 25/s for 200 KB prompts, halving instead down to a sixteenth when the first fails, then bisecting twice) with p99 ≤ 5 ms, no error, nothing dropped and the arrivals answered at ≥ 95 %% of the pace the Poisson schedule produced them, each step %s; a step that fails by its p99 alone, by less than %.0f×, is run once more and counts if that run passes (one scheduler stall on 2 cores fails a step whatever the rate). CPU and peak RSS from /proc. The fixed rate is %.0f/s (a tenth of it for 200 KB prompts), run %d times for %s (of %s) each: p50 / p99 are the round's with the median p99, served its mean, failed and CPU per answered request over all rounds; errors count only the fixed-rate and 16-stream runs.\n\n", step(*full), retryBelow, fixedRate, FixedRounds, fixedWindow(*full), step(*full))
	md.WriteString("## Ratios\n\n" + cmp.Markdown())
	if footnote {
		md.WriteString("\n¹ An EPP failed exchanges in that run (at the fixed rate it did not hold it, or with 16 streams; see its row): its CPU per request is per answered request, and its p99 covers only those.\n")
	}
	md.WriteString("\n## All numbers\n\n" + tb.Markdown())
	fmt.Fprintf(&md, "\n![max rate](%s-max-rate.svg)\n![p99](%s-p99.svg)\n![per CPU](%s-per-cpu.svg)\n", name, name, name)
	must(t, os.WriteFile(filepath.Join(dir, name+".md"), []byte(md.String()), 0o644))
}

// fixedCell is a point's fixed-rate run: what was served, and the
// latencies of what was answered.
func fixedCell(p *Point) string {
	if p.NoRoute != "" {
		return "not measured: " + p.NoRoute
	}
	at := fmt.Sprintf("@ %s/s: ", report.Num(p.FixedRate))
	if p.FixedFailed > 0 {
		at += fmt.Sprintf("%d failed, ", p.FixedFailed)
	}
	if p.FixedServed == 0 {
		return at + "none answered"
	}
	return at + fmt.Sprintf("%s/s, %.2f / %.2f ms", report.Num(p.FixedServed), float64(p.P50us)/1000, float64(p.P99us)/1000)
}

// cpuCell is a CPU figure of a point, or a dash when it answered nothing
// at the fixed rate.
func cpuCell(v float64) string {
	if v <= 0 {
		return "–"
	}
	return report.Num(v)
}

func step(full bool) string {
	if full {
		return "5 s"
	}
	return "2 s"
}

// roundSteps is how many steps one fixed-rate round lasts: two in the
// full run, one in the short one, so that make bench stays within its 10
// minutes with FixedRounds rounds per cell.
func roundSteps(full bool) int {
	if full {
		return 2
	}
	return 1
}

// fixedWindow is the length of one fixed-rate round, for the table.
func fixedWindow(full bool) string {
	if roundSteps(full) == 1 {
		return "one step"
	}
	return fmt.Sprintf("%d steps", roundSteps(full))
}

func kb(n int) string { return fmt.Sprintf("%d KB", n>>10) }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
