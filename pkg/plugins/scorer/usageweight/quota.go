package usageweight

import (
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/pkg/internal/monotime"
)

// Axis names of an Observation, as the admin API shows them.
const (
	AxisRequests = "requests"
	AxisTokens   = "tokens"
)

// maxHeaderValue bounds the raw header values an Observation keeps (the
// admin API shows them); longer values are cut.
const maxHeaderValue = 64

// header is one rate-limit header the parser recognises: which axis it
// feeds, under which name within the axis (tokens, input-tokens, ...), and
// whether it is the limit or the remaining value.
type header struct {
	axis  int // 0 requests, 1 tokens
	part  int // index of the token sub-axis (0 for requests)
	limit bool
}

// Sub-axes of the token axis: each gives a ratio, the smallest counts.
const (
	partTokens = iota
	partInputTokens
	partOutputTokens
	partUnifiedTokens
	numParts
)

// Request sub-axes: the provider's own and Anthropic's unified alias.
const (
	partRequests = iota
	partUnifiedRequests
)

// headers maps every recognised (lower-case) header name to its role.
var headers = map[string]header{
	"anthropic-ratelimit-requests-limit":             {0, partRequests, true},
	"anthropic-ratelimit-requests-remaining":         {0, partRequests, false},
	"anthropic-ratelimit-unified-requests-limit":     {0, partUnifiedRequests, true},
	"anthropic-ratelimit-unified-requests-remaining": {0, partUnifiedRequests, false},
	"x-ratelimit-limit-requests":                     {0, partRequests, true},
	"x-ratelimit-remaining-requests":                 {0, partRequests, false},
	"anthropic-ratelimit-tokens-limit":               {1, partTokens, true},
	"anthropic-ratelimit-tokens-remaining":           {1, partTokens, false},
	"anthropic-ratelimit-input-tokens-limit":         {1, partInputTokens, true},
	"anthropic-ratelimit-input-tokens-remaining":     {1, partInputTokens, false},
	"anthropic-ratelimit-output-tokens-limit":        {1, partOutputTokens, true},
	"anthropic-ratelimit-output-tokens-remaining":    {1, partOutputTokens, false},
	"anthropic-ratelimit-unified-tokens-limit":       {1, partUnifiedTokens, true},
	"anthropic-ratelimit-unified-tokens-remaining":   {1, partUnifiedTokens, false},
	"x-ratelimit-limit-tokens":                       {1, partTokens, true},
	"x-ratelimit-remaining-tokens":                   {1, partTokens, false},
}

// AxisObservation is what one response said about one axis.
type AxisObservation struct {
	// Usable is true when some sub-axis had both a limit and a remaining
	// value with limit > 0; only then is Ratio used for ranking.
	Usable bool
	// Ratio is clamp(remaining/limit, 0, 1), the smallest over the usable
	// sub-axes (tokens, input-tokens, output-tokens, unified tokens for
	// the token axis).
	Ratio float64
}

// Observation is the rate-limit state one response reported: one per
// endpoint, replaced by every response that arrives. Immutable once
// published.
type Observation struct {
	// At is when the response headers arrived.
	At time.Time
	// Requests and Tokens are the two axes.
	Requests, Tokens AxisObservation
	// Headers are the recognised headers as received (values cut to 64
	// bytes), for the admin API; at most len(headers) entries.
	Headers map[string]string

	at   int64    // At as monotime.Nanos: ages do not move with the wall clock
	base *obsBase // metered use at the observation (set by the scorer)
}

// Axis returns the named axis (AxisRequests or AxisTokens).
func (o *Observation) axis(i int) *AxisObservation {
	if i == 0 {
		return &o.Requests
	}
	return &o.Tokens
}

// ParseRateLimitHeaders reads the OpenAI x-ratelimit-* and Anthropic
// anthropic-ratelimit-* (and anthropic-ratelimit-unified-*) limit and
// remaining headers from h (lower-case names, as scheduling.Response has
// them). An axis is usable only when one of its sub-axes has both a
// limit and a remaining value that parse as finite non-negative numbers
// with limit > 0; its ratio is clamp(remaining/limit, 0, 1), and the
// token axis takes the smallest ratio of its sub-axes. ok is false when h
// holds none of the recognised headers. Values that do not parse are kept
// in Headers but count as absent.
func ParseRateLimitHeaders(h map[string]string, at time.Time) (o Observation, ok bool) {
	var limit, remaining [2][numParts]float64
	var hasLimit, hasRemaining [2][numParts]bool
	for name, v := range h {
		hd, known := headers[name]
		if !known {
			continue
		}
		if o.Headers == nil {
			o.Headers = make(map[string]string, 4)
		}
		o.Headers[name] = cut(v)
		n, good := parseCount(v)
		if !good {
			continue
		}
		if hd.limit {
			limit[hd.axis][hd.part], hasLimit[hd.axis][hd.part] = n, true
		} else {
			remaining[hd.axis][hd.part], hasRemaining[hd.axis][hd.part] = n, true
		}
	}
	if o.Headers == nil {
		return Observation{At: at, at: monotime.Nanos(at)}, false
	}
	o.At, o.at = at, monotime.Nanos(at)
	for a := range 2 {
		ax := o.axis(a)
		for p := range numParts {
			if !hasLimit[a][p] || !hasRemaining[a][p] || !(limit[a][p] > 0) {
				continue
			}
			r := min(max(remaining[a][p]/limit[a][p], 0), 1)
			if !ax.Usable || r < ax.Ratio {
				ax.Usable, ax.Ratio = true, r
			}
		}
	}
	return o, true
}

// parseCount parses a header value as a finite number >= 0 (providers
// send integers; a decimal is accepted).
func parseCount(v string) (float64, bool) {
	v = strings.TrimSpace(v)
	if v == "" || len(v) > 32 {
		return 0, false
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f < 0 || f > 1e18 || f != f {
		return 0, false
	}
	return f, true
}

func cut(v string) string {
	if len(v) > maxHeaderValue {
		return v[:maxHeaderValue]
	}
	return v
}
