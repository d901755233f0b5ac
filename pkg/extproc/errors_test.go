package extproc

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/plugins/filter/callerscope"
	"github.com/switchyard-ai/switchyard/pkg/plugins/filter/servedmodel"
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
