package extproc

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/plugins/filter/callerscope"
	"github.com/switchyard-ai/switchyard/pkg/plugins/filter/servedmodel"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// TestRefusalBodies: the admission plugins' reasons get OpenAI-style
// bodies (type and string code), with Retry-After on the 503s; the
// constants here are the plugins' own.
func TestRefusalBodies(t *testing.T) {
	assert.Equal(t, servedmodel.ReasonModelUnavailable, ReasonModelUnavailable)
	assert.Equal(t, callerscope.ReasonScopeUnavailable, ReasonScopeUnavailable)
	for _, tt := range []struct {
		reason, typ string
		status      int
	}{
		{ReasonModelNotFound, "invalid_request_error", http.StatusNotFound},
		{ReasonCallerNotAllowed, "permission_error", http.StatusForbidden},
		{ReasonModelUnavailable, "server_error", http.StatusServiceUnavailable},
		{ReasonScopeUnavailable, "server_error", http.StatusServiceUnavailable},
	} {
		r := &refusal{status: tt.status, reason: tt.reason, message: "m"}
		imm := r.immediate().GetImmediateResponse()
		require.NotNil(t, imm, tt.reason)
		assert.JSONEq(t, `{"error":{"message":"m","type":"`+tt.typ+`","param":null,"code":"`+tt.reason+`"}}`, string(imm.GetBody()), tt.reason)
		retry := false
		for _, h := range imm.GetHeaders().GetSetHeaders() {
			retry = retry || h.GetHeader().GetKey() == "retry-after"
		}
		assert.Equal(t, tt.status == http.StatusServiceUnavailable, retry, tt.reason)
	}
}

// TestRefusalRetryAfterAndType: an admission refusal's RetryAfter becomes
// the Retry-After header in whole seconds (rounded up, at least 1) and
// its ErrorType the body's OpenAI type, with the reason as the code.
func TestRefusalRetryAfterAndType(t *testing.T) {
	for _, tt := range []struct {
		after time.Duration
		want  string
	}{{0, "1"}, {time.Millisecond, "1"}, {3 * time.Second, "3"}, {6500 * time.Millisecond, "7"}} {
		r := fromScheduling(&scheduling.Refusal{StatusCode: http.StatusTooManyRequests, Reason: "model_shed", Message: "m",
			RetryAfter: tt.after, ErrorType: "rate_limit_exceeded"})
		imm := r.immediate().GetImmediateResponse()
		got := ""
		for _, h := range imm.GetHeaders().GetSetHeaders() {
			if h.GetHeader().GetKey() == "retry-after" {
				got = string(h.GetHeader().GetRawValue())
			}
		}
		assert.Equal(t, tt.want, got, tt.after)
		assert.JSONEq(t, `{"error":{"message":"m","type":"rate_limit_exceeded","param":null,"code":"model_shed"}}`, string(imm.GetBody()))
	}
}
