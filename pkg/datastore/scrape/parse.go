package scrape

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/switchyard-ai/switchyard/pkg/plugins/datalayer/coremetrics"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Sentinel errors of ParseMetrics, for errors.Is.
var (
	// ErrMalformed: the body is not valid Prometheus text exposition.
	ErrMalformed = errors.New("malformed metrics text")
	// ErrNoMetrics: none of the mapping's metrics could be read.
	ErrNoMetrics = errors.New("none of the engine's metrics could be read")
)

// PartialError is returned by ParseMetrics when every load metric was
// read but some other metrics of the mapping were not (a LoRA or cache-info
// family the server does not expose, a label that is not a number). The
// Metrics returned with it hold every metric that was read; the rest are
// zero.
type PartialError struct {
	// Problems lists each metric that could not be read.
	Problems []error
}

func (e *PartialError) Error() string {
	msgs := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		msgs[i] = p.Error()
	}
	return "some metrics could not be read: " + strings.Join(msgs, "; ")
}

// The load metrics: the values scorers read as an endpoint's load. They
// are the metric label of switchyard_scrape_invalid_values_total and
// LoadProblem.Metric.
const (
	LoadQueue   = "queue"    // EngineMapping.QueuedRequests: waiting requests
	LoadRunning = "running"  // EngineMapping.RunningRequests: running requests
	LoadKVCache = "kv_cache" // EngineMapping.KVUsage (or KVUsageFallback): KV-cache usage
)

// loadMetrics is the closed set of LoadProblem.Metric values, in the
// order ParseMetrics reads them.
var loadMetrics = []string{LoadQueue, LoadRunning, LoadKVCache}

// Kinds of LoadProblem: why a load metric could not be read.
const (
	ProblemAbsent    = "absent"     // the family is missing, or no series matches the spec
	ProblemWrongType = "wrong_type" // the family is not a gauge, counter or untyped metric
	ProblemNaN       = "nan"        // the value is NaN
	ProblemInf       = "inf"        // the value is +Inf or -Inf
	ProblemNegative  = "negative"   // the value is below zero
)

// LoadProblem is one load metric that ParseMetrics could not read.
type LoadProblem struct {
	// Metric is LoadQueue, LoadRunning or LoadKVCache.
	Metric string
	// Spec is the metric as configured, e.g. vllm:num_requests_waiting
	// (for KV-cache usage, the fallback when it was the one read).
	Spec string
	// Kind is one of the Problem* constants.
	Kind string
	// Value is the value read, for ProblemNaN, ProblemInf and
	// ProblemNegative.
	Value float64
	// Detail explains ProblemWrongType, and ProblemAbsent when the family
	// is present but no series matches.
	Detail string
}

// String says which metric and why, e.g. "vllm:num_requests_waiting is
// NaN".
func (p LoadProblem) String() string {
	switch p.Kind {
	case ProblemNaN, ProblemInf:
		return p.Spec + " is " + strconv.FormatFloat(p.Value, 'g', -1, 64)
	case ProblemNegative:
		return p.Spec + " is negative (" + strconv.FormatFloat(p.Value, 'g', -1, 64) + ")"
	case ProblemAbsent:
		if p.Detail == "" {
			return p.Spec + " is absent"
		}
		return p.Spec + " is absent (" + p.Detail + ")"
	}
	return p.Spec + " cannot be read (" + p.Detail + ")"
}

// LoadUnknownError is returned by ParseMetrics when the body is valid text
// format holding the engine's metrics, but a load metric the mapping
// configures (queue, running requests, KV-cache usage) cannot be read: it is
// NaN, ±Inf, negative, of the wrong type or absent. A zero would make the
// endpoint look idle, so the endpoint's load is unknown: the Metrics
// returned with this error are zero and must not be used. The scraper
// reports the endpoint as not fresh (datastore.ScrapeResult.LoadUnknown),
// which keeps it out of Ready while any endpoint is fresh.
type LoadUnknownError struct {
	// Problems lists each load metric that could not be read, in the order
	// queue, running, kv_cache; it is never empty.
	Problems []LoadProblem
	// Warnings lists the other metrics (LoRA, cache info) that could not be
	// read, as PartialError.Problems would.
	Warnings []error
}

// Reason lists the problems, e.g. "vllm:num_requests_waiting is NaN;
// vllm:kv_cache_usage_perc is negative (-1)".
func (e *LoadUnknownError) Reason() string {
	msgs := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		msgs[i] = p.String()
	}
	return strings.Join(msgs, "; ")
}

// Kinds identifies the problems without their values ("queue:nan,
// kv_cache:negative"), to tell a new problem from the same one with another
// value.
func (e *LoadUnknownError) Kinds() string {
	msgs := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		msgs[i] = p.Metric + ":" + p.Kind
	}
	return strings.Join(msgs, ",")
}

func (e *LoadUnknownError) Error() string {
	return "load unknown: " + e.Reason()
}

// LoRA info labels, as vLLM exposes them on vllm:lora_requests_info.
const (
	loraRunningLabel = "running_lora_adapters"
	loraWaitingLabel = "waiting_lora_adapters"
	loraMaxLabel     = "max_lora"
)

// maxLineBuffer bounds the bytes buffered per line while filtering; longer
// lines are streamed through in pieces.
const maxLineBuffer = 64 << 10

type parser struct {
	br  *bufio.Reader
	buf bytes.Buffer
	tp  expfmt.TextParser
	// lines maps the lines of buf (index+1) to the body's line numbers.
	lines []int
	total int // lines in the body
}

var parsers = sync.Pool{New: func() any {
	return &parser{br: bufio.NewReaderSize(nil, maxLineBuffer), tp: expfmt.NewTextParser(model.UTF8Validation)}
}}

// ParseMetrics reads one Prometheus text-format /metrics body and maps it to
// scheduling.Metrics with an engine mapping, following GIE v1.5's
// core-metrics-extractor:
//
//   - Each spec selects the series of its family whose labels match (a
//     missing label counts as ""); among them the one with the newest
//     timestamp wins, the first one on a tie (GIE's rule; series without
//     timestamps tie). Values come from gauges, counters and untyped
//     metrics; integer metrics are rounded toward zero and capped at
//     MaxInt32, KV-cache usage at 1.
//   - KV-cache usage falls back to KVUsageFallback when the KVUsage family
//     is absent (vLLM before the kv_cache_usage_perc rename).
//   - LoRA: among matching series the one with the largest value (a
//     creation timestamp) wins; its running_lora_adapters and
//     waiting_lora_adapters labels (comma-separated) become ActiveModels
//     and WaitingModels (every adapter with count 0, as in GIE) and
//     max_lora becomes MaxActiveModels.
//   - Cache info: block size and block count from the CacheInfo series'
//     labels, then from the CacheBlockSize/CacheNumBlocks gauges when set.
//
// # Load metrics
//
// The queue, running-requests and KV-cache-usage metrics are the
// endpoint's load: a value that cannot be read must never look like an
// idle server. When the mapping configures one of them and it is NaN,
// ±Inf, negative, not a gauge/counter/untyped metric, or absent (no series
// matches), ParseMetrics returns a *LoadUnknownError and zero Metrics.
// Absence counts, as in GIE's extractor, which fails on a missing
// configured metric: a server that answers /metrics without its queue
// would otherwise read as having an empty queue. An engine whose servers
// lack a load metric must be configured without it (an engineConfigs
// entry with that spec empty); scorers then see zero for every endpoint
// alike. The other metrics (LoRA info, cache geometry) stay best-effort: a
// missing or bad one is a warning (*PartialError, or
// LoadUnknownError.Warnings) and reads as zero.
//
// Only the lines of the mapping's metric families are parsed (by
// expfmt.TextParser, UTF-8 name validation); other lines are skipped, so a
// malformed line of an unrelated family does not fail the scrape. Errors,
// in this order: ErrMalformed when the selected lines are not valid text
// format, a read error from r, ErrNoMetrics when the mapping configures
// metrics, none could be read and no load metric is present (not the
// engine's metrics at all), *LoadUnknownError as above, or *PartialError when only non-load metrics
// could not be read (the returned Metrics are then usable). A mapping that
// configures no metric reads nothing and returns zero Metrics. UpdateTime
// is left zero. ParseMetrics never panics.
func ParseMetrics(r io.Reader, m coremetrics.EngineMapping) (met scheduling.Metrics, err error) {
	return parseMetrics(r, m, nil)
}

// lastParse remembers one endpoint's last parse: the lines of the wanted
// families (the text that was parsed) and what they gave. A scrape whose
// wanted lines are byte for byte the same gives the same answer, so
// parseMetrics returns it without parsing again: an idle server's load
// gauges do not move between scrapes, and every other line of the body
// (counters, histograms) is not part of the text. The Metrics' maps are
// shared between the scrapes, which scheduling.Metrics allows (they are
// read-only). A lastParse is owned by one worker goroutine.
type lastParse struct {
	// key identifies the mapping the text was parsed with (the scraper's
	// configuration and the engine); a different key never matches.
	key   lastParseKey
	valid bool
	text  []byte
	met   scheduling.Metrics
	err   error
}

// maxRememberedText bounds lastParse.text: wanted lines beyond it are
// parsed every time.
const maxRememberedText = 64 << 10

// parseMetrics is ParseMetrics, answering from last when the wanted lines
// are those of the last parse with the same key (last may be nil), and
// updating it.
func parseMetrics(r io.Reader, m coremetrics.EngineMapping, last *lastParse) (met scheduling.Metrics, err error) {
	var wanted [8]string
	names := wantedNames(&m, wanted[:0])
	p := parsers.Get().(*parser)
	defer func() {
		if r := recover(); r != nil {
			// The parser's state is unknown: drop it instead of pooling it.
			met, err = scheduling.Metrics{}, fmt.Errorf("%w: parser failure: %v", ErrMalformed, r)
			return
		}
		p.release()
	}()
	if err := p.filter(r, names); err != nil {
		return scheduling.Metrics{}, err
	}
	if len(names) == 0 {
		return scheduling.Metrics{}, nil
	}
	text := p.buf.Bytes()
	if last != nil && last.valid && bytes.Equal(last.text, text) {
		return last.met, last.err
	}
	fams, perr := p.tp.TextToMetricFamilies(bytes.NewReader(text))
	if perr != nil {
		met, err = scheduling.Metrics{}, fmt.Errorf("%w: %s", ErrMalformed, p.bodyLines(perr.Error()))
	} else {
		met, err = extract(fams, &m)
	}
	last.remember(text, met, err)
	return met, err
}

// remember records a parse; a nil last records nothing. An oversized text
// or a malformed one (its error names lines of the body, which other lines
// may move) forgets the previous parse instead.
func (last *lastParse) remember(text []byte, met scheduling.Metrics, err error) {
	if last == nil {
		return
	}
	if len(text) > maxRememberedText || errors.Is(err, ErrMalformed) {
		*last = lastParse{key: last.key}
		return
	}
	last.text = append(last.text[:0], text...)
	last.met, last.err, last.valid = met, err, true
}

// reset forgets the last parse unless it was made with key.
func (last *lastParse) reset(key lastParseKey) {
	if last.key != key {
		*last = lastParse{key: key}
	}
}

func (p *parser) release() {
	p.br.Reset(nil)
	p.lines = p.lines[:0]
	if cap(p.lines) > 4096 {
		p.lines = nil
	}
	if p.buf.Cap() > 1<<20 {
		p.buf = bytes.Buffer{}
	} else {
		p.buf.Reset()
	}
	parsers.Put(p)
}

// wantedNames appends the metric family names the mapping reads.
func wantedNames(m *coremetrics.EngineMapping, dst []string) []string {
	for _, s := range []*coremetrics.MetricSpec{m.QueuedRequests, m.RunningRequests, m.KVUsage, m.KVUsageFallback, m.LoRA, m.CacheInfo, m.CacheBlockSize, m.CacheNumBlocks} {
		if s != nil {
			dst = append(dst, s.Name)
		}
	}
	return dst
}

// NameFilterParam is the query parameter that asks a Prometheus
// exposition for some families only (Prometheus client_python, hence vLLM,
// SGLang and trtllm-serve, restrict their answer to the names given).
const NameFilterParam = "name[]"

// WantedFamilies returns the metric families m reads, sorted, without
// repetition: the values of NameFilterParam for m.
func WantedFamilies(m *coremetrics.EngineMapping) []string {
	names := wantedNames(m, nil)
	slices.Sort(names)
	return slices.Compact(names)
}

func isWanted(name []byte, wanted []string) bool {
	for _, w := range wanted {
		if string(name) == w {
			return true
		}
	}
	return false
}

// filter copies the lines of the wanted families from r into p.buf and
// records their line numbers in the body.
func (p *parser) filter(r io.Reader, wanted []string) error {
	p.br.Reset(r)
	keep, lineStart := false, true
	p.total = 0
	for {
		chunk, err := p.br.ReadSlice('\n')
		if len(chunk) > 0 {
			if lineStart {
				p.total++
				keep = len(wanted) > 0 && isWanted(familyOf(chunk), wanted)
				if keep {
					p.lines = append(p.lines, p.total)
				}
			}
			if keep {
				p.buf.Write(chunk)
			}
			lineStart = chunk[len(chunk)-1] == '\n'
		}
		switch {
		case err == nil, errors.Is(err, bufio.ErrBufferFull):
		case errors.Is(err, io.EOF):
			return nil
		default:
			return fmt.Errorf("read metrics: %w", err)
		}
	}
}

// bodyLines rewrites the text parser's "in line N" (a line of the filtered
// text) to the line number in the body.
func (p *parser) bodyLines(msg string) string {
	const marker = "in line "
	before, after, ok := strings.Cut(msg, marker)
	if !ok {
		return msg
	}
	end := strings.IndexFunc(after, func(r rune) bool { return r < '0' || r > '9' })
	if end <= 0 {
		return msg
	}
	n, err := strconv.Atoi(after[:end])
	if err != nil || n < 1 {
		return msg
	}
	line := p.total + 1
	if n <= len(p.lines) {
		line = p.lines[n-1]
	}
	return before + marker + strconv.Itoa(line) + after[end:]
}

// familyOf returns the metric family a text-format line belongs to: the
// metric name of a sample line, the name in a "# HELP" or "# TYPE" line,
// nil for other comments and blank lines.
func familyOf(line []byte) []byte {
	line = bytes.TrimLeft(line, " \t")
	if len(line) == 0 {
		return nil
	}
	if line[0] == '#' {
		rest := bytes.TrimLeft(line[1:], " \t")
		var ok bool
		if rest, ok = bytes.CutPrefix(rest, []byte("HELP")); !ok {
			if rest, ok = bytes.CutPrefix(rest, []byte("TYPE")); !ok {
				return nil
			}
		}
		if len(rest) == 0 || (rest[0] != ' ' && rest[0] != '\t') {
			return nil
		}
		line = bytes.TrimLeft(rest, " \t")
	}
	end := bytes.IndexAny(line, "{ \t\r\n")
	if end < 0 {
		end = len(line)
	}
	return line[:end]
}

// extract maps parsed families to Metrics.
func extract(fams map[string]*dto.MetricFamily, m *coremetrics.EngineMapping) (scheduling.Metrics, error) {
	var met scheduling.Metrics
	var problems []error
	var load []LoadProblem
	read, configured := 0, 0
	// found reports whether some configured family was present, even with
	// an unusable value.
	found := false
	readLoadInt := func(metric string, spec *coremetrics.MetricSpec, dst *int) {
		if spec == nil {
			return
		}
		configured++
		v, p, ok := loadValue(fams, metric, spec)
		if !ok {
			load = append(load, p)
			found = found || p.Kind != ProblemAbsent
			return
		}
		*dst = toInt(v)
		read++
	}
	readInt := func(spec *coremetrics.MetricSpec, dst *int) {
		if spec == nil {
			return
		}
		configured++
		v, err := gaugeValue(fams, spec)
		if err != nil {
			problems = append(problems, err)
			return
		}
		*dst = toInt(v)
		read++
	}
	readLoadInt(LoadQueue, m.QueuedRequests, &met.WaitingQueueSize)
	readLoadInt(LoadRunning, m.RunningRequests, &met.RunningRequestsSize)
	if spec := m.KVUsage; spec != nil {
		configured++
		if _, present := fams[spec.Name]; !present && m.KVUsageFallback != nil {
			if _, fb := fams[m.KVUsageFallback.Name]; fb {
				spec = m.KVUsageFallback
			}
		}
		if v, p, ok := loadValue(fams, LoadKVCache, spec); !ok {
			if p.Kind == ProblemAbsent && p.Detail == "" && spec != m.KVUsageFallback && m.KVUsageFallback != nil {
				p.Detail = "and so is " + m.KVUsageFallback.String()
			}
			load = append(load, p)
			found = found || p.Kind != ProblemAbsent
		} else {
			// Above 1 is impossible; reading it as full is the
			// pessimistic choice.
			met.KVCacheUsagePercent = min(v, 1)
			read++
		}
	}
	if spec := m.LoRA; spec != nil {
		configured++
		if s, err := latestLoRA(fams, spec); err != nil {
			problems = append(problems, err)
		} else {
			read++
			met.ActiveModels = adapters(labelValue(s, loraRunningLabel))
			met.WaitingModels = adapters(labelValue(s, loraWaitingLabel))
			if v := labelValue(s, loraMaxLabel); v != "" {
				if n, err := strconv.Atoi(v); err == nil && n >= 0 {
					met.MaxActiveModels = n
				} else {
					problems = append(problems, fmt.Errorf("%s: label %s=%q is not a non-negative integer", spec, loraMaxLabel, v))
				}
			}
		}
	}
	if spec := m.CacheInfo; spec != nil {
		configured++
		if s, err := latest(fams, spec); err != nil {
			problems = append(problems, err)
		} else {
			read++
			for _, l := range []struct {
				name string
				dst  *int
			}{{m.CacheBlockSizeLabel, &met.CacheBlockSize}, {m.CacheNumBlocksLabel, &met.CacheNumBlocks}} {
				v := labelValue(s, l.name)
				if v == "" {
					continue
				}
				if n, err := strconv.Atoi(v); err == nil && n >= 0 {
					*l.dst = n
				} else {
					problems = append(problems, fmt.Errorf("%s: label %s=%q is not a non-negative integer", spec, l.name, v))
				}
			}
		}
	}
	readInt(m.CacheBlockSize, &met.CacheBlockSize)
	readInt(m.CacheNumBlocks, &met.CacheNumBlocks)
	switch {
	case configured > 0 && read == 0 && !found:
		all := make([]error, 0, len(load)+len(problems))
		for _, p := range load {
			all = append(all, errors.New(p.String()))
		}
		all = append(all, problems...)
		return scheduling.Metrics{}, fmt.Errorf("%w: %w", ErrNoMetrics, errors.Join(all...))
	case len(load) > 0:
		return scheduling.Metrics{}, &LoadUnknownError{Problems: load, Warnings: problems}
	case len(problems) > 0:
		return met, &PartialError{Problems: problems}
	}
	return met, nil
}

// loadValue reads a load metric: a finite, non-negative number (ok), or
// the problem that prevents it. It allocates nothing when ok.
func loadValue(fams map[string]*dto.MetricFamily, metric string, spec *coremetrics.MetricSpec) (v float64, p LoadProblem, ok bool) {
	if f := fams[spec.Name]; f == nil || len(f.GetMetric()) == 0 {
		p.Kind = ProblemAbsent
	} else if s, err := latest(fams, spec); err != nil {
		p.Kind, p.Detail = ProblemAbsent, "no series matches"
	} else if v, ok = value(s); !ok {
		p.Kind, p.Detail = ProblemWrongType, fmt.Sprintf("a %s; want a gauge, counter or untyped metric", strings.ToLower(f.GetType().String()))
	} else {
		switch {
		case math.IsNaN(v):
			p.Kind, p.Value = ProblemNaN, v
		case math.IsInf(v, 0):
			p.Kind, p.Value = ProblemInf, v
		case v < 0:
			p.Kind, p.Value = ProblemNegative, v
		default:
			return v, LoadProblem{}, true
		}
	}
	p.Metric, p.Spec = metric, spec.String()
	return 0, p, false
}

// matches reports whether a series has every label the spec requires (a
// missing label counts as "", as coremetrics.MetricSpec.Matches says).
func matches(s *dto.Metric, spec *coremetrics.MetricSpec) bool {
	for k, v := range spec.Labels {
		if labelValue(s, k) != v {
			return false
		}
	}
	return true
}

func labelValue(s *dto.Metric, name string) string {
	for _, l := range s.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func family(fams map[string]*dto.MetricFamily, spec *coremetrics.MetricSpec) (*dto.MetricFamily, error) {
	f, ok := fams[spec.Name]
	if !ok || len(f.GetMetric()) == 0 {
		return nil, fmt.Errorf("metric %s not found", spec.Name)
	}
	return f, nil
}

// latest returns the matching series with the newest timestamp, the first
// one on a tie.
func latest(fams map[string]*dto.MetricFamily, spec *coremetrics.MetricSpec) (*dto.Metric, error) {
	f, err := family(fams, spec)
	if err != nil {
		return nil, err
	}
	var best *dto.Metric
	for _, s := range f.GetMetric() {
		if matches(s, spec) && (best == nil || s.GetTimestampMs() > best.GetTimestampMs()) {
			best = s
		}
	}
	if best == nil {
		return nil, fmt.Errorf("no series of %s matches %s", spec.Name, spec)
	}
	return best, nil
}

// latestLoRA returns the matching series with the largest value.
func latestLoRA(fams map[string]*dto.MetricFamily, spec *coremetrics.MetricSpec) (*dto.Metric, error) {
	f, err := family(fams, spec)
	if err != nil {
		return nil, err
	}
	var best *dto.Metric
	bestV := math.Inf(-1)
	for _, s := range f.GetMetric() {
		if !matches(s, spec) {
			continue
		}
		v, ok := value(s)
		if !ok || math.IsNaN(v) {
			continue
		}
		if best == nil || v > bestV {
			best, bestV = s, v
		}
	}
	if best == nil {
		return nil, fmt.Errorf("no series of %s matches %s", spec.Name, spec)
	}
	return best, nil
}

// value returns a gauge, counter or untyped sample's value.
func value(s *dto.Metric) (float64, bool) {
	switch {
	case s.Gauge != nil:
		return s.Gauge.GetValue(), true
	case s.Counter != nil:
		return s.Counter.GetValue(), true
	case s.Untyped != nil:
		return s.Untyped.GetValue(), true
	}
	return 0, false
}

// gaugeValue returns the finite value of the spec's selected series.
func gaugeValue(fams map[string]*dto.MetricFamily, spec *coremetrics.MetricSpec) (float64, error) {
	s, err := latest(fams, spec)
	if err != nil {
		return 0, err
	}
	v, ok := value(s)
	if !ok {
		return 0, fmt.Errorf("metric %s is a %s; want a gauge, counter or untyped metric", spec.Name, strings.ToLower(fams[spec.Name].GetType().String()))
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("metric %s has the value %v; want a finite number", spec, v)
	}
	return v, nil
}

func toInt(v float64) int {
	switch {
	case v <= 0:
		return 0
	case v >= math.MaxInt32:
		return math.MaxInt32
	}
	return int(v)
}

// adapters splits a comma-separated adapter list into a set (count 0).
func adapters(csv string) map[string]int {
	out := map[string]int{}
	for name := range strings.SplitSeq(csv, ",") {
		if n := strings.TrimSpace(name); n != "" {
			out[n] = 0
		}
	}
	return out
}
