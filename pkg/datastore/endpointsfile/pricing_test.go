package endpointsfile_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/switchyard-ai/switchyard/pkg/datastore"
	"github.com/switchyard-ai/switchyard/pkg/datastore/endpointsfile"
	"github.com/switchyard-ai/switchyard/pkg/plugins/picker/leastcost"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// TestPricingReachesLeastCost follows a model's pricing from the endpoints
// file through the store to the least-cost picker's price lookup: an
// explicit price wins over the catalog, an entry without pricing takes the
// catalog's, and `pricing: null` shadows the catalog (C-23's shadowing
// rule), so the endpoint counts as unpriced.
func TestPricingReachesLeastCost(t *testing.T) {
	const file = `endpoints:
- name: priced
  address: 127.0.0.1
  port: 8001
  models: [{name: m, pricing: {input: 1, output: 2}}]
- name: catalog
  address: 127.0.0.1
  port: 8002
  models: [{name: m}]
- name: shadowed
  address: 127.0.0.1
  port: 8003
  models: [{name: m, pricing: null}]
- name: undeclared
  address: 127.0.0.1
  port: 8004
`
	path := filepath.Join(t.TempDir(), "endpoints.yaml")
	require.NoError(t, os.WriteFile(path, []byte(file), 0o600))
	store := datastore.New(datastore.Options{})
	require.NoError(t, endpointsfile.NewSource(path, store, logr.Discard(), prometheus.NewRegistry()).Load())

	catalog := map[string]scheduling.Price{"m": {Input: 5, Output: 6}}
	for _, tt := range []struct {
		endpoint string
		price    scheduling.Price
		priced   bool
	}{
		{"priced", scheduling.Price{Input: 1, Output: 2}, true},
		{"catalog", scheduling.Price{Input: 5, Output: 6}, true},
		{"shadowed", scheduling.Price{}, false},
		{"undeclared", scheduling.Price{Input: 5, Output: 6}, true},
	} {
		e, ok := store.Snapshot().Lookup(tt.endpoint)
		require.True(t, ok, tt.endpoint)
		price, priced := leastcost.LookupPrice(e, "m", catalog)
		assert.Equal(t, tt.priced, priced, "%s: priced", tt.endpoint)
		assert.Equal(t, tt.price, price, "%s: price", tt.endpoint)
	}
}
