package signals

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var date = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func ms(t time.Time) int64 { return t.UnixMilli() }

func prov(name, site, provider string, v float64, stamp time.Time) Sample {
	return Sample{Name: name, Site: site, Cluster: "c1", Provider: provider, Value: v, Stamp: stamp}
}

func TestParseLines(t *testing.T) {
	st := ms(date)
	tests := []struct {
		name    string
		line    string
		want    *Sample // nil: dropped as parse
		wantErr string  // part of FirstParseError
	}{
		{name: "provider row", line: fmt.Sprintf(`llm_d_epp_average_running_requests{grid_site="a",grid_cluster="c1",grid_provider="pool"} 3.5 %d`, st),
			want: &Sample{Name: NameAverageRunning, Site: "a", Cluster: "c1", Provider: "pool", Value: 3.5, Stamp: date}},
		{name: "labels in any order with blanks", line: fmt.Sprintf("llm_d_epp_ready_endpoints { grid_provider = \"p\" , grid_site=\"a\",grid_cluster=\"x.y\", }\t2 \t%d  ", st),
			want: &Sample{Name: NameReadyEndpoints, Site: "a", Cluster: "x.y", Provider: "p", Value: 2, Stamp: date}},
		{name: "peer round row", line: fmt.Sprintf(`grid_peer_poll_rounds_total{grid_site="b"} 7 %d`, st),
			want: &Sample{Name: NamePeerRounds, Site: "b", Value: 7, Stamp: date}},
		{name: "exponent", line: fmt.Sprintf(`grid_provider_config_generation{grid_site="a",grid_cluster="c",grid_provider="p"} 9.007199254740992e+15 %d`, st),
			want: &Sample{Name: NameConfigGeneration, Site: "a", Cluster: "c", Provider: "p", Value: 1 << 53, Stamp: date}},
		{name: "unknown series", line: `up{grid_site="a"} 1 1`, wantErr: `unknown series "up"`},
		{name: "bad name", line: `1abc 1 1`, wantErr: "invalid metric name"},
		{name: "no labels", line: `llm_d_epp_ready_endpoints 1 1`, wantErr: "needs grid_site, grid_cluster and grid_provider"},
		{name: "missing provider", line: `llm_d_epp_ready_endpoints{grid_site="a",grid_cluster="c"} 1 1`, wantErr: "needs grid_site"},
		{name: "extra label", line: `llm_d_epp_ready_endpoints{grid_site="a",grid_cluster="c",grid_provider="p",x="y"} 1 1`, wantErr: `unknown label "x"`},
		{name: "repeated label", line: `llm_d_epp_ready_endpoints{grid_site="a",grid_site="a",grid_cluster="c",grid_provider="p"} 1 1`, wantErr: "repeated label"},
		{name: "round row with provider", line: `grid_peer_poll_rounds_total{grid_site="b",grid_provider="p"} 1 1`, wantErr: "grid_site only"},
		{name: "provider not DNS-1123", line: `llm_d_epp_ready_endpoints{grid_site="a",grid_cluster="c",grid_provider="Pool_1"} 1 1`, wantErr: "grid_provider is not a DNS-1123 label"},
		{name: "site not DNS-1123", line: `grid_peer_poll_rounds_total{grid_site="-b"} 1 1`, wantErr: "grid_site is not"},
		{name: "cluster trailing dot", line: `llm_d_epp_ready_endpoints{grid_site="a",grid_cluster="c.",grid_provider="p"} 1 1`, wantErr: "grid_cluster"},
		{name: "escaped value", line: `grid_peer_poll_rounds_total{grid_site="a\"b"} 1 1`, wantErr: "grid_site is not"},
		{name: "unterminated", line: `grid_peer_poll_rounds_total{grid_site="a} 1 1`, wantErr: "unterminated"},
		{name: "no equals", line: `grid_peer_poll_rounds_total{grid_site "a"} 1 1`, wantErr: "expected '='"},
		{name: "no close", line: `grid_peer_poll_rounds_total{grid_site="a" 1 1`, wantErr: "expected ',' or '}'"},
		{name: "no blank before value", line: `grid_peer_poll_rounds_total{grid_site="a"}1 1`, wantErr: "expected a blank"},
		{name: "no value", line: `grid_peer_poll_rounds_total{grid_site="a"} `, wantErr: "missing value"},
		{name: "NaN", line: `grid_peer_poll_rounds_total{grid_site="a"} NaN 1`, wantErr: "value must be finite"},
		{name: "Inf", line: `grid_peer_poll_rounds_total{grid_site="a"} +Inf 1`, wantErr: "value must be finite"},
		{name: "negative", line: `grid_peer_poll_rounds_total{grid_site="a"} -1 1`, wantErr: "must not be negative"},
		{name: "garbage value", line: `grid_peer_poll_rounds_total{grid_site="a"} 1x 1`, wantErr: "invalid value"},
		{name: "publishes_load 2", line: `grid_provider_publishes_load{grid_site="a",grid_cluster="c",grid_provider="p"} 2 1`, wantErr: "must be 0 or 1"},
		{name: "generation fraction", line: `grid_provider_config_generation{grid_site="a",grid_cluster="c",grid_provider="p"} 1.5 1`, wantErr: "integer"},
		{name: "generation too big", line: `grid_provider_config_generation{grid_site="a",grid_cluster="c",grid_provider="p"} 1e17 1`, wantErr: "integer"},
		{name: "no timestamp", line: `grid_peer_poll_rounds_total{grid_site="a"} 1`, wantErr: "missing timestamp"},
		{name: "float timestamp", line: `grid_peer_poll_rounds_total{grid_site="a"} 1 1.5`, wantErr: "invalid timestamp"},
		{name: "trailing text", line: `grid_peer_poll_rounds_total{grid_site="a"} 1 1 x`, wantErr: "unexpected text"},
		{name: "carriage return", line: "grid_peer_poll_rounds_total{grid_site=\"a\"} 1 1\r", wantErr: "invalid timestamp"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Parse(strings.NewReader("# HELP x\n\n"+tt.line+"\n"), ParseOptions{})
			require.NoError(t, err)
			if tt.want == nil {
				assert.Empty(t, res.Samples)
				assert.Equal(t, map[DropReason]int{DropParse: 1}, res.Dropped)
				require.Error(t, res.FirstParseError)
				assert.Contains(t, res.FirstParseError.Error(), "line 3")
				assert.Contains(t, res.FirstParseError.Error(), tt.wantErr)
				return
			}
			assert.Nil(t, res.Dropped)
			assert.NoError(t, res.FirstParseError)
			require.Len(t, res.Samples, 1)
			assert.Empty(t, cmp.Diff(*tt.want, res.Samples[0]))
		})
	}
}

func TestParseTooLarge(t *testing.T) {
	line := fmt.Sprintf("grid_peer_poll_rounds_total{grid_site=\"a\"} 1 %d\n", ms(date))
	body := strings.Repeat(line, 10)
	res, err := Parse(strings.NewReader(body), ParseOptions{Limits: Limits{MaxBytes: int64(len(body))}})
	require.NoError(t, err)
	assert.Len(t, res.Samples, 10)
	assert.Equal(t, len(body), res.Bytes)

	r := &countingReader{r: strings.NewReader(body + "x" + strings.Repeat("y", 1<<20))}
	res, err = Parse(r, ParseOptions{Limits: Limits{MaxBytes: int64(len(body))}})
	assert.Same(t, ErrTooLarge, err)
	assert.Empty(t, res.Samples)
	assert.LessOrEqual(t, r.n, int64(len(body))+512+1, "reads at most the limit and a little more")

	// The default limit is 1 MiB.
	_, err = Parse(strings.NewReader(strings.Repeat("#", DefaultMaxBytes+1)), ParseOptions{})
	assert.Same(t, ErrTooLarge, err)
	_, err = Parse(strings.NewReader(strings.Repeat("#", DefaultMaxBytes)), ParseOptions{})
	assert.NoError(t, err)

	boom := errors.New("boom")
	_, err = Parse(io.MultiReader(strings.NewReader(line), errReader{boom}), ParseOptions{})
	assert.ErrorIs(t, err, boom)
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// TestParseSkew pins the skew rule of G-75 at its edges: +1.000 s and
// −86400.000 s are kept, +1.001 s and −86400.001 s are dropped.
func TestParseSkew(t *testing.T) {
	tests := []struct {
		offset time.Duration
		keep   bool
	}{
		{0, true},
		{time.Second, true},
		{time.Second + time.Millisecond, false},
		{-24 * time.Hour, true},
		{-24*time.Hour - time.Millisecond, false},
		{-time.Hour, true},
		{time.Hour, false},
	}
	for _, tt := range tests {
		t.Run(tt.offset.String(), func(t *testing.T) {
			body := fmt.Sprintf("grid_peer_poll_rounds_total{grid_site=\"a\"} 1 %d\n", ms(date.Add(tt.offset)))
			res, err := Parse(strings.NewReader(body), ParseOptions{Date: date})
			require.NoError(t, err)
			if tt.keep {
				assert.Len(t, res.Samples, 1)
				assert.Nil(t, res.Dropped)
			} else {
				assert.Empty(t, res.Samples)
				assert.Equal(t, map[DropReason]int{DropSkew: 1}, res.Dropped)
			}
			// Without a Date, no skew check.
			res, err = Parse(strings.NewReader(body), ParseOptions{})
			require.NoError(t, err)
			assert.Len(t, res.Samples, 1)
		})
	}
	// Extreme stamps do not overflow the comparison.
	body := fmt.Sprintf("grid_peer_poll_rounds_total{grid_site=\"a\"} 1 %d\ngrid_peer_poll_rounds_total{grid_site=\"a\"} 1 %d\n", int64(math.MaxInt64), int64(math.MinInt64))
	res, err := Parse(strings.NewReader(body), ParseOptions{Date: date})
	require.NoError(t, err)
	assert.Equal(t, map[DropReason]int{DropSkew: 2}, res.Dropped)
}

func TestParseSiteMismatch(t *testing.T) {
	var b bytes.Buffer
	for _, site := range []string{"a", "b", "c"} {
		fmt.Fprintf(&b, "llm_d_epp_ready_endpoints{grid_site=%q,grid_cluster=\"c1\",grid_provider=\"p\"} 1 %d\n", site, ms(date))
	}
	body := b.String()
	res, err := Parse(strings.NewReader(body), ParseOptions{ExpectedSite: "b"})
	require.NoError(t, err)
	require.Len(t, res.Samples, 1)
	assert.Equal(t, "b", res.Samples[0].Site)
	assert.Equal(t, map[DropReason]int{DropSiteMismatch: 2}, res.Dropped)

	res, err = Parse(strings.NewReader(body), ParseOptions{SiteAllowed: func(s string) bool { return s != "c" }})
	require.NoError(t, err)
	assert.Len(t, res.Samples, 2)
	assert.Equal(t, map[DropReason]int{DropSiteMismatch: 1}, res.Dropped)

	// Order of checks: a malformed row is parse even for another site; a
	// row of another site is site_mismatch even when skewed.
	body = "llm_d_epp_ready_endpoints{grid_site=\"z\",grid_cluster=\"c1\",grid_provider=\"p\"} NaN 1\n" +
		fmt.Sprintf("llm_d_epp_ready_endpoints{grid_site=\"z\",grid_cluster=\"c1\",grid_provider=\"p\"} 1 %d\n", ms(date.Add(time.Hour)))
	res, err = Parse(strings.NewReader(body), ParseOptions{ExpectedSite: "b", Date: date})
	require.NoError(t, err)
	assert.Equal(t, map[DropReason]int{DropParse: 1, DropSiteMismatch: 1}, res.Dropped)
}

func TestParseCaps(t *testing.T) {
	var b bytes.Buffer
	// Site a: providers p00..p09, 3 rows each, written in reverse order so
	// that "first by name" differs from "first in the body".
	for i := 9; i >= 0; i-- {
		for j := range 3 {
			fmt.Fprintf(&b, "llm_d_epp_average_queue_size{grid_site=\"a\",grid_cluster=\"c1\",grid_provider=\"p%02d\"} %d %d\n", i, j, ms(date))
		}
	}
	// Round rows of site a count as their own target and never against the
	// provider cap.
	for range 3 {
		fmt.Fprintf(&b, "grid_peer_poll_rounds_total{grid_site=\"a\"} 1 %d\n", ms(date))
	}
	// Site b: 2 providers, under the cap.
	for _, p := range []string{"x", "y"} {
		fmt.Fprintf(&b, "llm_d_epp_average_queue_size{grid_site=\"b\",grid_cluster=\"c1\",grid_provider=%q} 1 %d\n", p, ms(date))
	}
	res, err := Parse(&b, ParseOptions{Limits: Limits{MaxLinesPerTarget: 2, MaxProvidersPerSite: 4}})
	require.NoError(t, err)
	// a: 4 providers × 2 rows + 2 round rows; b: 2 rows.
	assert.Len(t, res.Samples, 12)
	// Line cap: 10 providers × 1 + 1 round row; provider cap: 6 providers × 2.
	assert.Equal(t, map[DropReason]int{DropCap: 11 + 12}, res.Dropped)
	kept := map[string]int{}
	for _, s := range res.Samples {
		kept[s.Site+"/"+s.Provider]++
	}
	assert.Equal(t, map[string]int{"a/p00": 2, "a/p01": 2, "a/p02": 2, "a/p03": 2, "a/": 2, "b/x": 1, "b/y": 1}, kept)
	// Body order is kept, and the first rows of a target win.
	assert.Equal(t, "p03", res.Samples[0].Provider)
	assert.Equal(t, 0.0, res.Samples[0].Value)
	assert.Equal(t, 1.0, res.Samples[1].Value)
}

func TestSampleValidate(t *testing.T) {
	good := prov(NameAverageKVCache, "a", "p", 0.5, date)
	require.NoError(t, good.Validate())
	round := Sample{Name: NamePeerRoundEnd, Site: "b", Value: 1.7e9, Stamp: date}
	require.NoError(t, round.Validate())
	tests := []struct {
		name string
		mod  func(*Sample)
		want string
	}{
		{"unknown", func(s *Sample) { s.Name = "x" }, `unknown series "x"`},
		{"site", func(s *Sample) { s.Site = "A" }, "grid_site"},
		{"cluster", func(s *Sample) { s.Cluster = "" }, "grid_cluster: must not be empty"},
		{"provider", func(s *Sample) { s.Provider = strings.Repeat("p", 64) }, "at most 63"},
		{"nan", func(s *Sample) { s.Value = math.NaN() }, "must be finite"},
		{"negative", func(s *Sample) { s.Value = -0.1 }, "must not be negative"},
		{"bool", func(s *Sample) { s.Name, s.Value = NamePublishesLoad, 0.5 }, "0 or 1"},
		{"generation", func(s *Sample) { s.Name, s.Value = NameConfigGeneration, 2.5 }, "integer"},
		{"round with provider", func(s *Sample) { s.Name = NamePeerRounds }, "takes no grid_cluster"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := good
			tt.mod(&s)
			err := s.Validate()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	assert.True(t, IsProviderSeries(NameFlowControlQueue))
	assert.False(t, IsProviderSeries(NamePeerRounds))
	assert.False(t, IsProviderSeries("x"))
}

func TestValidateNames(t *testing.T) {
	for _, s := range []string{"a", "a-b", "0", strings.Repeat("a", 63)} {
		assert.NoError(t, ValidateLabel(s), s)
		assert.NoError(t, ValidateSubdomain(s), s)
	}
	for _, s := range []string{"", "-a", "a-", "A", "a_b", "a.b", strings.Repeat("a", 64), "é"} {
		assert.Error(t, ValidateLabel(s), s)
	}
	assert.NoError(t, ValidateSubdomain("a.b-c.d"))
	for _, s := range []string{"", "a.", ".a", "a..b", "A.b", strings.Repeat("a.", 127) + "a"} {
		assert.Error(t, ValidateSubdomain(s), s)
	}
}

func TestEncode(t *testing.T) {
	samples := []Sample{
		prov(NameReadyEndpoints, "peer", "q", 1, date),
		{Name: NamePeerRounds, Site: "peer", Value: 4, Stamp: date.Add(time.Millisecond)},
		prov(NameAverageRunning, "home", "p", 2.5, date),
		prov(NameReadyEndpoints, "home", "p", 3, date),
		prov(NameAverageRunning, "alpha", "z", 1, date),
	}
	var b bytes.Buffer
	tr, err := Encode(&b, samples, func(s string) bool { return s == "home" }, Limits{})
	require.NoError(t, err)
	assert.True(t, tr.Empty())
	// Round rows first, then the local site's targets, then the peers'.
	want := fmt.Sprintf(`grid_peer_poll_rounds_total{grid_site="peer"} 4 %[2]d
llm_d_epp_average_running_requests{grid_site="home",grid_cluster="c1",grid_provider="p"} 2.5 %[1]d
llm_d_epp_ready_endpoints{grid_site="home",grid_cluster="c1",grid_provider="p"} 3 %[1]d
llm_d_epp_average_running_requests{grid_site="alpha",grid_cluster="c1",grid_provider="z"} 1 %[1]d
llm_d_epp_ready_endpoints{grid_site="peer",grid_cluster="c1",grid_provider="q"} 1 %[1]d
`, ms(date), ms(date)+1)
	assert.Equal(t, want, b.String())

	// Round trip.
	res, err := Parse(&b, ParseOptions{Date: date})
	require.NoError(t, err)
	assert.Nil(t, res.Dropped)
	assert.Len(t, res.Samples, len(samples))

	// An invalid sample writes nothing.
	b.Reset()
	bad := append(samples[:1:1], prov(NameAverageRunning, "home", "P", 1, date))
	_, err = Encode(&b, bad, nil, Limits{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "grid_provider")
	assert.Zero(t, b.Len())

	// The writer's error is returned.
	_, err = Encode(failWriter{}, samples, nil, Limits{})
	assert.EqualError(t, err, "write failed")
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("write failed") }

func TestEncodeTruncation(t *testing.T) {
	isLocal := func(s string) bool { return s == "home" }
	var samples []Sample
	// home: 3 providers × 5 rows of one series; peer: 3 providers × 2 rows.
	for _, p := range []string{"p1", "p2", "p3"} {
		for i := range 5 {
			samples = append(samples, prov(NameAverageQueue, "home", p, float64(i), date))
		}
		for i := range 2 {
			samples = append(samples, prov(NameAverageQueue, "peer", p, float64(i), date))
		}
	}
	line := len(fmt.Sprintf("llm_d_epp_average_queue_size{grid_site=\"home\",grid_cluster=\"c1\",grid_provider=\"p1\"} 1 %d\n", ms(date)))

	t.Run("lines", func(t *testing.T) {
		var b bytes.Buffer
		tr, err := Encode(&b, samples, isLocal, Limits{MaxLinesPerTarget: 4})
		require.NoError(t, err)
		assert.Equal(t, Truncation{Lines: map[string]int{StoreLocal: 3}}, tr)
		assert.Equal(t, 3*4+3*2, strings.Count(b.String(), "\n"))
		// The first rows of a target are kept.
		assert.Contains(t, b.String(), `grid_provider="p1"} 3 `)
		assert.NotContains(t, b.String(), `grid_provider="p1"} 4 `)
	})
	t.Run("providers", func(t *testing.T) {
		var b bytes.Buffer
		tr, err := Encode(&b, samples, isLocal, Limits{MaxProvidersPerSite: 2})
		require.NoError(t, err)
		assert.Equal(t, Truncation{Targets: map[string]int{StoreLocal: 1, StorePeer: 1}}, tr)
		assert.NotContains(t, b.String(), "p3")
	})
	t.Run("bytes", func(t *testing.T) {
		var b bytes.Buffer
		// Room for home's three targets and one peer row: the first peer
		// target (2 rows) does not fit, so it and every later one go.
		tr, err := Encode(&b, samples, isLocal, Limits{MaxBytes: int64(15*line + line)})
		require.NoError(t, err)
		assert.Equal(t, Truncation{Targets: map[string]int{StorePeer: 3}}, tr)
		assert.Equal(t, 15, strings.Count(b.String(), "\n"))
		assert.LessOrEqual(t, b.Len(), 16*line)
		// Exactly full fits.
		b.Reset()
		tr, err = Encode(&b, samples, isLocal, Limits{MaxBytes: int64(21 * line)})
		require.NoError(t, err)
		assert.True(t, tr.Empty(), "%+v", tr)
	})
}

// TestEncodeFairDrop: a site whose targets would fill the body cannot push
// the others out: every site's round rows are written before any provider
// target, the local site's targets next, and the room left is shared
// between the peer sites, so a small site keeps every target while the big
// one loses targets (counted).
func TestEncodeFairDrop(t *testing.T) {
	isLocal := func(s string) bool { return s == "home" }
	var samples []Sample
	// big sorts before small; zz sorts after both.
	for p := range 40 {
		for i := range 20 {
			samples = append(samples, prov(NameAverageQueue, "big", fmt.Sprintf("p%02d", p), float64(i), date))
		}
	}
	samples = append(samples,
		prov(NameAverageQueue, "small", "q", 1, date),
		prov(NameReadyEndpoints, "small", "q", 2, date),
		prov(NameAverageQueue, "zz", "r", 1, date),
		prov(NameAverageQueue, "home", "h", 1, date),
		Sample{Name: NamePeerRounds, Site: "big", Value: 1, Stamp: date},
		Sample{Name: NamePeerRounds, Site: "small", Value: 2, Stamp: date},
		Sample{Name: NamePeerRounds, Site: "zz", Value: 3, Stamp: date},
		Sample{Name: NamePeerRoundEnd, Site: "zz", Value: 4, Stamp: date},
	)
	line := len(fmt.Sprintf("llm_d_epp_average_queue_size{grid_site=\"big\",grid_cluster=\"c1\",grid_provider=\"p01\"} 1 %d\n", ms(date)))
	var b bytes.Buffer
	// Room for about a quarter of big's 800 rows.
	tr, err := Encode(&b, samples, isLocal, Limits{MaxBytes: int64(200 * line)})
	require.NoError(t, err)
	out := b.String()
	assert.LessOrEqual(t, b.Len(), 200*line)
	for _, want := range []string{
		`grid_peer_poll_rounds_total{grid_site="big"} 1`,
		`grid_peer_poll_rounds_total{grid_site="small"} 2`,
		`grid_peer_poll_rounds_total{grid_site="zz"} 3`,
		`grid_peer_poll_round_end_timestamp_seconds{grid_site="zz"} 4`,
		`llm_d_epp_average_queue_size{grid_site="home",grid_cluster="c1",grid_provider="h"} 1`,
		`llm_d_epp_average_queue_size{grid_site="small",grid_cluster="c1",grid_provider="q"} 1`,
		`llm_d_epp_ready_endpoints{grid_site="small",grid_cluster="c1",grid_provider="q"} 2`,
		`llm_d_epp_average_queue_size{grid_site="zz",grid_cluster="c1",grid_provider="r"} 1`,
	} {
		assert.Contains(t, out, want)
	}
	// Round rows lead the body.
	assert.True(t, strings.HasPrefix(out, "grid_peer_poll_"), out[:80])
	assert.NotContains(t, strings.SplitN(out, "llm_d_", 2)[1], "grid_peer_poll_", "no round row after a provider row")
	// big keeps whole targets only, and what it lost is counted.
	kept := 0
	for p := range 40 {
		n := strings.Count(out, fmt.Sprintf(`grid_provider="p%02d"}`, p))
		assert.Contains(t, []int{0, 20}, n, "p%02d", p)
		if n == 20 {
			kept++
		}
	}
	assert.Greater(t, kept, 0)
	assert.Equal(t, Truncation{Targets: map[string]int{StorePeer: 40 - kept}}, tr)

	// The order of the sites does not matter: the same with big last.
	for i := range samples {
		if samples[i].Site == "big" {
			samples[i].Site = "zzz"
		}
	}
	b.Reset()
	tr2, err := Encode(&b, samples, isLocal, Limits{MaxBytes: int64(200 * line)})
	require.NoError(t, err)
	assert.Equal(t, tr, tr2)
	assert.Contains(t, b.String(), `grid_site="small",grid_cluster="c1",grid_provider="q"`)
}

// TestEncodeKeepsPublishesLoad: a target dropped for room keeps its
// grid_provider_publishes_load row (the EPP's store takes a provider
// whose row a body leaves out for unmeasured, G-47): those rows are kept
// outside the cut like the round rows, lead their target, survive the
// line cap, and a target that keeps only that row still counts as
// dropped.
func TestEncodeKeepsPublishesLoad(t *testing.T) {
	isLocal := func(s string) bool { return s == "home" }
	var samples []Sample
	for p := range 40 {
		name := fmt.Sprintf("p%02d", p)
		for i := range 20 {
			samples = append(samples, prov(NameAverageQueue, "big", name, float64(i), date))
		}
		samples = append(samples, prov(NamePublishesLoad, "big", name, 1, date))
	}
	samples = append(samples,
		prov(NameAverageQueue, "small", "q", 1, date),
		prov(NamePublishesLoad, "small", "q", 1, date),
		prov(NamePublishesLoad, "small", "only", 0, date),
		prov(NameAverageQueue, "home", "h", 1, date),
		prov(NamePublishesLoad, "home", "h", 1, date),
	)
	line := len(fmt.Sprintf("llm_d_epp_average_queue_size{grid_site=\"big\",grid_cluster=\"c1\",grid_provider=\"p01\"} 1 %d\n", ms(date)))
	var b bytes.Buffer
	tr, err := Encode(&b, samples, isLocal, Limits{MaxBytes: int64(200 * line)})
	require.NoError(t, err)
	assert.LessOrEqual(t, b.Len(), 200*line)
	res, err := Parse(bytes.NewReader(b.Bytes()), ParseOptions{Date: date})
	require.NoError(t, err)
	assert.Nil(t, res.Dropped)
	publishes := map[string]float64{}
	queue := map[string]int{}
	for _, s := range res.Samples {
		switch s.Name {
		case NamePublishesLoad:
			publishes[s.Site+"/"+s.Provider] = s.Value
		case NameAverageQueue:
			queue[s.Site+"/"+s.Provider]++
		}
	}
	assert.Len(t, publishes, 43, "every target's publishes_load row")
	for p := range 40 {
		assert.Equal(t, 1.0, publishes[fmt.Sprintf("big/p%02d", p)])
	}
	assert.Equal(t, 0.0, publishes["small/only"])
	assert.Equal(t, 1, queue["small/q"])
	assert.Equal(t, 1, queue["home/h"])
	kept := 0
	for p := range 40 {
		n := queue[fmt.Sprintf("big/p%02d", p)]
		assert.Contains(t, []int{0, 20}, n)
		if n == 20 {
			kept++
		}
	}
	assert.Greater(t, kept, 0)
	assert.Less(t, kept, 40)
	assert.Equal(t, Truncation{Targets: map[string]int{StorePeer: 40 - kept}}, tr)
	// A target's publishes_load row leads it.
	assert.Less(t, strings.Index(b.String(), NamePublishesLoad+`{grid_site="home"`), strings.Index(b.String(), NameAverageQueue+`{grid_site="home"`))

	// The room the publishes_load rows take is counted once: with two
	// sites over their share, what is left unused is less than one
	// target.
	var two []Sample
	for _, s := range samples {
		if s.Site == "big" {
			two = append(two, s)
			s.Site = "big2"
			two = append(two, s)
		}
	}
	b.Reset()
	_, err = Encode(&b, two, isLocal, Limits{MaxBytes: int64(200 * line)})
	require.NoError(t, err)
	assert.LessOrEqual(t, b.Len(), 200*line)
	assert.Greater(t, b.Len(), 200*line-20*line, "the body is filled")
	assert.Equal(t, 80, strings.Count(b.String(), NamePublishesLoad+"{"))

	// The line cap keeps it too.
	b.Reset()
	tr, err = Encode(&b, samples, isLocal, Limits{MaxLinesPerTarget: 3})
	require.NoError(t, err)
	assert.Equal(t, 43, strings.Count(b.String(), NamePublishesLoad+"{"))
	assert.Equal(t, Truncation{Lines: map[string]int{StorePeer: 40 * 18}}, tr)
}

// TestEncodeLocalBeforePeerPublishes: the local targets come before the
// peers' publishes_load rows. With 64 sites of 64 providers and the
// longest names validation allows, the peers' publishes_load rows alone
// are more than the body holds; every local row must still be kept, and
// the peers share the room left fairly (each keeps some publishes_load
// rows, none keeps all of them).
func TestEncodeLocalBeforePeerPublishes(t *testing.T) {
	name := func(prefix string, i int) string {
		n := fmt.Sprintf("%s%02d-", prefix, i)
		return n + strings.Repeat("x", 63-len(n))
	}
	local := name("s", 32)
	isLocal := func(s string) bool { return s == local }
	cluster := strings.Repeat("c", 63)
	var samples []Sample
	for s := range 64 {
		site := name("s", s)
		if site != local {
			samples = append(samples,
				Sample{Name: NamePeerRoundEnd, Site: site, Value: 1767225600, Stamp: date},
				Sample{Name: NamePeerRounds, Site: site, Value: 7, Stamp: date})
		}
		for p := range 64 {
			for i, n := range PoolSeries {
				samples = append(samples, Sample{Name: n, Site: site, Cluster: cluster, Provider: name("p", p), Value: float64(i), Stamp: date})
			}
			samples = append(samples, Sample{Name: NamePublishesLoad, Site: site, Cluster: cluster, Provider: name("p", p), Value: 1, Stamp: date})
		}
	}
	const maxBytes = 768 << 10
	var b bytes.Buffer
	tr, err := Encode(&b, samples, isLocal, Limits{MaxBytes: maxBytes})
	require.NoError(t, err)
	assert.LessOrEqual(t, b.Len(), maxBytes)
	res, err := Parse(bytes.NewReader(b.Bytes()), ParseOptions{Date: date})
	require.NoError(t, err)
	assert.Nil(t, res.Dropped)
	localLoad, localPublishes, rounds := 0, 0, 0
	peerPublishes := map[string]int{}
	for _, s := range res.Samples {
		switch {
		case s.Provider == "":
			rounds++
		case s.Site == local && s.Name == NamePublishesLoad:
			localPublishes++
		case s.Site == local:
			localLoad++
		case s.Name == NamePublishesLoad:
			peerPublishes[s.Site]++
		}
	}
	assert.Equal(t, 63*2, rounds)
	assert.Equal(t, 64, localPublishes)
	assert.Equal(t, 64*len(PoolSeries), localLoad, "every local load row")
	assert.Len(t, peerPublishes, 63, "every peer keeps some publishes_load rows")
	for site, n := range peerPublishes {
		assert.Greater(t, n, 0, site)
		assert.Less(t, n, 64, site)
	}
	assert.Zero(t, tr.Targets[StoreLocal])
	assert.Equal(t, 63*64, tr.Targets[StorePeer], "no peer keeps a whole target")
	assert.Greater(t, b.Len(), maxBytes-63*1024, "the body is filled")
}

// TestEncodeRejectedPublishesStayOut: a peer site's publishes_load rows
// that do not fit stay out even when the rest of the site fits: the body
// stays within MaxBytes and the target left out is counted.
func TestEncodeRejectedPublishesStayOut(t *testing.T) {
	long := func(p string) string { return p + strings.Repeat("x", 60-len(p)) }
	samples := []Sample{
		prov(NameReadyEndpoints, "b", "b1", 1, date),
		{Name: NamePublishesLoad, Site: "b", Cluster: long("c"), Provider: long("b2"), Value: 1, Stamp: date},
		prov(NameReadyEndpoints, "b", "b3", 1, date),
	}
	var b bytes.Buffer
	tr, err := Encode(&b, samples, nil, Limits{MaxBytes: 200})
	require.NoError(t, err)
	assert.LessOrEqual(t, b.Len(), 200, b.String())
	assert.Equal(t, Truncation{Targets: map[string]int{StorePeer: 1}}, tr)
	assert.Contains(t, b.String(), `grid_provider="b1"`)
	assert.Contains(t, b.String(), `grid_provider="b3"`)
}

// TestEncodeProperties: over random mixes of sites, targets, rows and
// limits (seeded), checkEncode holds.
func TestEncodeProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 2026))
	for iter := range 2000 {
		samples, isLocal, lim := randomEncode(rng)
		checkEncode(t, fmt.Sprintf("iteration %d", iter), samples, isLocal, lim)
	}
}

// randomEncode is a random mix of sites (s0, s1 the local one unless
// isLocal is nil, ...), round rows, targets of random name lengths with
// 0-2 publishes_load rows and 0-6 other rows, and limits that cut.
func randomEncode(rng *rand.Rand) ([]Sample, func(string) bool, Limits) {
	letters := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('a' + rng.IntN(26))
		}
		return string(b)
	}
	lim := Limits{
		MaxBytes:            int64(50 + rng.IntN(6000)),
		MaxLinesPerTarget:   1 + rng.IntN(8),
		MaxProvidersPerSite: 1 + rng.IntN(6),
	}
	var isLocal func(string) bool
	if rng.IntN(4) > 0 {
		isLocal = func(s string) bool { return s == "s1" }
	}
	var samples []Sample
	for s := range 1 + rng.IntN(5) {
		site := fmt.Sprintf("s%d", s)
		for range rng.IntN(3) {
			samples = append(samples, Sample{Name: NamePeerRounds, Site: site, Value: 1, Stamp: date})
		}
		for range rng.IntN(lim.MaxProvidersPerSite + 3) {
			p, c := "p"+letters(1+rng.IntN(40)), "c"+letters(rng.IntN(60))
			for range rng.IntN(3) {
				samples = append(samples, Sample{Name: NamePublishesLoad, Site: site, Cluster: c, Provider: p, Value: float64(rng.IntN(2)), Stamp: date})
			}
			for range rng.IntN(7) {
				samples = append(samples, Sample{Name: PoolSeries[rng.IntN(len(PoolSeries))], Site: site, Cluster: c, Provider: p, Value: float64(rng.IntN(100)), Stamp: date})
			}
		}
	}
	rng.Shuffle(len(samples), func(i, j int) { samples[i], samples[j] = samples[j], samples[i] })
	return samples, isLocal, lim
}

// checkEncode: the body Encode writes is never above MaxBytes, and every
// target is either whole in it (within the line cap), present by its
// publishes_load rows only, or absent; each target not whole is counted
// in Truncation.Targets and each row beyond the line cap in
// Truncation.Lines, by store.
func checkEncode(t *testing.T, what string, samples []Sample, isLocal func(string) bool, lim Limits) {
	t.Helper()
	type key struct{ site, provider string }
	var b bytes.Buffer
	tr, err := Encode(&b, samples, isLocal, lim)
	require.NoError(t, err)
	require.LessOrEqual(t, b.Len(), int(lim.MaxBytes), what)
	res, err := Parse(bytes.NewReader(b.Bytes()), ParseOptions{Limits: Limits{MaxLinesPerTarget: 1 << 20, MaxProvidersPerSite: 1 << 20}})
	require.NoError(t, err)
	require.Nil(t, res.Dropped)

	in, pubs := map[key]int{}, map[key]int{}
	providers := map[string]map[string]bool{}
	for _, s := range samples {
		k := key{s.Site, s.Provider}
		in[k]++
		if s.Name == NamePublishesLoad {
			pubs[k]++
		}
		if s.Provider != "" {
			if providers[s.Site] == nil {
				providers[s.Site] = map[string]bool{}
			}
			providers[s.Site][s.Provider] = true
		}
	}
	capped := map[key]bool{}
	for site, ps := range providers {
		names := slices.Sorted(maps.Keys(ps))
		for _, p := range names[min(len(names), lim.MaxProvidersPerSite):] {
			capped[key{site, p}] = true
		}
	}
	out, outPubs := map[key]int{}, map[key]int{}
	for _, s := range res.Samples {
		k := key{s.Site, s.Provider}
		out[k]++
		if s.Name == NamePublishesLoad {
			outPubs[k]++
		}
	}
	targets, lines := map[string]int{}, map[string]int{}
	for k, n := range in {
		store := StorePeer
		if isLocal != nil && isLocal(k.site) {
			store = StoreLocal
		}
		if capped[k] {
			require.Zero(t, out[k], "%s: %v beyond the provider cap", what, k)
			targets[store]++
			continue
		}
		lines[store] += max(0, n-lim.MaxLinesPerTarget)
		whole := min(n, lim.MaxLinesPerTarget)
		switch m := out[k]; {
		case m == whole:
		case m == 0:
			targets[store]++
		default:
			// Its publishes_load rows only, all of them (they lead the
			// target, so the line cap keeps them first).
			require.Equal(t, min(pubs[k], lim.MaxLinesPerTarget), m, "%s: %v", what, k)
			require.Equal(t, m, outPubs[k], "%s: %v", what, k)
			targets[store]++
		}
	}
	for _, store := range []string{StoreLocal, StorePeer} {
		require.Equal(t, targets[store], tr.Targets[store], "%s: targets %s", what, store)
		require.Equal(t, lines[store], tr.Lines[store], "%s: lines %s", what, store)
	}
}
