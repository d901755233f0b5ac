package relay

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/switchyard-ai/switchyard/pkg/multisite/signals"
	"github.com/switchyard-ai/switchyard/pkg/tlsutil"
	"github.com/switchyard-ai/switchyard/pkg/tokenauth"
)

// MaxMetricsBytes bounds an EPP /metrics body.
const MaxMetricsBytes = 16 << 20

// The EPP's build info, part of the generation (G-06).
const nameInfo = "inference_extension_info"

// Scrape results (grid_relay_scrapes_total{result}) and the reasons of
// the MetricsAvailable condition they map to.
const (
	ScrapeOK           = "ok"           // all five series read: a qualified batch
	ScrapeIncomplete   = "incomplete"   // some of the five read: rows, no generation
	ScrapeFailed       = "failed"       // no answer: connection, timeout, TLS
	ScrapeHTTPStatus   = "http_status"  // an answer other than 200, 401 and 403
	ScrapeUnauthorized = "unauthorized" // 401 or 403: check bearerTokenFile
	ScrapeTooLarge     = "too_large"    // a body above MaxMetricsBytes
	ScrapeMalformed    = "malformed"    // the selected lines are not text format
	ScrapeNoSeries     = "no_series"    // none of the five series for the provider
	ScrapeTokenFile    = "token_file"   // the bearer token file cannot be read
)

var scrapeResults = []string{ScrapeOK, ScrapeIncomplete, ScrapeFailed, ScrapeHTTPStatus, ScrapeUnauthorized, ScrapeTooLarge, ScrapeMalformed, ScrapeNoSeries, ScrapeTokenFile}

// conditionReason maps a scrape result to the MetricsAvailable reason.
func conditionReason(result string) string {
	switch result {
	case ScrapeOK:
		return "Scraped"
	case ScrapeIncomplete:
		return "IncompleteBatch"
	case ScrapeFailed:
		return "ScrapeFailed"
	case ScrapeHTTPStatus:
		return "HTTPStatus"
	case ScrapeUnauthorized:
		return "Unauthorized"
	case ScrapeTooLarge:
		return "TooLarge"
	case ScrapeMalformed:
		return "Malformed"
	case ScrapeNoSeries:
		return "NoSeries"
	case ScrapeTokenFile:
		return "TokenFile"
	}
	return "Unknown"
}

// batch is what one scrape read for one provider: the five pool series
// (signals.PoolSeries order) at one instant.
type batch struct {
	readAt  time.Time
	values  [len(signals.PoolSeries)]float64
	present [len(signals.PoolSeries)]bool
	info    string // the EPP's build info labels
}

// qualified reports a batch that read all five series (G-06).
func (b *batch) qualified() bool {
	for _, p := range b.present {
		if !p {
			return false
		}
	}
	return true
}

func (b *batch) any() bool { return slices.Contains(b.present[:], true) }

// missing names the series the batch lacks.
func (b *batch) missing() []string {
	var out []string
	for i, p := range b.present {
		if !p {
			out = append(out, signals.PoolSeries[i])
		}
	}
	return out
}

// generation is the provider generation of a qualified batch: a 53-bit
// FNV-1a hash of the site, cluster, provider, its configGeneration and the
// EPP's build info (inference_extension_info labels), an integer exact in
// a float64. It changes when the provider's declared configuration or the
// EPP build changes, not when the EPP restarts.
func generation(site, cluster string, p Provider, info string) uint64 {
	h := fnv.New64a()
	for _, s := range []string{site, cluster, p.Name, p.ConfigGeneration, info} {
		_, _ = h.Write([]byte(s))
		_, _ = h.Write([]byte{0})
	}
	return h.Sum64() & (signals.MaxGeneration - 1)
}

// scrapeTarget is one EPP metrics endpoint and the providers read from it.
type scrapeTarget struct {
	endpoint  string
	tokenFile string
	client    *http.Client
	providers []int // indexes of Relay.providers
	ca        *tlsutil.CABundle

	tokenMu sync.Mutex
	token   tokenCache

	failing bool // for transition logs; owned by the scrape loop
}

// tokenCache re-reads the bearer token file when its size or time changes.
type tokenCache struct {
	mod   time.Time
	size  int64
	token string
}

func (t *scrapeTarget) bearer() (string, error) {
	if t.tokenFile == "" {
		return "", nil
	}
	t.tokenMu.Lock()
	defer t.tokenMu.Unlock()
	st, err := os.Stat(t.tokenFile)
	if err != nil {
		return "", fmt.Errorf("bearer token file: %w", err)
	}
	if t.token.token != "" && st.ModTime().Equal(t.token.mod) && st.Size() == t.token.size {
		return t.token.token, nil
	}
	tok, _, err := tokenauth.ReadToken(t.tokenFile)
	if err != nil {
		return "", err
	}
	t.token = tokenCache{mod: st.ModTime(), size: st.Size(), token: string(tok)}
	return t.token.token, nil
}

// newScrapeClient builds the HTTP client of a metrics endpoint.
func newScrapeClient(mc *MetricsConfig, timeout time.Duration, log logr.Logger) (*http.Client, *tlsutil.CABundle, error) {
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           (&net.Dialer{Timeout: timeout}).DialContext,
		TLSHandshakeTimeout:   timeout,
		ResponseHeaderTimeout: timeout,
		MaxIdleConns:          2,
		MaxIdleConnsPerHost:   2,
		IdleConnTimeout:       time.Minute,
		DisableCompression:    false,
	}
	var bundle *tlsutil.CABundle
	if t := mc.TLS; t != nil {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
		switch {
		case t.InsecureSkipVerify:
			cfg.InsecureSkipVerify = true //nolint:gosec // asked for in the configuration
		case t.CAFile != "":
			b, err := tlsutil.NewCABundle(t.CAFile, log)
			if err != nil {
				return nil, nil, err
			}
			bundle = b
			cfg.InsecureSkipVerify = true //nolint:gosec // VerifyConnection checks the chain and the name against the bundle
			cfg.VerifyConnection = func(cs tls.ConnectionState) error {
				if len(cs.PeerCertificates) == 0 {
					return errors.New("the metrics endpoint sent no certificate")
				}
				inter := x509.NewCertPool()
				for _, c := range cs.PeerCertificates[1:] {
					inter.AddCert(c)
				}
				_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{DNSName: cs.ServerName, Roots: b.Pool(), Intermediates: inter})
				return err
			}
		}
		tr.TLSClientConfig = cfg
	}
	return &http.Client{Transport: tr, Timeout: timeout}, bundle, nil
}

// scrapeResult is one scrape of a target: per provider, a batch or the
// reason none was read.
type scrapeResult struct {
	err     error  // the whole scrape failed
	result  string // the result of a failed scrape
	batches map[string]*batch
	readAt  time.Time
	// unattributed counts the pool series without the provider label
	// that were dropped because the endpoint serves several providers.
	unattributed int
}

// scrape reads the target once. readAt is the time the response arrived:
// the instant the five series were read (G-05).
func (t *scrapeTarget) scrape(ctx context.Context, names []string, now func() time.Time) scrapeResult {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.endpoint, nil)
	if err != nil {
		return scrapeResult{err: err, result: ScrapeFailed}
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	tok, err := t.bearer()
	if err != nil {
		return scrapeResult{err: err, result: ScrapeTokenFile}
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := t.client.Do(req)
	if err != nil {
		return scrapeResult{err: err, result: ScrapeFailed}
	}
	readAt := now()
	defer func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
	}()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusUnauthorized, http.StatusForbidden:
		return scrapeResult{err: fmt.Errorf("GET %s: %s (check bearerTokenFile against the EPP's --metrics-token-file)", t.endpoint, resp.Status), result: ScrapeUnauthorized}
	default:
		return scrapeResult{err: fmt.Errorf("GET %s: %s", t.endpoint, resp.Status), result: ScrapeHTTPStatus}
	}
	batches, unattributed, result, err := parseEPPMetrics(resp.Body, names)
	if err != nil {
		return scrapeResult{err: fmt.Errorf("GET %s: %w", t.endpoint, err), result: result}
	}
	for _, b := range batches {
		b.readAt = readAt
	}
	return scrapeResult{batches: batches, readAt: readAt, unattributed: unattributed}
}

// wantedFamilies are the families parseEPPMetrics reads.
var wantedFamilies = append(signals.PoolSeries[:len(signals.PoolSeries):len(signals.PoolSeries)], nameInfo)

// flowControlIndex is the flow-control queue's index in
// signals.PoolSeries (the series labelled inference_pool, not name).
var flowControlIndex = slices.Index(signals.PoolSeries[:], signals.NameFlowControlQueue)

// errTooLarge is a metrics body above MaxMetricsBytes.
var errTooLarge = fmt.Errorf("the metrics body is larger than %d bytes", MaxMetricsBytes)

// parseEPPMetrics reads the five pool series of each provider from an EPP
// /metrics body: the gauges labelled name=<provider>, and for the
// flow-control queue the sum of the series labelled
// inference_pool=<provider>. Series without that label are the provider's
// only when the endpoint serves exactly one provider (the only series of
// a gauge family without a name label; the whole flow-control family
// when none of its series has the label); with several providers they
// cannot be attributed to any of them: they are not read, and counted in
// unattributed (one per series). A value that is NaN, infinite or
// negative counts as not read. Only the lines of the wanted families are
// parsed, so an unrelated malformed line does no harm. A provider with
// none of the five gets no batch.
func parseEPPMetrics(r io.Reader, providers []string) (batches map[string]*batch, unattributed int, result string, err error) {
	var filtered bytes.Buffer
	br := bufio.NewReaderSize(io.LimitReader(r, MaxMetricsBytes+1), 64<<10)
	total, keep, lineStart := 0, false, true
	for {
		chunk, err := br.ReadSlice('\n')
		total += len(chunk)
		if total > MaxMetricsBytes {
			return nil, 0, ScrapeTooLarge, errTooLarge
		}
		if len(chunk) > 0 {
			if lineStart {
				keep = slices.Contains(wantedFamilies, string(familyOf(chunk)))
			}
			if keep {
				filtered.Write(chunk)
			}
			lineStart = chunk[len(chunk)-1] == '\n'
		}
		if err == nil || errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if errors.Is(err, io.EOF) {
			break
		}
		return nil, 0, ScrapeFailed, fmt.Errorf("read metrics: %w", err)
	}
	if filtered.Len() > 0 && filtered.Bytes()[filtered.Len()-1] != '\n' {
		filtered.WriteByte('\n')
	}
	tp := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := tp.TextToMetricFamilies(&filtered)
	if err != nil {
		return nil, 0, ScrapeMalformed, fmt.Errorf("malformed metrics text: %w", err)
	}
	info := infoLabels(fams[nameInfo])
	single := len(providers) == 1
	if !single {
		for i, name := range signals.PoolSeries {
			key := "name"
			if i == flowControlIndex {
				key = "inference_pool"
			}
			for _, m := range fams[name].GetMetric() {
				if _, ok := label(m, key); !ok {
					unattributed++
				}
			}
		}
	}
	out := make(map[string]*batch, len(providers))
	for _, p := range providers {
		b := &batch{info: info}
		for i, name := range signals.PoolSeries {
			fam := fams[name]
			if fam == nil {
				continue
			}
			var v float64
			var ok bool
			if name == signals.NameFlowControlQueue {
				v, ok = sumByLabel(fam, "inference_pool", p, single)
			} else {
				v, ok = byName(fam, p, single)
			}
			if ok && !math.IsNaN(v) && !math.IsInf(v, 0) && v >= 0 {
				b.values[i], b.present[i] = v, true
			}
		}
		if b.any() {
			out[p] = b
		}
	}
	return out, unattributed, "", nil
}

// familyOf returns the family a text-format line belongs to: the name of
// a sample, or the name in a HELP or TYPE line; nil otherwise.
func familyOf(line []byte) []byte {
	line = bytes.TrimLeft(line, " \t")
	if len(line) == 0 {
		return nil
	}
	if line[0] == '#' {
		f := bytes.Fields(line[1:])
		if len(f) >= 2 && (string(f[0]) == "HELP" || string(f[0]) == "TYPE") {
			return f[1]
		}
		return nil
	}
	end := bytes.IndexAny(line, "{ \t\n")
	if end < 0 {
		end = len(line)
	}
	return line[:end]
}

func value(m *dto.Metric) (float64, bool) {
	switch {
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue(), true
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue(), true
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue(), true
	}
	return 0, false
}

func label(m *dto.Metric, name string) (string, bool) {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue(), true
		}
	}
	return "", false
}

// byName reads the series labelled name=<provider>; when single (the
// endpoint serves only this provider) a family of one series without a
// name label is taken as the provider's.
func byName(fam *dto.MetricFamily, provider string, single bool) (float64, bool) {
	ms := fam.GetMetric()
	for _, m := range ms {
		if v, ok := label(m, "name"); ok && v == provider {
			return value(m)
		}
	}
	if single && len(ms) == 1 {
		if _, ok := label(ms[0], "name"); !ok {
			return value(ms[0])
		}
	}
	return 0, false
}

// sumByLabel sums the series whose label key is value; false when there
// is none. When single (the endpoint serves only this provider) a family
// of series without the label at all is summed whole.
func sumByLabel(fam *dto.MetricFamily, key, want string, single bool) (float64, bool) {
	var sum float64
	found, labelled := false, false
	for _, m := range fam.GetMetric() {
		v, ok := label(m, key)
		labelled = labelled || ok
		if ok && v == want {
			x, ok := value(m)
			if !ok || math.IsNaN(x) || x < 0 {
				return math.NaN(), true
			}
			sum += x
			found = true
		}
	}
	if single && !found && !labelled && len(fam.GetMetric()) > 0 {
		for _, m := range fam.GetMetric() {
			x, _ := value(m)
			sum += x
		}
		return sum, true
	}
	return sum, found
}

// infoLabels renders the labels of the EPP's info series, sorted.
func infoLabels(fam *dto.MetricFamily) string {
	if fam == nil || len(fam.GetMetric()) == 0 {
		return ""
	}
	var parts []string
	for _, l := range fam.GetMetric()[0].GetLabel() {
		parts = append(parts, l.GetName()+"="+l.GetValue())
	}
	slices.Sort(parts)
	return strings.Join(parts, ",")
}
