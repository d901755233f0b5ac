package signals

import (
	"bytes"
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// FuzzParse: arbitrary bodies never panic; every accepted row is a valid
// row within the limits; drops and accepted rows account for every sample
// line; and the accepted rows survive Encode → Parse unchanged (as a set).
func FuzzParse(f *testing.F) {
	st := date.UnixMilli()
	f.Add([]byte(fmt.Sprintf("llm_d_epp_average_running_requests{grid_site=\"a\",grid_cluster=\"c1\",grid_provider=\"p\"} 3.5 %d\n", st)))
	f.Add([]byte(fmt.Sprintf("# TYPE x gauge\ngrid_peer_poll_rounds_total{grid_site=\"b\"} 7 %d\ngrid_peer_poll_round_end_timestamp_seconds{grid_site=\"b\"} 1.767225600123e+09 %d\n", st, st)))
	f.Add([]byte("llm_d_epp_ready_endpoints{ grid_provider = \"p\" , grid_site=\"a\",grid_cluster=\"x.y\", }\t2 \t1  \n"))
	f.Add([]byte("grid_provider_publishes_load{grid_site=\"a\",grid_cluster=\"c\",grid_provider=\"p\"} 1 -5\n"))
	f.Add([]byte("grid_provider_config_generation{grid_site=\"a\",grid_cluster=\"c\",grid_provider=\"p\"} 9007199254740992 1\n"))
	f.Add([]byte("grid_peer_poll_rounds_total{grid_site=\"a\\\"\"} NaN 1\n{}\n\n#\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		lim := Limits{MaxLinesPerTarget: 3, MaxProvidersPerSite: 2}
		opts := ParseOptions{Limits: lim}
		if len(body) > 0 && body[0]&1 == 1 {
			opts.Date = date
		}
		res, err := Parse(bytes.NewReader(body), opts)
		if err != nil {
			if err != ErrTooLarge {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		lines := 0
		for _, l := range bytes.Split(body, []byte("\n")) {
			if len(l) > 0 && l[0] != '#' {
				lines++
			}
		}
		dropped := 0
		for _, n := range res.Dropped {
			dropped += n
		}
		if dropped+len(res.Samples) != lines {
			t.Fatalf("%d accepted + %d dropped != %d lines", len(res.Samples), dropped, lines)
		}
		if (res.Dropped[DropParse] > 0) != (res.FirstParseError != nil) {
			t.Fatalf("parse drops %d but FirstParseError %v", res.Dropped[DropParse], res.FirstParseError)
		}
		perTarget := map[target]int{}
		perSite := map[string]map[string]bool{}
		for _, s := range res.Samples {
			if err := s.Validate(); err != nil {
				t.Fatalf("accepted an invalid row: %v", err)
			}
			if !opts.Date.IsZero() && (s.Stamp.Sub(opts.Date) > time.Second || opts.Date.Sub(s.Stamp) > 24*time.Hour) {
				t.Fatalf("accepted a skewed row %v", s.Stamp)
			}
			perTarget[target{s.Site, s.Provider}]++
			if s.Provider != "" {
				if perSite[s.Site] == nil {
					perSite[s.Site] = map[string]bool{}
				}
				perSite[s.Site][s.Provider] = true
			}
		}
		for tg, n := range perTarget {
			if n > lim.MaxLinesPerTarget {
				t.Fatalf("target %v has %d rows", tg, n)
			}
		}
		for site, p := range perSite {
			if len(p) > lim.MaxProvidersPerSite {
				t.Fatalf("site %s has %d providers", site, len(p))
			}
		}
		// Round trip.
		var out bytes.Buffer
		tr, err := Encode(&out, res.Samples, func(s string) bool { return s == "a" }, lim)
		if err != nil {
			t.Fatalf("encode accepted rows: %v", err)
		}
		if !tr.Empty() {
			t.Fatalf("encode cut accepted rows: %+v", tr)
		}
		back, err := Parse(&out, ParseOptions{Limits: lim})
		if err != nil || back.Dropped != nil {
			t.Fatalf("reparse: %v %v", err, back.Dropped)
		}
		if !slices.Equal(sortedRows(res.Samples), sortedRows(back.Samples)) {
			t.Fatalf("round trip changed the rows:\n%v\n%v", res.Samples, back.Samples)
		}
	})
}

func sortedRows(s []Sample) []string {
	out := make([]string, len(s))
	for i, x := range s {
		out[i] = fmt.Sprintf("%s|%s|%s|%s|%v|%d", x.Name, x.Site, x.Cluster, x.Provider, x.Value, x.Stamp.UnixMilli())
	}
	slices.SortFunc(out, cmp.Compare)
	return out
}

// FuzzEncode: for the random mix of sites, targets, rows and limits a
// seed makes (randomEncode), the body is never above MaxBytes and every
// row it leaves out is counted (checkEncode).
func FuzzEncode(f *testing.F) {
	f.Add(uint64(11), uint64(2026))
	f.Add(uint64(0), uint64(0))
	f.Fuzz(func(t *testing.T, a, b uint64) {
		samples, isLocal, lim := randomEncode(rand.New(rand.NewPCG(a, b)))
		checkEncode(t, fmt.Sprintf("seed %d,%d", a, b), samples, isLocal, lim)
	})
}
