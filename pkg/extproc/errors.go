package extproc

import (
	"net/http"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/switchyard-ai/switchyard/pkg/internal/apierror"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// ReasonHeader carries the machine-readable reason of a refusal.
const ReasonHeader = "x-switchyard-reason"

// Reasons the server itself refuses a request for. Admission plugins add
// their own (scheduling.Refusal.Reason, also a closed set per plugin).
const (
	ReasonBadRequest      = "bad_request"             // 400: the body is not a valid request
	ReasonBodyTooLarge    = "body_too_large"          // 413: above --max-request-body-bytes
	ReasonBodyTimeout     = "body_timeout"            // 408: the body was not complete within --request-body-timeout
	ReasonBufferExhausted = "buffer_budget_exhausted" // 503: the process-wide buffer budget (--max-buffered-request-bytes) is used up
	ReasonNoEndpoints     = "no_endpoints"            // 503: the pool has no ready endpoint
	ReasonSubsetNoMatch   = "subset_no_match"         // 503: the subset hint matched no endpoint
	ReasonNoneScheduled   = "none_schedulable"        // 503: every endpoint was filtered out
	ReasonProtocol        = "protocol_error"          // 400: messages out of order
	ReasonInternal        = "internal"                // 500: a bug
	ReasonShedSaturation  = "saturated"               // 429: sheddable request while saturated (scheduling.Scheduler.Admit)
)

// Refusal reasons of in-tree admission plugins whose body follows
// OpenAI's error codes (the error's type and a string code) rather than
// GIE's (the status name and the numeric status), since OpenAI clients
// look for them.
const (
	// ReasonModelNotFound: served-model-filter, 404, a model the pool
	// does not serve (OpenAI's model_not_found).
	ReasonModelNotFound = "model_not_found"
	// ReasonCallerNotAllowed: caller-scope-filter, 403, a caller left with
	// no endpoint it may use.
	ReasonCallerNotAllowed = "caller_not_allowed"
	// ReasonModelUnavailable: served-model-filter, 503, a model the pool
	// serves but none of whose endpoints is in rotation now.
	ReasonModelUnavailable = "model_unavailable"
	// ReasonScopeUnavailable: caller-scope-filter, 503, a caller whose
	// allowed endpoints are all out of rotation now.
	ReasonScopeUnavailable = "scope_unavailable"
)

// openAIType is the OpenAI error type of the reasons whose body carries
// the reason as its code.
func openAIType(reason string) (string, bool) {
	switch reason {
	case ReasonModelNotFound:
		return "invalid_request_error", true
	case ReasonCallerNotAllowed:
		return "permission_error", true
	case ReasonModelUnavailable, ReasonScopeUnavailable:
		return "server_error", true
	}
	return "", false
}

// errorCode maps an HTTP status to the GIE error code name, used in
// inference_objective_request_error_total{error_code} and the JSON body.
func errorCode(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "BadRequest"
	case http.StatusUnauthorized:
		return "Unauthorized"
	case http.StatusForbidden:
		return "Forbidden"
	case http.StatusNotFound:
		return "NotFound"
	case http.StatusRequestTimeout:
		return "RequestTimeout"
	case http.StatusRequestEntityTooLarge:
		return "RequestEntityTooLarge"
	case http.StatusTooManyRequests:
		return "ResourceExhausted"
	case http.StatusServiceUnavailable:
		return "ServiceUnavailable"
	default:
		return "Internal"
	}
}

// refusal is a request the server answers itself.
type refusal struct {
	status  int
	reason  string
	message string
	// retryAfter is the Retry-After of a 429 or 503 (0: one second).
	retryAfter time.Duration
	// errType is the OpenAI error type of the body, whose code is then
	// the reason ("" : openAIType's, else GIE's body).
	errType string
}

// fromScheduling converts an admission refusal.
func fromScheduling(r *scheduling.Refusal) *refusal {
	return &refusal{status: r.StatusCode, reason: r.Reason, message: r.Message, retryAfter: r.RetryAfter, errType: r.ErrorType}
}

// retryAfterValue is the Retry-After header value: whole seconds, at
// least one.
func retryAfterValue(d time.Duration) string {
	secs := int64((d + time.Second - 1) / time.Second)
	if secs < 1 {
		secs = 1
	}
	return strconv.FormatInt(secs, 10)
}

// immediate builds the ImmediateResponse for a refusal: status, an
// OpenAI-style JSON body, content-type and the reason header (and
// Retry-After on 429 and 503, which a client may retry).
func (r *refusal) immediate() *extprocv3.ProcessingResponse {
	body := apierror.JSON(r.message, errorCode(r.status), r.status)
	if typ, ok := openAIType(r.reason); ok {
		body = apierror.JSON(r.message, typ, r.reason)
	}
	if r.errType != "" {
		body = apierror.JSON(r.message, r.errType, r.reason)
	}
	headers := []*corev3.HeaderValueOption{
		{Header: &corev3.HeaderValue{Key: "content-type", RawValue: []byte("application/json")}},
		{Header: &corev3.HeaderValue{Key: ReasonHeader, RawValue: []byte(r.reason)}},
	}
	if r.status == http.StatusTooManyRequests || r.status == http.StatusServiceUnavailable {
		headers = append(headers, &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: "retry-after", RawValue: []byte(retryAfterValue(r.retryAfter))}})
	}
	return &extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_ImmediateResponse{
			ImmediateResponse: &extprocv3.ImmediateResponse{
				Status:  &typev3.HttpStatus{Code: typev3.StatusCode(r.status)},
				Headers: &extprocv3.HeaderMutation{SetHeaders: headers},
				Body:    body,
				Details: "switchyard: " + r.reason + " (" + strconv.Itoa(r.status) + ")",
			},
		},
	}
}
