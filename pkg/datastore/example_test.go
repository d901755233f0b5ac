package datastore_test

import (
	"fmt"
	"time"

	"github.com/switchyard-ai/switchyard/pkg/datastore"
)

// The request path reads one snapshot per request; endpoint sources and
// the scraper write to the store.
func ExampleStore() {
	store := datastore.New(datastore.Options{StalenessThreshold: 2 * time.Second})
	store.OnRemoved(func(keys []string) { fmt.Println("removed:", keys) })
	if err := store.Replace([]datastore.EndpointSpec{
		{Name: "sim-0", Address: "127.0.0.1", Port: 8001},
		{Name: "sim-1", Address: "::1", Port: 8002, Weight: 2},
	}); err != nil {
		panic(err)
	}
	store.SetSynced(true)

	// A scraper reports results; the publisher (or Flush) publishes them.
	store.SetScrapingEnabled(true)
	targets, _ := store.Targets()
	store.ReportScrape(targets[0].ID, datastore.ScrapeResult{Engine: "vllm"})
	store.ReportScrape(targets[1].ID, datastore.ScrapeResult{Err: fmt.Errorf("connection refused")})
	store.Flush()

	sn := store.Snapshot()
	for _, ep := range sn.Ready() {
		stats, _ := datastore.StatsKey.Get(ep)
		stats.Start(100)
		weight, _ := datastore.WeightKey.Get(ep)
		fmt.Println("ready:", ep.Name(), ep.HostPort(), "weight", weight, "in flight", stats.InFlight())
	}
	ep, _ := sn.ByHostPort("[::1]:8002")
	fmt.Println("stale:", ep.Name(), sn.Stale(ep), "fail-open:", sn.FailOpen())

	if err := store.Replace([]datastore.EndpointSpec{{Name: "sim-0", Address: "127.0.0.1", Port: 0}}); err != nil {
		fmt.Println(err)
	}
	store.Delete("sim-1")
	// Output:
	// ready: sim-0 127.0.0.1:8001 weight 1 in flight 1
	// stale: sim-1 true fail-open: false
	// invalid endpoints: endpoints[0].port: must be 1..65535, got 0
	// removed: [sim-1]
}
