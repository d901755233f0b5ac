package quality

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const metricsText = `# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1200
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 900
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 7
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 3
vllm:prefix_cache_hits_total_other 5
vllm:num_requests_running{engine="0",model_name="m"} 2
`

func TestParseCounters(t *testing.T) {
	c, err := ParseCounters(strings.NewReader(metricsText))
	require.NoError(t, err)
	assert.Equal(t, Counters{PrefixQueries: 1200, PrefixHits: 900, Success: 10}, c)

	c, err = ParseCounters(strings.NewReader("vllm:prefix_cache_hits_total 1.5e3\n"))
	require.NoError(t, err)
	assert.Equal(t, 1500.0, c.PrefixHits, "no labels, exponent")

	for _, bad := range []string{
		`vllm:prefix_cache_hits_total{engine="0" 12` + "\n",
		`vllm:prefix_cache_hits_total{engine="0"}` + "\n",
		`vllm:prefix_cache_queries_total{} abc` + "\n",
	} {
		_, err := ParseCounters(strings.NewReader(bad))
		assert.Error(t, err, bad)
	}
}

// TestHitRate: the rate is the hit tokens over the looked-up tokens of
// the whole fleet between two scrapes, not an average of per-endpoint
// rates.
func TestHitRate(t *testing.T) {
	before := []Counters{{PrefixQueries: 100, PrefixHits: 50}, {PrefixQueries: 0, PrefixHits: 0}}
	after := []Counters{{PrefixQueries: 1100, PrefixHits: 950}, {PrefixQueries: 1000, PrefixHits: 100}}
	assert.InDelta(t, (900.0+100)/(1000+1000), HitRate(before, after), 1e-12)
	assert.True(t, math.IsNaN(HitRate(after, after)), "no lookups")
	assert.InDelta(t, 1050.0/2100, HitRate(nil, after), 1e-12, "from zero")
}
