package learner

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/multisite/signals"
	"github.com/switchyard-ai/switchyard/pkg/multisite/sitestate"
	"github.com/switchyard-ai/switchyard/pkg/multisite/sitestore"
	"github.com/switchyard-ai/switchyard/pkg/multisite/topology"
)

// t0 is the relay's clock at the start of every test.
var t0 = time.UnixMilli(1_767_225_600_000)

// noGen marks a batch without a grid_provider_config_generation row.
const noGen = -1

// rig is one EPP's view: a topology (local site "a", peers "b" and "c"
// unless told otherwise), a site store fed by hand and a learner.
type rig struct {
	t     *testing.T
	top   *topology.Topology
	store *sitestore.Store
	l     *Learner
	last  *sitestate.Snapshot
}

type fakeHealth map[string]bool

func (h fakeHealth) Demoted(site, _ string) bool { return h[site] }

func defaultPeers() []topology.Site {
	return []topology.Site{
		{Name: "b", Cluster: "cb", Gateway: "127.0.0.2:8443"},
		{Name: "c", Cluster: "cc", Gateway: "127.0.0.3:8443"},
	}
}

func newRig(t *testing.T, set Settings, h Health, peers ...topology.Site) *rig {
	t.Helper()
	if peers == nil {
		peers = defaultPeers()
	}
	top, skipped := topology.Build(topology.Local{Site: "a", Cluster: "ca"}, peers, nil)
	require.Empty(t, skipped)
	require.NoError(t, set.Validate())
	return &rig{t: t, top: top, store: sitestore.New(top), l: New(Options{Settings: set, Health: h})}
}

// ld is one provider's readings at one instant.
type ld struct {
	running, queue, ready, flow, kv float64
	noKV                            bool
}

func cl(site string) string { return "c" + site }

// batch is a provider's qualified batch, as the relay relays it: the
// generation row (unless gen is noGen), publishes_load 1 and the load.
func batch(site, provider string, gen float64, stamp time.Time, l ld) []signals.Sample {
	s := func(name string, v float64) signals.Sample {
		return signals.Sample{Name: name, Site: site, Cluster: cl(site), Provider: provider, Value: v, Stamp: stamp}
	}
	var out []signals.Sample
	if gen != noGen {
		out = append(out, s(signals.NameConfigGeneration, gen))
	}
	out = append(out, s(signals.NamePublishesLoad, 1),
		s(signals.NameAverageRunning, l.running), s(signals.NameAverageQueue, l.queue),
		s(signals.NameReadyEndpoints, l.ready), s(signals.NameFlowControlQueue, l.flow))
	if !l.noKV {
		out = append(out, s(signals.NameAverageKVCache, l.kv))
	}
	return out
}

// publishes is a provider's publishes_load row alone.
func publishes(site, provider string, v float64, stamp time.Time) []signals.Sample {
	return []signals.Sample{{Name: signals.NamePublishesLoad, Site: site, Cluster: cl(site), Provider: provider, Value: v, Stamp: stamp}}
}

// rounds are the relay's judgement-clock rows for a peer.
func rounds(site string, end time.Time, n float64) []signals.Sample {
	return []signals.Sample{
		{Name: signals.NamePeerRoundEnd, Site: site, Value: float64(end.UnixMilli()) / 1000, Stamp: end},
		{Name: signals.NamePeerRounds, Site: site, Value: n, Stamp: end},
	}
}

// poll ingests one read of the relay with Date date (read at date on the
// EPP's clock too) and runs the control step.
func (r *rig) poll(date time.Time, parts ...[]signals.Sample) *sitestate.Snapshot {
	var all []signals.Sample
	for _, p := range parts {
		all = append(all, p...)
	}
	r.store.Ingest(all, date, date)
	return r.step(date)
}

// step runs the control step at now (a health tick) without an ingest.
func (r *rig) step(now time.Time) *sitestate.Snapshot {
	r.last = r.l.Step(now, r.top, r.store.Snapshot())
	require.Same(r.t, r.last, r.l.Holder().Load())
	return r.last
}

func site(t *testing.T, sn *sitestate.Snapshot, name string) sitestate.Site {
	t.Helper()
	for _, s := range sn.Sites {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no site %q", name)
	return sitestate.Site{}
}

func sec(n float64) time.Duration { return time.Duration(n * float64(time.Second)) }
