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
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
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

// recorder is a prometheus.Registerer that notes the fully-qualified name
// of every metric described by a collector registered on it, and passes the
// registration on to a real registry (so "already registered" behaves as
// in the binaries).
type recorder struct {
	reg   *prometheus.Registry
	mu    sync.Mutex
	names map[string]string // name -> where it came from
	from  string
}

var (
	fqName         = regexp.MustCompile(`fqName: "([^"]+)"`)
	nestedInstance = regexp.MustCompile(`no ([a-z-]+) instance "([^"]+)"`)
)

func newRecorder() *recorder {
	return &recorder{reg: prometheus.NewRegistry(), names: map[string]string{}}
}

func (r *recorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 64)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			r.add(m[1])
		}
	}
	return r.reg.Register(c)
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

func (r *recorder) Unregister(c prometheus.Collector) bool { return r.reg.Unregister(c) }

func (r *recorder) add(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.names[name]; !ok {
		r.names[name] = r.from
	}
}

// sourceDeclared are metrics registered by code this test cannot build
// cheaply (they need a running server or relay), each with the file that
// declares it. The test checks that the file still holds the name, so the
// list cannot rot silently; the running check against a scraped EPP and
// site-relay is the e2e test's.
var sourceDeclared = map[string]string{
	"switchyard_endpoints":                   "pkg/server/eligibility.go",
	"switchyard_endpoint_health":             "pkg/server/eligibility.go",
	"switchyard_site_topology_reloads_total": "pkg/multisite/topology/watcher.go",
}

// declaredMetrics returns every metric name Switchyard's EPP, its plugins,
// the site-relay and the model-server simulator declare: it builds their
// metrics on a recording Registerer, scrapes a real modelsim over HTTP,
// and adds the exported name constants of the site-relay and the flow
// controller.
func declaredMetrics(t *testing.T) map[string]string {
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
	rec.from = "exported constants"
	for _, n := range []string{
		server.NameFlowPoolSaturation, server.NameFlowQueueUtilization, server.NameFlowOutcomes,
		relay.MetricPeerPolls, relay.MetricPeerLastSuccess, relay.MetricPeerRounds, relay.MetricPeerDropped,
		relay.MetricTruncated, relay.MetricRequests, relay.MetricResponseBytes, relay.MetricScrapes,
		relay.MetricMetricsAvail, relay.MetricUnattributed,
	} {
		rec.add(n)
	}
	for name, file := range sourceDeclared {
		src, err := os.ReadFile(filepath.Join("..", "..", filepath.FromSlash(file)))
		if err != nil {
			t.Fatalf("sourceDeclared: %v", err)
		}
		if !strings.Contains(string(src), `"`+name+`"`) {
			t.Fatalf("sourceDeclared: %s no longer declares %q", file, name)
		}
		rec.from = file
		rec.add(name)
	}
	rec.from = "modelsim /metrics"
	for _, n := range scrapeModelsim(t) {
		rec.add(n)
	}
	return rec.names
}

// scrapeModelsim serves a model-server simulator on loopback and returns
// the metric family names of its /metrics.
func scrapeModelsim(t *testing.T) []string {
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
	var names []string
	for n := range fams {
		names = append(names, n)
	}
	if len(names) == 0 {
		t.Fatal("modelsim exposes no metrics")
	}
	return names
}
