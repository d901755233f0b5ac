package signals

import (
	"bytes"
	"fmt"
	"io"
	"testing"
	"time"
)

// fleet returns the rows a relay holds for sites sites of providers
// providers each, with rows samples per series and target.
func fleet(sites, providers, rows int) []Sample {
	var out []Sample
	for s := range sites {
		site := fmt.Sprintf("site-%d", s)
		if s > 0 {
			for r := range rows {
				out = append(out, Sample{Name: NamePeerRoundEnd, Site: site, Value: float64(date.Unix()) + float64(r), Stamp: date},
					Sample{Name: NamePeerRounds, Site: site, Value: float64(r), Stamp: date})
			}
		}
		for p := range providers {
			prov := fmt.Sprintf("pool-%02d", p)
			for r := range rows {
				stamp := date.Add(-time.Duration(r) * time.Second)
				for i, name := range PoolSeries {
					out = append(out, Sample{Name: name, Site: site, Cluster: "cluster-1", Provider: prov, Value: float64(i*r) + 0.25, Stamp: stamp})
				}
				out = append(out,
					Sample{Name: NameConfigGeneration, Site: site, Cluster: "cluster-1", Provider: prov, Value: 1234567890123, Stamp: stamp},
					Sample{Name: NamePublishesLoad, Site: site, Cluster: "cluster-1", Provider: prov, Value: 1, Stamp: stamp})
			}
		}
	}
	return out
}

func isSite0(s string) bool { return s == "site-0" }

// BenchmarkEncode64Providers: the relay's assembly for its EPP, three sites
// of 64 providers each (one row per series).
func BenchmarkEncode64Providers(b *testing.B) {
	samples := fleet(3, 64, 1)
	var buf bytes.Buffer
	if _, err := Encode(&buf, samples, isSite0, Limits{MaxBytes: RelayMaxBytes}); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(buf.Len()))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Encode(io.Discard, samples, isSite0, Limits{MaxBytes: RelayMaxBytes}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParse768KiB: the EPP's ingest of a full relay body.
func BenchmarkParse768KiB(b *testing.B) {
	var buf bytes.Buffer
	tr, err := Encode(&buf, fleet(3, 64, 8), isSite0, Limits{MaxBytes: RelayMaxBytes})
	if err != nil {
		b.Fatal(err)
	}
	if tr.Empty() || buf.Len() < RelayMaxBytes-4096 {
		b.Fatalf("body of %d bytes, cut %+v: not a full body", buf.Len(), tr)
	}
	body := buf.Bytes()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		res, err := Parse(bytes.NewReader(body), ParseOptions{Date: date})
		if err != nil || res.Dropped != nil {
			b.Fatal(err, res.Dropped)
		}
	}
}
