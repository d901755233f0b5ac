package poller

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOnIngestAfterEverySuccessfulPoll: the callback the EPP's control
// step runs on fires once per successful poll, after the rows are in the
// store, and never for a failed one.
func TestOnIngestAfterEverySuccessfulPoll(t *testing.T) {
	p := newPKI(t)
	rl := startRelay(t, p, p.relay, nil)
	var calls []uint64
	var r *rig
	r = newRig(t, rl.url(), p.clientTLS(p.relay.Identity()), func(o *Options) {
		o.OnIngest = func() { calls = append(calls, r.store.Snapshot().Ingests) }
	})
	rl.serve(goodBody(), relayDate)
	require.Equal(t, ResultOK, r.poll(t))
	assert.Equal(t, []uint64{1}, calls, "called once, with the rows already ingested")
	rl.set(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "down", 503) })
	require.Equal(t, ResultUnreachable, r.poll(t))
	assert.Len(t, calls, 1, "not after a failed poll")
	rl.serve(goodBody(), relayDate)
	require.Equal(t, ResultOK, r.poll(t))
	assert.Equal(t, []uint64{1, 2}, calls)
}
