package quality

import (
	"encoding/json"
	"encoding/xml"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSummarize(t *testing.T) {
	w := Workload{Name: "w", Prefixes: 1, QuestionTokens: 1, OutputTokens: 4,
		Steps: []Step{{Rate: 10, Duration: 10 * time.Second}, {Rate: 20, Duration: 10 * time.Second}}}
	ok := func(step int, at, ttft time.Duration, ep string) Outcome {
		return Outcome{Step: step, At: at, Status: 200, Endpoint: ep, StreamResult: StreamResult{TTFT: ttft, End: ttft + time.Second, Tokens: 4, Done: true}}
	}
	var outs []Outcome
	for i := range 100 { // step 0: TTFT 1..100 ms, endpoints a and b alternating
		outs = append(outs, ok(0, time.Duration(i)*100*time.Millisecond, time.Duration(i+1)*time.Millisecond, []string{"a", "b"}[i%2]))
	}
	outs = append(outs, ok(1, 19*time.Second, 500*time.Millisecond, "b")) // ends at 20.5 s: the window is 10.5 s
	outs = append(outs, Outcome{Step: 1, At: 10 * time.Second, Status: 503, Reason: "overloaded", Err: "status 503"})
	outs = append(outs, ok(1, 11*time.Second, 90*time.Second, "a")) // a saturated request: past 60 s
	outs = append(outs, Outcome{Step: 1, At: 12 * time.Second, Err: "Post: context deadline exceeded"})
	scrapes := [][]Counters{
		{{PrefixQueries: 0}, {PrefixQueries: 0}},
		{{PrefixQueries: 100, PrefixHits: 75}, {PrefixQueries: 100, PrefixHits: 25}},
		nil, // the last scrape failed
	}
	res := Summarize(w, "r", outs, scrapes, []string{"a", "b"})
	require.Len(t, res, 2)
	s0, s1 := res[0], res[1]
	assert.Equal(t, 100, s0.Sent)
	assert.Equal(t, 100, s0.OK)
	assert.Equal(t, []int{50, 50}, s0.PerEndpoint)
	assert.InDelta(t, 50, s0.TTFTp50, 0.1)
	assert.InDelta(t, 90, s0.TTFTp90, 0.1)
	assert.InDelta(t, 99, s0.TTFTp99, 0.1)
	assert.InDelta(t, 400.0/11.0, s0.TokensPerSec, 0.01, "the last request ends at 9.9 + 0.1 + 1 s")
	assert.InDelta(t, 0.5, s0.HitRate, 1e-9)
	assert.Equal(t, 4, s1.Sent)
	assert.Equal(t, 2, s1.Errors)
	assert.Equal(t, map[string]int{"HTTP 503 overloaded": 1, "client timeout": 1}, s1.ErrorKinds)
	assert.Empty(t, s0.ErrorKinds)
	assert.Equal(t, []int{1, 1}, s1.PerEndpoint)
	assert.InDelta(t, 90_000, s1.TTFTp99, 90, "a TTFT past 60 s is kept, not clamped")
	assert.InDelta(t, 8/(11+90+1-10.0), s1.TokensPerSec, 0.001, "the window runs to the slow request's end")
	assert.Equal(t, -1.0, s1.HitRate, "no scrape: no rate")
	_, err := json.Marshal(res)
	assert.NoError(t, err, "results encode as JSON")
}

func TestTablesAndChart(t *testing.T) {
	res := []StepResult{
		{Workload: "w", Router: "fast", Step: 0, Rate: 8, Sent: 80, TTFTp50: 10, TTFTp90: 20, TTFTp99: 30, TokensPerSec: 128, HitRate: 0.9, PerEndpoint: []int{40, 40}},
		{Workload: "w", Router: "slow", Step: 0, Rate: 8, Sent: 80, Errors: 2, TTFTp50: 30, TTFTp90: 60, TTFTp99: 90, TokensPerSec: 120, HitRate: -1, PerEndpoint: []int{70, 10}},
		{Workload: "w", Router: "fast", Step: 1, Rate: 16, Sent: 160, TTFTp90: 25, PerEndpoint: []int{80, 80}},
		{Workload: "other", Router: "fast", Step: 0, Rate: 1},
	}
	md := Table(res, "w", []string{"slow", "fast"}).Markdown()
	lines := strings.Split(strings.TrimSpace(md), "\n")
	require.Len(t, lines, 5, md)
	assert.Equal(t, "| 8/s | slow | 80 | 2 | 30.0 / 60.0 / 90.0 ms | 120 | – | 10–70 | 70 10 |", lines[2])
	assert.Equal(t, "| 8/s | fast | 80 | 0 | 10.0 / 20.0 / 30.0 ms | 128 | 90.0 % | 40–40 | 40 40 |", lines[3])
	assert.Contains(t, lines[4], "| 16/s | fast |")

	cmp := Compare(res, "w", [][2]string{{"slow", "fast"}}).Markdown()
	assert.Contains(t, cmp, "| 8/s | 3.00× |")
	assert.Contains(t, cmp, "| 16/s | – |", "slow has no step 1")

	svg := Chart(res, "w", []string{"slow", "fast"}, "p90", "ms", true, func(r StepResult) float64 { return r.TTFTp90 }).SVG()
	require.NoError(t, xml.Unmarshal([]byte(svg), new(struct{})), "well-formed")
	assert.Equal(t, 3, strings.Count(svg, "<title>"), "one bar per value")
	assert.Contains(t, svg, ">16/s<")
}

func TestErrorKind(t *testing.T) {
	tests := []struct {
		o    Outcome
		want string
	}{
		{Outcome{Status: 200, StreamResult: StreamResult{Tokens: 3, Done: true}}, ""},
		{Outcome{Status: 503, Reason: "epp_timeout", Err: "status 503: ..."}, "HTTP 503 epp_timeout"},
		{Outcome{Status: 429, Err: "status 429: queue full"}, "HTTP 429 -"},
		{Outcome{Err: `Post "http://127.0.0.1:1/v1/completions": context deadline exceeded`}, "client timeout"},
		{Outcome{Status: 200, Err: "context deadline exceeded (Client.Timeout or context cancellation while reading body)"}, "client timeout"},
		{Outcome{Status: 200, Err: errStreamCut, StreamResult: StreamResult{Tokens: 2}}, "stream cut"},
		{Outcome{Status: 200, Err: "error event: boom"}, "error event"},
		{Outcome{Status: 200, Err: `bad event "x": invalid`}, "bad event"},
		{Outcome{Status: 200, StreamResult: StreamResult{Done: true}}, "no tokens"},
		{Outcome{Err: "dial tcp 127.0.0.1:1: connect: connection refused"}, "transport"},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, tc.o.ErrorKind(), "%+v", tc.o)
	}
}

func TestErrorsCell(t *testing.T) {
	assert.Equal(t, "0", errorsCell(StepResult{}))
	assert.Equal(t, "701 (HTTP 503 overloaded 690, client timeout 10, stream cut 1)",
		errorsCell(StepResult{Errors: 701, ErrorKinds: map[string]int{"client timeout": 10, "HTTP 503 overloaded": 690, "stream cut": 1}}))
	assert.Equal(t, "2 (a 1, b 1)", errorsCell(StepResult{Errors: 2, ErrorKinds: map[string]int{"b": 1, "a": 1}}), "ties by name")
}
