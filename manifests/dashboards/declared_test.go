package dashboards

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/switchyard-ai/switchyard/pkg/datastore"
	"github.com/switchyard-ai/switchyard/pkg/datastore/scrape"
	"github.com/switchyard-ai/switchyard/pkg/metrics"
	"github.com/switchyard-ai/switchyard/pkg/modelsim"
	"github.com/switchyard-ai/switchyard/pkg/multisite/gwhealth"
	"github.com/switchyard-ai/switchyard/pkg/multisite/learner"
	"github.com/switchyard-ai/switchyard/pkg/multisite/poller"
	"github.com/switchyard-ai/switchyard/pkg/multisite/relay"
	"github.com/switchyard-ai/switchyard/pkg/multisite/sitestage"
	"github.com/switchyard-ai/switchyard/pkg/multisite/sitestate"
	"github.com/switchyard-ai/switchyard/pkg/multisite/sitestore"
	"github.com/switchyard-ai/switchyard/pkg/multisite/topology"
	"github.com/switchyard-ai/switchyard/pkg/plugins"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/server"
)

// declared is one declared metric: where it came from, its variable
// labels and whether it is a histogram or a summary (whose series are
// name_bucket with le, name_sum and name_count, or name with quantile,
// name_sum and name_count).
type declared struct {
	from   string
	labels []string
	kind   string // "", kindHistogram or kindSummary
}

const (
	kindHistogram = "histogram"
	kindSummary   = "summary"
)

// recorder is a prometheus.Registerer that notes the fully-qualified name,
// variable labels and kind of every metric described by a collector
// registered on it, and passes the registration on to a real registry (so
// "already registered" behaves as in the binaries).
type recorder struct {
	reg   *prometheus.Registry
	mu    sync.Mutex
	names map[string]*declared
	from  string
}

var (
	descRE         = regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}\}$`)
	nestedInstance = regexp.MustCompile(`no ([a-z-]+) instance "([^"]+)"`)
)

func newRecorder() *recorder {
	return &recorder{reg: prometheus.NewRegistry(), names: map[string]*declared{}}
}

// parseDesc returns a Desc's name and variable labels (a constrained
// label prints as c(name)).
func parseDesc(d *prometheus.Desc) (string, []string, bool) {
	m := descRE.FindStringSubmatch(d.String())
	if m == nil {
		return "", nil, false
	}
	labels := []string{}
	for _, l := range strings.Split(m[2], ",") {
		if l = strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")"); l != "" {
			labels = append(labels, l)
		}
	}
	return m[1], labels, true
}

func (r *recorder) Register(c prometheus.Collector) error {
	kind := ""
	switch c.(type) {
	case *prometheus.HistogramVec:
		kind = kindHistogram
	case *prometheus.SummaryVec:
		kind = kindSummary
	}
	ch := make(chan *prometheus.Desc, 64)
	go func() { c.Describe(ch); close(ch) }()
	var names []string
	for d := range ch {
		if name, labels, ok := parseDesc(d); ok {
			r.addLabels(name, labels, kind)
			names = append(names, name)
		}
	}
	// A vector wrapped in another type (a struct embedding a
	// *HistogramVec) gets a child, so that it collects one.
	if ov, ok := c.(prometheus.ObserverVec); ok && kind == "" && len(names) == 1 {
		n := len(r.names[names[0]].labels)
		_, _ = ov.GetMetricWithLabelValues(slices.Repeat([]string{"x"}, n)...)
	}
	// A collector that is not a vector (a single histogram, a wrapped
	// vector, or a custom collector) says its kind through the metrics it
	// collects.
	mc := make(chan prometheus.Metric, 64)
	go func() { c.Collect(mc); close(mc) }()
	for m := range mc {
		var pb dto.Metric
		if m.Write(&pb) != nil {
			continue
		}
		name, _, ok := parseDesc(m.Desc())
		if !ok {
			continue
		}
		switch {
		case pb.Histogram != nil:
			r.setKind(name, kindHistogram)
		case pb.Summary != nil:
			r.setKind(name, kindSummary)
		}
	}
	return r.reg.Register(c)
}

func (r *recorder) setKind(name, kind string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if d, ok := r.names[name]; ok {
		d.kind = kind
	}
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

func (r *recorder) Unregister(c prometheus.Collector) bool { return r.reg.Unregister(c) }

func (r *recorder) addLabels(name string, labels []string, kind string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.names[name]; !ok {
		r.names[name] = &declared{from: r.from, labels: labels, kind: kind}
	}
}

// sourceDecl is a metric declared by code this test cannot build cheaply.
type sourceDecl struct {
	file   string
	labels []string
}

// sourceDeclared are metrics registered by code this test cannot build
// cheaply (they need a running server or relay, or an unexported
// constructor), each with the file that declares it and its variable
// labels. The test checks that the file still holds the name (as a string
// or the exported constant's value) and the label list as a Go literal, so
// the list cannot rot silently; the running check against a scraped EPP
// and site-relay is the e2e test's.
var sourceDeclared = map[string]sourceDecl{
	"switchyard_endpoints":                   {"pkg/server/eligibility.go", []string{"state"}},
	"switchyard_endpoint_health":             {"pkg/server/eligibility.go", []string{"endpoint", "state"}},
	"switchyard_site_topology_reloads_total": {"pkg/multisite/topology/watcher.go", []string{"result"}},
	server.NameFlowPoolSaturation:            {"pkg/server/flowcontrol.go", []string{"inference_pool"}},
	server.NameFlowQueueUtilization:          {"pkg/server/flowcontrol.go", []string{"limit"}},
	server.NameFlowOutcomes:                  {"pkg/server/flowcontrol.go", []string{"outcome"}},
	relay.MetricPeerPolls:                    {"pkg/multisite/relay/metrics.go", []string{"peer", "outcome"}},
	relay.MetricPeerLastSuccess:              {"pkg/multisite/relay/metrics.go", []string{"peer"}},
	relay.MetricPeerRounds:                   {"pkg/multisite/relay/metrics.go", nil},
	relay.MetricPeerDropped:                  {"pkg/multisite/relay/metrics.go", []string{"peer", "reason"}},
	relay.MetricTruncated:                    {"pkg/multisite/relay/metrics.go", []string{"store", "cut"}},
	relay.MetricRequests:                     {"pkg/multisite/relay/metrics.go", []string{"client"}},
	relay.MetricResponseBytes:                {"pkg/multisite/relay/metrics.go", []string{"client"}},
	relay.MetricScrapes:                      {"pkg/multisite/relay/metrics.go", []string{"provider", "result"}},
	relay.MetricMetricsAvail:                 {"pkg/multisite/relay/metrics.go", []string{"provider"}},
	relay.MetricUnattributed:                 {"pkg/multisite/relay/metrics.go", nil},
}

// declaredMetrics returns every metric name Switchyard's EPP, its plugins,
// the site-relay and the model-server simulator declare: it builds their
// metrics on a recording Registerer, scrapes a real modelsim over HTTP,
// and adds the exported name constants of the site-relay and the flow
// controller.
func declaredMetrics(t *testing.T) map[string]*declared {
	t.Helper()
	rec := newRecorder()
	step := func(from string, f func() error) {
		t.Helper()
		rec.from = from
		if err := f(); err != nil {
			t.Fatalf("%s: %v", from, err)
		}
	}
	step("pkg/metrics", func() error { _, err := metrics.New(rec, "pool"); return err })
	step("pkg/scheduling", func() error { _, err := scheduling.NewFrameworkMetrics(rec); return err })
	step("pkg/multisite/learner", func() error { _, err := learner.NewMetrics(rec); return err })
	step("pkg/multisite/sitestage", func() error {
		_, err := sitestage.New(sitestage.Options{Holder: &sitestate.Holder{}, LocalSite: "eu-1", Seed: 1, Registerer: rec})
		return err
	})
	step("pkg/multisite/gwhealth", func() error {
		_, err := gwhealth.New(gwhealth.Options{Targets: func() []gwhealth.Target { return nil }, Registerer: rec})
		return err
	})
	step("pkg/multisite/poller", func() error {
		top, _ := topology.Build(topology.Local{Site: "eu-1", Cluster: "gke-eu-1"}, nil, nil)
		_, err := poller.New(poller.Options{
			URL: "https://127.0.0.1:1/v1/site/signals", TLS: &tls.Config{MinVersion: tls.VersionTLS13},
			Store: sitestore.New(top), Topology: func() *topology.Topology { return top }, Registerer: rec,
		})
		return err
	})
	step("pkg/datastore/scrape", func() error {
		_, err := scrape.NewScraper(datastore.New(datastore.Options{}), scrape.Config{}, scrape.Options{Registerer: rec})
		return err
	})
	// Every in-tree plugin with default parameters: those that need
	// parameters fail and are skipped, the others register their metrics.
	reg := plugins.InTree()
	types := reg.Types()
	sort.Strings(types)
	for _, typ := range types {
		r, _ := reg.Lookup(typ)
		rec.from = "plugin " + typ
		h := scheduling.NewHandle(scheduling.HandleOptions{Context: t.Context(), Registerer: rec, Seed: 1})
		p, err := r.Factory(typ, json.RawMessage(`{}`), h)
		// A picker built on a nested one (strategy-picker,
		// engine-load-picker) finds it on the handle, where the
		// configuration loader puts it: do the same, then retry.
		for i := 0; i < 3 && err != nil; i++ {
			m := nestedInstance.FindStringSubmatch(err.Error())
			if m == nil {
				break
			}
			nr, ok := reg.Lookup(m[1])
			if !ok {
				break
			}
			np, nerr := nr.Factory(m[2], json.RawMessage(`{}`), h)
			if nerr != nil {
				break
			}
			h.AddPlugin(m[2], np)
			p, err = r.Factory(typ, json.RawMessage(`{}`), h)
		}
		if err == nil {
			if c, ok := p.(io.Closer); ok {
				_ = c.Close()
			}
		}
	}
	for name, d := range sourceDeclared {
		src, err := os.ReadFile(filepath.Join("..", "..", filepath.FromSlash(d.file)))
		if err != nil {
			t.Fatalf("sourceDeclared: %v", err)
		}
		if !strings.Contains(string(src), `"`+name+`"`) {
			t.Fatalf("sourceDeclared: %s no longer declares %q", d.file, name)
		}
		if len(d.labels) > 0 {
			lit := `[]string{"` + strings.Join(d.labels, `", "`) + `"}`
			if !strings.Contains(string(src), lit) {
				t.Fatalf("sourceDeclared: %s no longer has the labels %s of %q", d.file, lit, name)
			}
		}
		rec.from = d.file
		rec.addLabels(name, d.labels, "")
	}
	rec.from = "modelsim /metrics"
	for n, d := range scrapeModelsim(t) {
		rec.addLabels(n, d.labels, d.kind)
	}
	return rec.names
}

// scrapeModelsim serves a model-server simulator on loopback and returns
// the metric families of its /metrics: their labels and kind.
func scrapeModelsim(t *testing.T) map[string]*declared {
	t.Helper()
	sim, err := modelsim.New(modelsim.DefaultConfig())
	if err != nil {
		t.Fatalf("modelsim: %v", err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	srv := httptest.NewServer(sim.Handler())
	t.Cleanup(srv.Close)
	req, err := http.NewRequestWithContext(context.WithoutCancel(t.Context()), http.MethodGet, srv.URL+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("scrape modelsim: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape modelsim: status %d", resp.StatusCode)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse modelsim metrics: %v", err)
	}
	out := map[string]*declared{}
	for n, f := range fams {
		d := &declared{labels: []string{}}
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			d.kind = kindHistogram
		case dto.MetricType_SUMMARY:
			d.kind = kindSummary
		}
		seen := map[string]bool{}
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if !seen[lp.GetName()] {
					seen[lp.GetName()] = true
					d.labels = append(d.labels, lp.GetName())
				}
			}
		}
		out[n] = d
	}
	if len(out) == 0 {
		t.Fatal("modelsim exposes no metrics")
	}
	return out
}
