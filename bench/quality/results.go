package quality

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/bench/loadgen"
	"github.com/switchyard-ai/switchyard/bench/report"
)

// StepResult is one router at one load step of one workload.
type StepResult struct {
	Workload string  `json:"workload"`
	Router   string  `json:"router"`
	Step     int     `json:"step"`
	Rate     float64 `json:"rate"`
	Sent     int     `json:"sent"`
	OK       int     `json:"ok"`
	Errors   int     `json:"errors"`
	// ErrorKinds counts the errors by Outcome.ErrorKind.
	ErrorKinds map[string]int `json:"errorKinds,omitempty"`
	// TTFT percentiles of the step's successful requests, in ms.
	TTFTp50 float64 `json:"ttftP50ms"`
	TTFTp90 float64 `json:"ttftP90ms"`
	TTFTp99 float64 `json:"ttftP99ms"`
	// TokensPerSec is the output tokens of the step's requests divided by
	// the time from the step's start to its last request's end (at least
	// the step's length).
	TokensPerSec float64 `json:"outputTokensPerSec"`
	// HitRate is the fleet's prefix-cache hit rate between the scrapes at
	// the step's start and end; -1 when nothing was looked up (JSON has
	// no NaN).
	HitRate float64 `json:"prefixHitRate"`
	// PerEndpoint counts the step's requests by the endpoint that served
	// them, in the fleet's order.
	PerEndpoint []int `json:"perEndpoint"`
}

// ttftBound is the longest TTFT the tables tell apart: above the
// replay's client timeout, so a saturated step's percentiles are not
// clamped (loadgen's default histogram ends at 60 s).
const ttftBound = 10 * time.Minute

// Summarize turns one router's outcomes into a StepResult per step.
// scrapes[i] is the fleet's counters at the start of step i
// (len(Steps)+1 entries; a missing entry gives a NaN hit rate); endpoints
// are the modelsim ids in fleet order.
func Summarize(w Workload, router string, outs []Outcome, scrapes [][]Counters, endpoints []string) []StepResult {
	idx := map[string]int{}
	for i, e := range endpoints {
		idx[e] = i
	}
	res := make([]StepResult, len(w.Steps))
	hists := make([]*loadgen.Histogram, len(w.Steps))
	tokens := make([]int, len(w.Steps))
	last := make([]time.Duration, len(w.Steps))
	for i, s := range w.Steps {
		res[i] = StepResult{Workload: w.Name, Router: router, Step: i, Rate: s.Rate, PerEndpoint: make([]int, len(endpoints)), HitRate: -1}
		hists[i] = loadgen.NewHistogramUpTo(ttftBound)
		if i+1 < len(scrapes) && scrapes[i] != nil && scrapes[i+1] != nil {
			if h := HitRate(scrapes[i], scrapes[i+1]); !math.IsNaN(h) {
				res[i].HitRate = h
			}
		}
	}
	for _, o := range outs {
		if o.Step < 0 || o.Step >= len(res) {
			continue
		}
		r := &res[o.Step]
		r.Sent++
		if j, ok := idx[o.Endpoint]; ok {
			r.PerEndpoint[j]++
		}
		if !o.OK() {
			r.Errors++
			if r.ErrorKinds == nil {
				r.ErrorKinds = map[string]int{}
			}
			r.ErrorKinds[o.ErrorKind()]++
			continue
		}
		r.OK++
		hists[o.Step].Record(o.TTFT)
		tokens[o.Step] += o.Tokens
		last[o.Step] = max(last[o.Step], o.At+o.Lag+o.End)
	}
	for i, s := range w.Steps {
		if res[i].OK > 0 {
			sum := hists[i].Summary()
			res[i].TTFTp50, res[i].TTFTp90, res[i].TTFTp99 = ms(sum.P50), ms(sum.P90), ms(sum.P99)
			window := max(last[i]-w.StepStart(i), s.Duration)
			res[i].TokensPerSec = float64(tokens[i]) / window.Seconds()
		}
	}
	return res
}

// errorsCell is a step's error count with its kinds, most frequent first:
// "701 (HTTP 503 overloaded 690, client timeout 11)".
func errorsCell(r StepResult) string {
	if r.Errors == 0 || len(r.ErrorKinds) == 0 {
		return fmt.Sprint(r.Errors)
	}
	kinds := make([]string, 0, len(r.ErrorKinds))
	for k := range r.ErrorKinds {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool {
		a, b := r.ErrorKinds[kinds[i]], r.ErrorKinds[kinds[j]]
		return a > b || a == b && kinds[i] < kinds[j]
	})
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = fmt.Sprintf("%s %d", k, r.ErrorKinds[k])
	}
	return fmt.Sprintf("%d (%s)", r.Errors, strings.Join(parts, ", "))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Table renders every result of one workload, routers in the given order
// within each step.
func Table(results []StepResult, workload string, routers []string) *report.Table {
	tb := &report.Table{Header: []string{"rate", "router", "sent", "errors", "TTFT p50 / p90 / p99", "output tok/s", "prefix hit", "requests per endpoint (min–max)", "per endpoint"}}
	for _, r := range ordered(results, workload, routers) {
		lo, hi := spread(r.PerEndpoint)
		per := make([]string, len(r.PerEndpoint))
		for i, n := range r.PerEndpoint {
			per[i] = fmt.Sprint(n)
		}
		tb.Rows = append(tb.Rows, []string{rate(r.Rate), r.Router, fmt.Sprint(r.Sent), errorsCell(r),
			fmt.Sprintf("%s / %s / %s ms", report.Num(r.TTFTp50), report.Num(r.TTFTp90), report.Num(r.TTFTp99)),
			report.Num(r.TokensPerSec), pct(r.HitRate), fmt.Sprintf("%d–%d", lo, hi), strings.Join(per, " ")})
	}
	return tb
}

// Compare renders, per step, router a's p90 TTFT divided by router b's
// for each pair (how many times faster b is).
func Compare(results []StepResult, workload string, pairs [][2]string) *report.Table {
	tb := &report.Table{Header: []string{"rate"}}
	for _, p := range pairs {
		tb.Header = append(tb.Header, fmt.Sprintf("p90 TTFT: %s / %s", p[0], p[1]))
	}
	find := func(router string, step int) *StepResult {
		for i := range results {
			if results[i].Workload == workload && results[i].Router == router && results[i].Step == step {
				return &results[i]
			}
		}
		return nil
	}
	for _, step := range steps(results, workload) {
		row := []string{}
		for _, p := range pairs {
			a, b := find(p[0], step), find(p[1], step)
			if len(row) == 0 {
				for _, x := range []*StepResult{a, b} {
					if x != nil {
						row = append(row, rate(x.Rate))
						break
					}
				}
			}
			if a == nil || b == nil || a.TTFTp90 <= 0 || b.TTFTp90 <= 0 {
				row = append(row, "–")
				continue
			}
			row = append(row, fmt.Sprintf("%.2f×", a.TTFTp90/b.TTFTp90))
		}
		if len(row) == len(pairs) {
			row = append([]string{"–"}, row...)
		}
		tb.Rows = append(tb.Rows, row)
	}
	return tb
}

// Chart draws one value per router (series) and step (group).
func Chart(results []StepResult, workload string, routers []string, title, ylabel string, log bool, value func(StepResult) float64) *report.BarChart {
	c := &report.BarChart{Title: title, YLabel: ylabel, Log: log}
	st := steps(results, workload)
	for _, s := range st {
		rt := math.NaN()
		for _, r := range results {
			if r.Workload == workload && r.Step == s {
				rt = r.Rate
			}
		}
		c.Groups = append(c.Groups, rate(rt))
	}
	for _, name := range routers {
		ser := report.Series{Name: name}
		for _, s := range st {
			v := math.NaN()
			for _, r := range results {
				if r.Workload == workload && r.Router == name && r.Step == s {
					v = value(r)
				}
			}
			ser.Values = append(ser.Values, v)
		}
		c.Series = append(c.Series, ser)
	}
	return c
}

func ordered(results []StepResult, workload string, routers []string) []StepResult {
	rank := map[string]int{}
	for i, r := range routers {
		rank[r] = i
	}
	var out []StepResult
	for _, r := range results {
		if r.Workload == workload {
			if _, ok := rank[r.Router]; !ok {
				rank[r.Router] = len(rank)
			}
			out = append(out, r)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Step != out[j].Step {
			return out[i].Step < out[j].Step
		}
		return rank[out[i].Router] < rank[out[j].Router]
	})
	return out
}

func steps(results []StepResult, workload string) []int {
	seen := map[int]bool{}
	var out []int
	for _, r := range results {
		if r.Workload == workload && !seen[r.Step] {
			seen[r.Step] = true
			out = append(out, r.Step)
		}
	}
	sort.Ints(out)
	return out
}

func spread(xs []int) (lo, hi int) {
	if len(xs) == 0 {
		return 0, 0
	}
	lo, hi = xs[0], xs[0]
	for _, x := range xs {
		lo, hi = min(lo, x), max(hi, x)
	}
	return lo, hi
}

func pct(f float64) string {
	if math.IsNaN(f) || f < 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f %%", 100*f)
}

// rate formats a request rate: "8/s", "2.5/s".
func rate(r float64) string { return strconv.FormatFloat(r, 'g', -1, 64) + "/s" }
