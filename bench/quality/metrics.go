package quality

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// Counters are the modelsim (vLLM) counters the benchmark reads from one
// endpoint's /metrics, summed over their label sets.
type Counters struct {
	PrefixQueries float64 // vllm:prefix_cache_queries_total: prompt tokens looked up
	PrefixHits    float64 // vllm:prefix_cache_hits_total: of those, found in the cache
	Success       float64 // vllm:request_success_total: finished requests
}

// Metric names, as vLLM V1 exports them.
const (
	MetricPrefixQueries = "vllm:prefix_cache_queries_total"
	MetricPrefixHits    = "vllm:prefix_cache_hits_total"
	MetricSuccess       = "vllm:request_success_total"
)

// ParseCounters reads Prometheus text exposition format and sums the
// samples of the three counters. Other metrics and comments are skipped;
// a malformed sample of one of the three is an error.
func ParseCounters(r io.Reader) (Counters, error) {
	var c Counters
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest := line, ""
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name, rest = line[:i], line[i:]
		}
		var dst *float64
		switch name {
		case MetricPrefixQueries:
			dst = &c.PrefixQueries
		case MetricPrefixHits:
			dst = &c.PrefixHits
		case MetricSuccess:
			dst = &c.Success
		default:
			continue
		}
		if strings.HasPrefix(rest, "{") {
			end := strings.LastIndexByte(rest, '}')
			if end < 0 {
				return c, fmt.Errorf("line %d: unterminated labels", n)
			}
			rest = rest[end+1:]
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return c, fmt.Errorf("line %d: %s has no value", n, name)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return c, fmt.Errorf("line %d: %s: %w", n, name, err)
		}
		*dst += v
	}
	return c, sc.Err()
}

// Sub returns c − o (the counts between two scrapes).
func (c Counters) Sub(o Counters) Counters {
	return Counters{PrefixQueries: c.PrefixQueries - o.PrefixQueries, PrefixHits: c.PrefixHits - o.PrefixHits, Success: c.Success - o.Success}
}

// Add returns c + o.
func (c Counters) Add(o Counters) Counters {
	return Counters{PrefixQueries: c.PrefixQueries + o.PrefixQueries, PrefixHits: c.PrefixHits + o.PrefixHits, Success: c.Success + o.Success}
}

// HitRate is the fraction of looked-up prompt tokens found in the prefix
// cache between two fleet scrapes (each a slice with one entry per
// endpoint, in the same order), or NaN when nothing was looked up.
func HitRate(before, after []Counters) float64 {
	var d Counters
	for i := range after {
		var b Counters
		if i < len(before) {
			b = before[i]
		}
		d = d.Add(after[i].Sub(b))
	}
	if d.PrefixQueries <= 0 {
		return nan()
	}
	return d.PrefixHits / d.PrefixQueries
}

// Scrape reads the counters of every endpoint (base URLs such as
// http://127.10.200.1:8000) from its /metrics.
func Scrape(ctx context.Context, client *http.Client, endpoints []string) ([]Counters, error) {
	out := make([]Counters, len(endpoints))
	for i, e := range endpoints {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, e+"/metrics", nil)
		if err != nil {
			return nil, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		c, err := ParseCounters(resp.Body)
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("%s/metrics: %w", e, err)
		}
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("%s/metrics: status %d", e, resp.StatusCode)
		}
		out[i] = c
	}
	return out, nil
}
