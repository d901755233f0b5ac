package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-ai/switchyard/pkg/extproc"
	"github.com/switchyard-ai/switchyard/pkg/metrics"
	"github.com/switchyard-ai/switchyard/pkg/server"
)

// demoObjectives is the demo's objectives file (--objectives-file): the two
// priorities of its flow-control bands.
const demoObjectives = `# Written by epp demo: request priorities by x-gateway-inference-objective.
objectives:
- name: interactive
  priority: 10
- name: batch
  priority: 0
`

// demoBands are the flow-control scene's bands, highest first.
var demoBands = [...]struct {
	objective string
	priority  int
}{{"interactive", 10}, {"batch", 0}}

// demoTenants send the burst's requests in turn.
var demoTenants = [...]string{"tenant-a", "tenant-b"}

// demoTTL is defaultRequestTTL in demo_config.yaml, scaled with
// --time-scale by demoConfigText.
const demoTTL = "defaultRequestTTL: 2s"

// flowScene is the demo's flow-control scene: a burst of requests, the
// two tenants and the two bands in turn, all sent at once, so the pool
// saturates, requests wait in the EPP by band, the bands overflow
// (queue_full) and batch waits past its TTL (ttl_expired).
type flowScene struct {
	url, model string
	n          int
	after      time.Duration // when the burst starts
	bands      [len(demoBands)]sceneBand
	started    atomic.Bool
	finished   atomic.Bool
	lastOther  atomic.Pointer[string] // why the last "other" answer was one
}

// other counts an answer that is neither served nor a flow-control refusal.
func (s *flowScene) other(b *sceneBand, why string) {
	b.other.Add(1)
	s.lastOther.Store(&why)
}

// sceneBand counts one band's burst requests by their answer.
type sceneBand struct {
	sent, ok, queueFull, ttlExpired, other atomic.Int64
}

// run sends the burst once, after s.after, and waits for every answer.
func (s *flowScene) run(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-time.After(s.after):
	}
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: s.n}}
	defer client.CloseIdleConnections()
	s.started.Store(true)
	var wg sync.WaitGroup
	for i := range s.n {
		band := &s.bands[i%len(demoBands)]
		objective := demoBands[i%len(demoBands)].objective
		tenant := demoTenants[(i/len(demoBands))%len(demoTenants)]
		body := fmt.Sprintf(`{"model":%q,"prompt":"Burst %d from %s: summarise flow control in one line.","max_tokens":32}`, s.model, i, tenant)
		wg.Add(1)
		go func() {
			defer wg.Done()
			band.sent.Add(1)
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/v1/completions", strings.NewReader(body))
			if err != nil {
				s.other(band, err.Error())
				return
			}
			req.Header.Set("content-type", "application/json")
			req.Header.Set("x-gateway-inference-objective", objective)
			req.Header.Set(extproc.FairnessHeader, tenant)
			resp, err := client.Do(req)
			if err != nil {
				s.other(band, err.Error())
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			switch {
			case resp.StatusCode == http.StatusOK:
				band.ok.Add(1)
			case resp.Header.Get(extproc.ReasonHeader) == extproc.ReasonQueueFull:
				band.queueFull.Add(1)
			case resp.Header.Get(extproc.ReasonHeader) == extproc.ReasonTTLExpired:
				band.ttlExpired.Add(1)
			default:
				s.other(band, fmt.Sprintf("%d %s", resp.StatusCode, resp.Header.Get(extproc.ReasonHeader)))
			}
		}()
	}
	wg.Wait()
	s.finished.Store(true)
}

// flowState is the EPP's flow-control state by priority, from its metrics.
type flowState struct {
	on       bool
	queued   map[int]float64 // waiting now
	released map[int]uint64  // dispatched so far
	waitSum  map[int]float64 // seconds waited by those dispatched
}

// readFlowState gathers the flow-control metrics of the EPP's registry.
func readFlowState(g prometheus.Gatherer) flowState {
	st := flowState{queued: map[int]float64{}, released: map[int]uint64{}, waitSum: map[int]float64{}}
	fams, err := g.Gather()
	if err != nil {
		return st
	}
	for _, f := range fams {
		switch f.GetName() {
		case metrics.NameFlowQueueSize:
			for _, m := range f.GetMetric() {
				if p, ok := priorityLabel(m.GetLabel()); ok {
					st.queued[p] += m.GetGauge().GetValue()
				}
			}
		case metrics.NameFlowQueueDuration:
			for _, m := range f.GetMetric() {
				p, ok := priorityLabel(m.GetLabel())
				if !ok || labelValue(m.GetLabel(), "outcome") != "Dispatched" {
					continue
				}
				st.released[p] += m.GetHistogram().GetSampleCount()
				st.waitSum[p] += m.GetHistogram().GetSampleSum()
			}
		case server.NameFlowOutcomes: // exported only with a flow controller
			st.on = true
		}
	}
	return st
}

type labelPair interface {
	GetName() string
	GetValue() string
}

func labelValue[L labelPair](ls []L, name string) string {
	for _, l := range ls {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func priorityLabel[L labelPair](ls []L) (int, bool) {
	p, err := strconv.Atoi(labelValue(ls, "priority"))
	return p, err == nil
}

// writeFlow appends the flow-control lines to the table: per band, what
// waits now, what was released and its mean wait (the EPP's metrics, all
// traffic), and the burst's requests by answer.
func writeFlow(w io.Writer, g prometheus.Gatherer, s *flowScene) {
	st := readFlowState(g)
	if !st.on {
		fmt.Fprintln(w, "flow control: off (the configuration has no flowControl feature gate)")
		return
	}
	var queued float64
	for _, v := range st.queued {
		queued += v
	}
	burst := "no burst"
	switch {
	case s == nil:
	case s.finished.Load():
		burst = fmt.Sprintf("burst of %d done", s.n)
	case s.started.Load():
		burst = fmt.Sprintf("burst of %d running", s.n)
	default:
		burst = fmt.Sprintf("burst of %d starts in a moment", s.n)
	}
	fmt.Fprintf(w, "flow control: %.0f queued; %s (two tenants, both bands)\n", queued, burst)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "BAND\tOBJECTIVE\tQUEUED\tRELEASED\tMEAN-WAIT\tBURST-SENT\tSERVED\tQUEUE-FULL\tTTL-EXPIRED\tOTHER")
	for i, b := range demoBands {
		wait := "-"
		if n := st.released[b.priority]; n > 0 {
			wait = (time.Duration(st.waitSum[b.priority] / float64(n) * float64(time.Second))).Round(time.Millisecond).String()
		}
		var sent, ok, full, ttl, other int64
		if s != nil {
			c := &s.bands[i]
			sent, ok, full, ttl, other = c.sent.Load(), c.ok.Load(), c.queueFull.Load(), c.ttlExpired.Load(), c.other.Load()
		}
		fmt.Fprintf(tw, "%d\t%s\t%.0f\t%d\t%s\t%d\t%d\t%d\t%d\t%d\n", b.priority, b.objective, st.queued[b.priority], st.released[b.priority], wait,
			sent, ok, full, ttl, other)
	}
	_ = tw.Flush()
	if s != nil {
		if why := s.lastOther.Load(); why != nil {
			fmt.Fprintf(w, "other: the last was %s\n", *why)
		}
	}
}

// ttlRe finds the demo configuration's defaultRequestTTL.
var ttlRe = regexp.MustCompile(regexp.QuoteMeta(demoTTL))

// scaleDemoTTL scales the embedded configuration's defaultRequestTTL with
// the simulated time, so the scene keeps its shape at any --time-scale.
func scaleDemoTTL(cfg string, timeScale float64) string {
	if timeScale == 1 || timeScale <= 0 {
		return cfg
	}
	ttl := max(time.Duration(float64(2*time.Second)*timeScale), 20*time.Millisecond)
	return ttlRe.ReplaceAllLiteralString(cfg, "defaultRequestTTL: "+ttl.String())
}
