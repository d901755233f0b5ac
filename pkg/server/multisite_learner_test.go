package server

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/multisite/signals"
)

type demoteAll struct{}

func (demoteAll) Demoted(string, string) bool { return true }

// TestMultisiteLearner: the control step runs after the polls and on its
// tick; its snapshot is in SiteStates, on /debug/sites (the "learner"
// object, with its stable names) and in the grid_route_* gauges; the
// availability block of the configuration reaches it.
func TestMultisiteLearner(t *testing.T) {
	body := func() string {
		rows := ""
		for _, r := range []struct {
			site, cluster string
		}{{"site-a", "cluster-a"}, {"site-b", "cluster-b"}} {
			rows += signalsRow(signals.NameConfigGeneration, r.site, r.cluster, "pool", 1) +
				signalsRow(signals.NamePublishesLoad, r.site, r.cluster, "pool", 1) +
				signalsRow(signals.NameAverageRunning, r.site, r.cluster, "pool", 6) +
				signalsRow(signals.NameAverageQueue, r.site, r.cluster, "pool", 0) +
				signalsRow(signals.NameReadyEndpoints, r.site, r.cluster, "pool", 2) +
				signalsRow(signals.NameFlowControlQueue, r.site, r.cluster, "pool", 0) +
				signalsRow(signals.NameAverageKVCache, r.site, r.cluster, "pool", 0.25)
		}
		return rows + signalsRow(signals.NamePeerRoundEnd, "site-b", "", "", float64(time.Now().UnixMilli())/1000) +
			signalsRow(signals.NamePeerRounds, "site-b", "", "", 3)
	}
	f := startSignalsRelay(t, body)
	topo := filepath.Join(t.TempDir(), "topology.yaml")
	require.NoError(t, os.WriteFile(topo, []byte(topologyTwoSites), 0o600))
	const token = "a-test-token-of-32-bytes-0123456"
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte(token), 0o600))
	mc := f.config(topo)
	mc.Health = demoteAll{}
	mc.LearnInterval = 20 * time.Millisecond
	cfgText := "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\navailability:\n  shedding: true\n  freshnessWindowMs: 9000\n"
	s, _ := run(t, Config{EndpointsFile: sims(t, 2), Multisite: mc, MetricsTokenFile: tokenFile, ConfigText: cfgText})

	h := s.SiteStates()
	require.NotNil(t, h)
	require.Eventually(t, func() bool {
		sn := h.Load()
		return sn != nil && len(sn.Sites) == 2 && sn.Sites[0].CapacityKnown && sn.Sites[1].CapacityKnown
	}, 10*time.Second, 10*time.Millisecond)
	sn := h.Load()
	a, b := sn.Sites[0], sn.Sites[1]
	assert.Equal(t, "site-a", a.Name)
	assert.True(t, a.Local)
	assert.InDelta(t, 12, a.Ceiling, 0.01, "6 running × 2 ready, nothing waiting")
	assert.True(t, a.Ready && a.PublishesLoad && a.Telemetry && !a.Silent && !a.Demoted)
	assert.InDelta(t, 1, a.RhoCounted, 0.01, "steady at its soft bound")
	assert.InDelta(t, 0.25, a.RhoReported, 1e-9)
	assert.True(t, b.Demoted, "the Health source demotes remote sites")
	assert.Equal(t, "127.0.0.2:9", b.Gateway)
	assert.Equal(t, []string{"m"}, sn.Known)
	assert.True(t, sn.AnyModel, "site-b lists no models")
	// Ticks keep stepping without new polls mattering.
	v := sn.Version
	require.Eventually(t, func() bool { return h.Load().Version > v+2 }, 5*time.Second, 10*time.Millisecond)

	code, doc := get(t, s, "/debug/sites", token)
	require.Equal(t, http.StatusOK, code)
	var state SitesState
	require.NoError(t, json.Unmarshal([]byte(doc), &state))
	require.NotNil(t, state.Learner)
	assert.True(t, state.Learner.Shedding, "availability.shedding from the configuration")
	assert.Equal(t, "9s", state.Learner.FreshnessWindow)
	require.Len(t, state.Learner.Sites, 2)
	for _, k := range []string{`"ceilingSoft"`, `"ceilingHard": null`, `"ceiling"`, `"rhoCounted"`, `"rhoReported"`, `"rho"`, `"rhoFresh"`,
		`"ready"`, `"room"`, `"queued"`, `"full"`, `"silent"`, `"publishesLoad"`, `"demoted"`, `"weight"`, `"shed": []`} {
		assert.Contains(t, doc, k)
	}

	_, metrics := get(t, s, "/metrics", token)
	assert.Contains(t, metrics, `grid_route_site_ceiling{cluster="cluster-a",site="site-a"} 12`)
	assert.Contains(t, metrics, `grid_route_site_ceiling_hard{cluster="cluster-a",site="site-a"} NaN`)
	assert.Contains(t, metrics, `grid_route_site_weight{cluster="cluster-b",site="site-b"} 12`)
	assert.Contains(t, metrics, `grid_route_shedding{model="m"} 0`)
}

// TestMultisiteLearnerFollowsReloads: a configuration reload changes the
// availability settings the control step runs with.
func TestMultisiteLearnerFollowsReloads(t *testing.T) {
	f := startSignalsRelay(t, func() string {
		return signalsRow(signals.NameAverageRunning, "site-a", "cluster-a", "pool", 1) +
			signalsRow(signals.NamePublishesLoad, "site-a", "cluster-a", "pool", 1)
	})
	topo := filepath.Join(t.TempDir(), "topology.yaml")
	require.NoError(t, os.WriteFile(topo, []byte(topologyTwoSites), 0o600))
	cfgFile := filepath.Join(t.TempDir(), "epp.yaml")
	const head = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"
	require.NoError(t, os.WriteFile(cfgFile, []byte(head), 0o600))
	mc := f.config(topo)
	mc.LearnInterval = 10 * time.Millisecond
	s, _ := run(t, Config{EndpointsFile: sims(t, 1), Multisite: mc, ConfigFile: cfgFile})
	require.Eventually(t, func() bool { return s.Sites().Learner != nil }, 10*time.Second, 10*time.Millisecond)
	assert.False(t, s.Sites().Learner.Shedding)
	assert.Equal(t, "6s", s.Sites().Learner.FreshnessWindow, "the default")

	require.NoError(t, os.WriteFile(cfgFile, []byte(head+"availability: {shedding: true, freshnessWindowMs: 2500}\n"), 0o600))
	require.NoError(t, s.Reload())
	require.Eventually(t, func() bool { l := s.Sites().Learner; return l.Shedding && l.FreshnessWindow == "2.5s" }, 10*time.Second, 10*time.Millisecond)

	// A bad block is refused with its path; the last good settings stay.
	require.NoError(t, os.WriteFile(cfgFile, []byte(head+"availability: {smoothing: 7}\n"), 0o600))
	err := s.Reload()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "availability.smoothing")
	time.Sleep(50 * time.Millisecond)
	assert.True(t, s.Sites().Learner.Shedding)
}
