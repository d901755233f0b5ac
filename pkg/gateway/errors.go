package gateway

import (
	"encoding/json"
	"net/http"
	"strconv"
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
)

// localReply is a reply the gateway generates itself.
type localReply struct {
	status  int
	reason  string
	message string
}

// errorBody is the OpenAI-style error envelope.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
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
	body, err := json.Marshal(errorBody{Error: errorDetail{Message: l.message, Type: typ, Code: l.reason}})
	if err != nil { // cannot happen for these types; keep a valid body anyway
		body = []byte(`{"error":{"message":"internal error","type":"server_error","param":null,"code":"` + l.reason + `"}}`)
	}
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
