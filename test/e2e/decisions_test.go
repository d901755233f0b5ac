package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/decisions"
)

// decisionsDoc fetches /debug/decisions with the metrics token.
func (c *cluster) decisionsDoc(t *testing.T, query url.Values) (int, decisions.Document) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, c.metrics+"/debug/decisions?"+query.Encode(), nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var doc decisions.Document
	if resp.StatusCode == http.StatusOK {
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&doc))
	}
	return resp.StatusCode, doc
}

// TestDecisionsExplainRequests sends requests through the gateway to an
// EPP with the default configuration (max-score picker) and finds each
// one in /debug/decisions: the recorded endpoint is the one the gateway
// used, and the recorded scores explain it (it has the highest weighted
// total, each total the sum of its scorers' weighted scores). A refused
// request is recorded with its status and reason, and the filters and
// query checks work on the running process.
func TestDecisionsExplainRequests(t *testing.T) {
	c := startClusterWith(t, 3, clusterOpts{eppArgs: []string{"--decision-buffer-size", "64"}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	const n = 12
	used := map[string]result{}
	for i := range n {
		id := fmt.Sprintf("decision-%02d", i)
		body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"system","content":%q},{"role":"user","content":"question %d"}],"max_tokens":4}`,
			modelName, systemPrompt(i%3), i)
		res, err := c.post(ctx, id, "/v1/chat/completions", body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.status, "%s: %s", id, res.body)
		require.NotEmpty(t, res.served, id)
		used[id] = res
	}
	// A refusal: a body that is not JSON.
	bad, err := c.post(ctx, "decision-bad", "/v1/chat/completions", `{"model":`)
	require.NoError(t, err)
	require.Equal(t, http.StatusBadRequest, bad.status)

	for id, res := range used {
		code, doc := c.decisionsDoc(t, url.Values{"request_id": {id}})
		require.Equal(t, http.StatusOK, code)
		require.Len(t, doc.Records, 1, id)
		r := doc.Records[0]
		require.Nil(t, r.Refusal, id)
		require.Equal(t, modelName, r.Model, id)
		require.Equal(t, res.served, r.Targets[0], "%s: the recorded target is the endpoint the gateway used", id)
		require.Equal(t, res.sim, r.Endpoint, id)
		require.NotEmpty(t, r.Profiles, id)
		var run = r.Profiles[len(r.Profiles)-1]
		require.Equal(t, r.PrimaryProfile, run.Profile, id)
		require.Equal(t, r.Endpoint, run.Targets[0], id)
		require.NotEmpty(t, run.Scorers, id)
		require.Len(t, run.Endpoints, 3, "%s: every candidate listed (3 < the per-run cap)", id)
		chosen := -1
		for i, e := range run.Endpoints {
			sum := 0.0
			for _, s := range e.Scores {
				sum += s.Weighted
			}
			require.InDelta(t, e.Total, sum, 1e-9, "%s: %s's total is the sum of its weighted scores", id, e.Name)
			if e.Name == r.Endpoint {
				chosen = i
			}
		}
		require.GreaterOrEqual(t, chosen, 0, id)
		switch run.DecidedBy {
		case "", "scorers":
			for _, e := range run.Endpoints {
				require.GreaterOrEqual(t, run.Endpoints[chosen].Total, e.Total,
					"%s: the max-score pick %s must have the highest weighted total", id, r.Endpoint)
			}
		default:
			t.Fatalf("%s: decidedBy %q with the default max-score picker", id, run.DecidedBy)
		}
	}

	code, doc := c.decisionsDoc(t, url.Values{"request_id": {"decision-bad"}})
	require.Equal(t, http.StatusOK, code)
	require.Len(t, doc.Records, 1)
	require.Equal(t, &decisions.Refusal{Status: 400, Reason: "bad_request", Message: doc.Records[0].Refusal.Message}, doc.Records[0].Refusal)

	// Filters: by endpoint (the records that went there) and by model.
	endpoint := used["decision-00"].served
	want := 0
	for _, res := range used {
		if res.served == endpoint {
			want++
		}
	}
	_, doc = c.decisionsDoc(t, url.Values{"endpoint": {endpoint}})
	require.Len(t, doc.Records, want)
	_, doc = c.decisionsDoc(t, url.Values{"model": {modelName}, "limit": {"5"}})
	require.Len(t, doc.Records, 5)
	require.Equal(t, 64, doc.Size)

	code, _ = c.decisionsDoc(t, url.Values{"limit": {"65"}})
	require.Equal(t, http.StatusBadRequest, code)
	code, _ = c.decisionsDoc(t, url.Values{"requestid": {"x"}})
	require.Equal(t, http.StatusBadRequest, code)
}
