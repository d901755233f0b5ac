package extproc

// The site step of the request path (multi-site, seed 000, issue 13):
// with Options.Sites set, a complete request first gets a site from the
// site stage (pkg/multisite/sitestage), before the candidates and the
// profiles; the local site is scheduled on the local pool as without
// multi-site, a remote site becomes the destination itself (its
// gateway's address), and nothing is scheduled here.

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/switchyard-ai/switchyard/pkg/multisite/sitestage"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
	"github.com/switchyard-ai/switchyard/pkg/tracing"
)

// Multi-site headers.
const (
	// OriginSiteHeader is set, to this EPP's site name, on a request
	// forwarded to another site's gateway. The EPP of the site that
	// receives it schedules it among its local pods only and never
	// forwards it again, so two sites cannot bounce a request between
	// them; it does so only when the value names a remote site of its
	// topology. See "Trusted headers" in the package documentation.
	OriginSiteHeader = "x-grid-origin-site"
	// SiteHeader and BackendHeader name, on every routed response, the
	// site and the cluster that served it (G-65).
	// HopsHeader is set, to "1", on a request forwarded to another
	// site; a request that carries it (a positive integer) is never
	// forwarded again, even if the origin header was lost on the way.
	HopsHeader    = "x-grid-hops"
	SiteHeader    = "x-grid-site"
	BackendHeader = "x-grid-backend"
)

// siteRoute is what the site step decided for a stream.
type siteRoute struct {
	// site and cluster are the x-grid-site and x-grid-backend values; ""
	// when no site was chosen (no site stage, or refused).
	site, cluster string
	// remote is the remote site's gateway (host:port) the request is
	// forwarded to; "" when it is scheduled locally.
	remote string
	// origin is this EPP's site, set as OriginSiteHeader on a forwarded
	// request.
	origin string
}

// siteStep runs the site stage for req. It returns the refusal to send,
// or whether the request goes to a remote site (st.site.remote).
//
// A request that came from another site's EPP stays local
// (ReasonInbound): one whose OriginSiteHeader names a remote site of the
// topology, or that carries HopsHeader (forwarded once already, should
// the origin header have been lost). It is not exempt from the local
// saturation shedding: the header only keeps a request here, it does not
// raise it. An origin header naming anything else (a forgery, this
// site's own name) is ignored and the request is decided like any other.
// A request carrying the gateway's subset hint (ReasonSubsetHint, unless
// Options.DisableSubsetFilter) stays local too: the hint names endpoints
// of the local pool, which a remote site does not have, so honouring it
// means scheduling here. All of them still get the stage's model checks
// (400, 404, the 429 of a shed model) and are never forwarded. For the
// others (decided by the stage, and the subset hint) saturation shedding
// no longer refuses: the seed's shedding rule, in the stage, is the one
// that does.
func (st *stream) siteStep(req *scheduling.Request) (*refusal, bool) {
	stage := st.s.opts.Sites
	var d sitestage.Decision
	span := st.child(tracing.SpanSiteStage)
	defer traceSite(span, &d)
	switch {
	case forwardedBefore(st.headers[HopsHeader]) || stage.RemoteSite(st.headers[OriginSiteHeader]):
		d = stage.KeepLocal(req.TargetModel, sitestage.ReasonInbound)
	case st.hasSubset && !st.s.opts.DisableSubsetFilter:
		req.SkipSaturationShedding = true
		d = stage.KeepLocal(req.TargetModel, sitestage.ReasonSubsetHint)
	default:
		req.SkipSaturationShedding = true
		d = stage.Decide(req.TargetModel, req.Prompt.Text)
	}
	st.explainSite(&d)
	if d.Refusal != nil {
		return fromScheduling(d.Refusal), false
	}
	st.site = siteRoute{site: d.Site, cluster: d.Cluster}
	if !d.Local {
		st.site.remote = d.Gateway
		st.site.origin, _ = stage.LocalSite()
	}
	return nil, !d.Local
}

// forwardedBefore reports whether a HopsHeader value says the request was
// forwarded by a site already: a positive decimal integer (this EPP sets
// "1"; anything else is ignored, never an error).
func forwardedBefore(v string) bool {
	if v == "" || len(v) > 3 {
		return false
	}
	n := 0
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return false
		}
		n = n*10 + int(v[i]-'0')
	}
	return n > 0
}

// localSite sets the site headers of a request routed locally without the
// site step (a request without body).
func (st *stream) localSite() {
	if stage := st.s.opts.Sites; stage != nil {
		st.site.site, st.site.cluster = stage.LocalSite()
	}
}

// routeRemote forwards the request, body unchanged, to the remote site's
// gateway. Nothing is scheduled locally, so no completion hooks run and
// the response passes through (with the site headers).
func (st *stream) routeRemote(end bodyEnd) ([]*extprocv3.ProcessingResponse, bool) {
	st.req = nil
	body := st.body
	st.phase = phaseForwarded
	st.forwardedAt = st.s.now()
	st.recordRouted(nil)
	if st.v(3).Enabled() {
		st.v(3).Info("Routed to another site", "model", st.parsed.Model, "site", st.site.site, "cluster", st.site.cluster,
			"gateway", st.site.remote, "bodyBytes", len(body))
	}
	out := make([]*extprocv3.ProcessingResponse, 0, 1+len(body)/BodyChunkLimit+1)
	out = append(out, st.headersResponse(len(body)))
	if end != endHeaders {
		out = appendBodyChunks(out, body, end == endBody, requestBodyResponse)
	}
	if end == endTrailers {
		out = append(out, &extprocv3.ProcessingResponse{
			Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}},
		})
	}
	st.body = nil
	st.release()
	return out, false
}

// destination is the request's destination: the remote site's gateway,
// or the scheduled endpoints.
func (st *stream) destination() string {
	if st.site.remote != "" {
		return st.site.remote
	}
	return joinTargets(st.targets)
}

// siteRequestHeaders adds OriginSiteHeader and HopsHeader (1: a request
// that carried it is never forwarded) to a request forwarded to another
// site; both replace what the client sent.
func (st *stream) siteRequestHeaders(set []*corev3.HeaderValueOption) []*corev3.HeaderValueOption {
	if st.site.remote != "" {
		set = append(set, headerOption(OriginSiteHeader, st.site.origin), headerOption(HopsHeader, "1"))
	}
	return set
}

// siteResponseHeaders adds x-grid-site and x-grid-backend to the response
// headers of a routed request (G-65). A reply of the gateway itself
// (no route, upstream failures) passes the response path too: it names
// the site it was meant for.
func (st *stream) siteResponseHeaders(set []*corev3.HeaderValueOption) []*corev3.HeaderValueOption {
	if st.site.site != "" {
		set = append(set, headerOption(SiteHeader, st.site.site), headerOption(BackendHeader, st.site.cluster))
	}
	return set
}
