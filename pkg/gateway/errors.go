package gateway

import (
	"net/http"
	"strconv"

	"github.com/switchyard-ai/switchyard/pkg/internal/apierror"
)

// Reasons the gateway puts in the x-switchyard-reason header (and the JSON
// error code) of the replies it generates itself.
const (
	ReasonRequestTooLarge        = "request_too_large"
	ReasonBadRequest             = "bad_request"
	ReasonEPPUnavailable         = "epp_unavailable"
	ReasonEPPTimeout             = "epp_timeout"
	ReasonEPPProtocolError       = "epp_protocol_error"
	ReasonNoRoute                = "no_route"
	ReasonUpstreamConnectFailure = "upstream_connect_failure"
	ReasonUpstreamReset          = "upstream_reset"
	ReasonRequestTimeout         = "request_timeout"  // 408: body not received within Options.BodyReadTimeout
	ReasonUpstreamTimeout        = "upstream_timeout" // 504: Options.UpstreamHeaderTimeout or UpstreamIdleTimeout
	ReasonOverloaded             = "overloaded"       // 503: Options.MaxConcurrentRequests requests in flight
)

// localReply is a reply the gateway generates itself.
type localReply struct {
	status  int
	reason  string
	message string
}

// render returns the reply's headers and JSON body.
func (l localReply) render() (http.Header, []byte) {
	typ := "server_error"
	switch {
	case l.status == http.StatusServiceUnavailable:
		typ = "service_unavailable"
	case l.status >= 400 && l.status < 500:
		typ = "invalid_request_error"
	}
	body := apierror.JSON(l.message, typ, l.reason)
	h := http.Header{
		hdrContentType:        []string{"application/json"},
		"X-Switchyard-Reason": []string{l.reason},
	}
	return h, body
}

// writeDirect writes the reply straight to the client.
func (l localReply) writeDirect(w http.ResponseWriter) {
	h, body := l.render()
	wh := w.Header()
	for k, v := range h {
		wh[k] = v
	}
	wh[hdrContentLength] = []string{strconv.Itoa(len(body))}
	w.WriteHeader(l.status)
	_, _ = w.Write(body)
}
