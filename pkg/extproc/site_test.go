package extproc_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	configfiles "github.com/switchyard-ai/switchyard/config"
	"github.com/switchyard-ai/switchyard/pkg/extproc"
	"github.com/switchyard-ai/switchyard/pkg/multisite/sitestage"
	"github.com/switchyard-ai/switchyard/pkg/multisite/sitestate"
)

// site is a measured, ready site with room and fresh rho.
func site(name string, local bool, gateway string) sitestate.Site {
	return sitestate.Site{Name: name, Cluster: name + "-cluster", Local: local, Gateway: gateway,
		Ready: true, Telemetry: true, PublishesLoad: true, Room: true, Rho: 0.2, RhoFresh: true, Capacity: 10, CapacityKnown: true}
}

// withSites gives the harness a site stage over holder.
func withSites(t testing.TB, holder *sitestate.Holder) func(*extproc.Options) {
	stage, err := sitestage.New(sitestage.Options{Holder: holder, LocalSite: "here", LocalCluster: "here-cluster", Seed: 5,
		Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	return func(o *extproc.Options) { o.Sites = stage }
}

// setHeaders are the header mutations of a headers response, by name.
func setHeaders(r *extprocv3.ProcessingResponse) map[string]string {
	m := map[string]string{}
	var hm *extprocv3.HeaderMutation
	switch v := r.Response.(type) {
	case *extprocv3.ProcessingResponse_RequestHeaders:
		hm = v.RequestHeaders.GetResponse().GetHeaderMutation()
	case *extprocv3.ProcessingResponse_ResponseHeaders:
		hm = v.ResponseHeaders.GetResponse().GetHeaderMutation()
	case *extprocv3.ProcessingResponse_ImmediateResponse:
		hm = v.ImmediateResponse.GetHeaders()
	}
	for _, h := range hm.GetSetHeaders() {
		m[h.GetHeader().GetKey()] = string(h.GetHeader().GetRawValue())
	}
	return m
}

const siteBody = `{"model":"m","prompt":"hello"}`

// A local pick is scheduled on the local pool as before, and the
// response names the site and cluster (G-65).
func TestG65_LocalPickIsScheduledAndNamed(t *testing.T) {
	holder := &sitestate.Holder{}
	holder.Store(&sitestate.Snapshot{Sites: []sitestate.Site{site("here", true, "")}, AnyModel: true})
	h := start(t, queueConfig, threePods(), withSites(t, holder))
	got := h.exchange(t, []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions"), body(siteBody, true),
		respHeaders("127.10.0.1:8000", false, ":status", "200"), respBody(`{}`, true)}, 4)
	hs := setHeaders(got[0])
	require.Equal(t, "127.10.0.1:8000", hs[extproc.DestinationHeader])
	require.NotContains(t, hs, extproc.OriginSiteHeader)
	rs := setHeaders(got[2])
	require.Equal(t, "here", rs[extproc.SiteHeader])
	require.Equal(t, "here-cluster", rs[extproc.BackendHeader])
	require.Equal(t, int64(1), h.counters.get("127.10.0.1:8000").started.Load())
	require.Eventually(t, h.counters.allZero, 5*time.Second, 5*time.Millisecond)

	// A request without body is routed locally and named too.
	got = h.exchange(t, []*extprocv3.ProcessingRequest{hdrs(true, ":method", "GET", ":path", "/v1/models"),
		respHeaders("", true, ":status", "200")}, 2)
	require.Equal(t, "here", setHeaders(got[1])[extproc.SiteHeader])
}

// A remote pick makes that site's gateway the destination: the body goes
// unchanged, the origin header is set, nothing is scheduled or counted
// locally, and the response names the remote site.
func TestSiteRemoteDestinationIsTheGateway(t *testing.T) {
	holder := &sitestate.Holder{}
	local := site("here", true, "")
	local.Ready = false
	holder.Store(&sitestate.Snapshot{Sites: []sitestate.Site{local, site("there", false, "127.0.0.2:9000")}, AnyModel: true})
	h := start(t, queueConfig, threePods(), withSites(t, holder))
	got := h.exchange(t, []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions", "x-gateway-model-name-rewrite", "m2"),
		body(siteBody, true), respHeaders("127.0.0.2:9000", false, ":status", "200"), respBody(`{"model":"m2"}`, true)}, 4)
	hs := setHeaders(got[0])
	require.Equal(t, "127.0.0.2:9000", hs[extproc.DestinationHeader])
	require.Equal(t, "127.0.0.2:9000", got[0].GetDynamicMetadata().GetFields()["envoy.lb"].GetStructValue().GetFields()[extproc.DestinationHeader].GetStringValue())
	require.Equal(t, "here", hs[extproc.OriginSiteHeader])
	require.Equal(t, strconv.Itoa(len(siteBody)), hs["content-length"])
	require.Equal(t, siteBody, string(got[1].GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetBody()),
		"the body goes to the remote site as the client sent it (the remote EPP applies the rewrite)")
	rs := setHeaders(got[2])
	require.Equal(t, "there", rs[extproc.SiteHeader])
	require.Equal(t, "there-cluster", rs[extproc.BackendHeader])
	for _, p := range threePods() {
		require.Zero(t, h.counters.get(p.HostPort()).started.Load(), "nothing is counted on a local pod")
	}
}

// A request from another site is scheduled among the local pods only and
// never forwarded again, even when the stage would pick a remote site;
// so is a request carrying the subset hint.
func TestSiteInboundAndSubsetHintStayLocal(t *testing.T) {
	holder := &sitestate.Holder{}
	local := site("here", true, "")
	local.Ready = false // the stage alone would always go remote
	holder.Store(&sitestate.Snapshot{Sites: []sitestate.Site{local, site("there", false, "127.0.0.2:9000")}, AnyModel: true})
	h := start(t, queueConfig, threePods(), withSites(t, holder))
	for _, msgs := range [][]*extprocv3.ProcessingRequest{
		{reqHeaders("/v1/completions", extproc.OriginSiteHeader, "there"), body(siteBody, true)},
		{withSubset(reqHeaders("/v1/completions"), list("127.10.0.2:8000")), body(siteBody, true)},
	} {
		msgs = append(msgs, respHeaders("", true, ":status", "200"))
		got := h.exchange(t, msgs, 3)
		hs := setHeaders(got[0])
		require.True(t, strings.HasPrefix(hs[extproc.DestinationHeader], "127.10.0."), "local pod: %v", hs)
		require.NotContains(t, hs, extproc.OriginSiteHeader)
		require.Equal(t, "here", setHeaders(got[2])[extproc.SiteHeader])
	}
	require.Eventually(t, h.counters.allZero, 5*time.Second, 5*time.Millisecond)
}

func TestG63_ShedModelGets429ThroughTheServer(t *testing.T) {
	holder := &sitestate.Holder{}
	holder.Store(&sitestate.Snapshot{Sites: []sitestate.Site{site("here", true, "")}, AnyModel: true, Shed: []string{"m"}})
	h := start(t, queueConfig, threePods(), withSites(t, holder))
	seen := map[string]bool{}
	for i := 0; i < 10; i++ {
		got := h.exchange(t, []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions"), body(siteBody, true)}, 1)
		ir := got[0].GetImmediateResponse()
		require.Equal(t, int32(429), int32(ir.GetStatus().GetCode()))
		hs := setHeaders(got[0])
		ra, err := strconv.Atoi(hs["retry-after"])
		require.NoError(t, err)
		require.True(t, ra >= 3 && ra <= 7, "Retry-After %d", ra)
		seen[hs["retry-after"]] = true
		require.Contains(t, string(ir.GetBody()), `"rate_limit_exceeded"`)
		require.Contains(t, string(ir.GetBody()), `"capacity_exhausted"`)
	}
	require.Len(t, seen, 5, "Retry-After spreads over 3 … 7 s")
	// A forged (or real) origin header does not escape shedding.
	got := h.exchange(t, []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions", extproc.OriginSiteHeader, "elsewhere"), body(siteBody, true)}, 1)
	require.Equal(t, int32(429), int32(got[0].GetImmediateResponse().GetStatus().GetCode()))
}

func TestG64_UnknownModel404AndNoSite503ThroughTheServer(t *testing.T) {
	holder := &sitestate.Holder{}
	s := site("here", true, "")
	s.Models = []string{"m"}
	holder.Store(&sitestate.Snapshot{Sites: []sitestate.Site{s}, Known: []string{"m"}})
	h := start(t, queueConfig, threePods(), withSites(t, holder))
	got := h.exchange(t, []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions"), body(`{"model":"x","prompt":"p"}`, true)}, 1)
	require.Equal(t, int32(404), int32(got[0].GetImmediateResponse().GetStatus().GetCode()))
	require.Contains(t, string(got[0].GetImmediateResponse().GetBody()), "model_not_found")
	s.Ready = false
	holder.Store(&sitestate.Snapshot{Sites: []sitestate.Site{s}, Known: []string{"m"}})
	got = h.exchange(t, []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions"), body(siteBody, true)}, 1)
	require.Equal(t, int32(503), int32(got[0].GetImmediateResponse().GetStatus().GetCode()))
	require.Contains(t, string(got[0].GetImmediateResponse().GetBody()), "no_healthy_site")
	require.NotEmpty(t, setHeaders(got[0])["retry-after"])
}

// With multi-site on, a saturated local pool does not shed a sheddable
// request: the site stage chose the site, and only its shedding rule
// refuses. Without the stage the same request is shed.
func TestSiteSaturationSheddingLeftToTheStage(t *testing.T) {
	objective := func(o *extproc.Options) {
		o.Objective = func(name string) (int, bool) { return -1, name == "batch" }
	}
	msgs := func() []*extprocv3.ProcessingRequest {
		return []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions", extproc.ObjectiveHeader, "batch"), body(siteBody, true),
			respHeaders("", true, ":status", "200")}
	}
	plain := start(t, queueConfig, threePods(), objective)
	got := plain.exchange(t, msgs(), 1)
	require.Equal(t, int32(429), int32(got[0].GetImmediateResponse().GetStatus().GetCode()), "threePods saturate the pool")

	holder := &sitestate.Holder{}
	holder.Store(&sitestate.Snapshot{Sites: []sitestate.Site{site("here", true, "")}, AnyModel: true})
	h := start(t, queueConfig, threePods(), objective, withSites(t, holder))
	got = h.exchange(t, msgs(), 3)
	require.Nil(t, got[0].GetImmediateResponse(), "not shed: %v", got[0])
	require.True(t, strings.HasPrefix(setHeaders(got[0])[extproc.DestinationHeader], "127.10.0."))
}

// BenchmarkRequestPathSites8 is BenchmarkRequestPath with the site stage
// over 8 sites, the local one the only site with room (so every request
// is still scheduled on the 100 local pods): the difference is the site
// step's cost on the whole path.
func BenchmarkRequestPathSites8(b *testing.B) {
	holder := &sitestate.Holder{}
	sites := []sitestate.Site{site("here", true, "")}
	for i := 1; i < 8; i++ {
		s := site("peer-"+strconv.Itoa(i), false, "127.0.0."+strconv.Itoa(i+1)+":9000")
		s.Room, s.Queued = false, true
		sites = append(sites, s)
	}
	holder.Store(&sitestate.Snapshot{Sites: sites, AnyModel: true})
	h := start(b, string(configfiles.Default), benchPods(100), withSites(b, holder))
	benchLoop(b, h.client)
}

// TestSiteOriginHeaderTrustedOnlyForARemoteSite: an origin header that
// names no remote site of the topology (a forgery, or this site's own
// name) is ignored: the request goes through the stage like any other,
// here to the remote site since the local one is unready, and the
// forwarded request carries the origin and hop headers (review finding 5).
func TestSiteOriginHeaderTrustedOnlyForARemoteSite(t *testing.T) {
	holder := &sitestate.Holder{}
	local := site("here", true, "")
	local.Ready = false
	holder.Store(&sitestate.Snapshot{Sites: []sitestate.Site{local, site("there", false, "127.0.0.2:9000")}, AnyModel: true})
	h := start(t, queueConfig, threePods(), withSites(t, holder))
	for _, forged := range []string{"nosuch", "here"} {
		got := h.exchange(t, []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions", extproc.OriginSiteHeader, forged),
			body(siteBody, true), respHeaders("", true, ":status", "200")}, 3)
		hs := setHeaders(got[0])
		require.Equal(t, "127.0.0.2:9000", hs[extproc.DestinationHeader], "origin %q: %v", forged, hs)
		require.Equal(t, "here", hs[extproc.OriginSiteHeader])
		require.Equal(t, "1", hs[extproc.HopsHeader])
	}
}

// TestSiteForwardedOnceIsNeverForwardedAgain: a request carrying the hop
// header stays local even without the origin header (stripped on the
// way), so a loop cannot form (review finding 5).
func TestSiteForwardedOnceIsNeverForwardedAgain(t *testing.T) {
	holder := &sitestate.Holder{}
	local := site("here", true, "")
	local.Ready = false
	holder.Store(&sitestate.Snapshot{Sites: []sitestate.Site{local, site("there", false, "127.0.0.2:9000")}, AnyModel: true})
	h := start(t, queueConfig, threePods(), withSites(t, holder))
	got := h.exchange(t, []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions", extproc.HopsHeader, "1"),
		body(siteBody, true), respHeaders("", true, ":status", "200")}, 3)
	hs := setHeaders(got[0])
	require.True(t, strings.HasPrefix(hs[extproc.DestinationHeader], "127.10.0."), "local pod: %v", hs)
	require.NotContains(t, hs, extproc.OriginSiteHeader)
	require.Eventually(t, h.counters.allZero, 5*time.Second, 5*time.Millisecond)
}

// TestSiteInboundIsNotExemptFromSaturationShedding: a request kept local
// because it came from another site (a valid origin) is shed by the local
// saturation shedding like a request without multi-site, so the header
// cannot be used to escape it (review finding 5).
func TestSiteInboundIsNotExemptFromSaturationShedding(t *testing.T) {
	objective := func(o *extproc.Options) {
		o.Objective = func(name string) (int, bool) { return -1, name == "batch" }
	}
	holder := &sitestate.Holder{}
	holder.Store(&sitestate.Snapshot{Sites: []sitestate.Site{site("here", true, ""), site("there", false, "127.0.0.2:9000")}, AnyModel: true})
	h := start(t, queueConfig, threePods(), objective, withSites(t, holder))
	for _, hdr := range []string{extproc.OriginSiteHeader, extproc.HopsHeader} {
		val := "there"
		if hdr == extproc.HopsHeader {
			val = "1"
		}
		got := h.exchange(t, []*extprocv3.ProcessingRequest{reqHeaders("/v1/completions", extproc.ObjectiveHeader, "batch", hdr, val),
			body(siteBody, true)}, 1)
		require.Equal(t, int32(429), int32(got[0].GetImmediateResponse().GetStatus().GetCode()), "%s: threePods saturate the pool", hdr)
	}
}
