package signals

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"time"
)

// ParseOptions says how to judge a body.
type ParseOptions struct {
	Limits
	// Date is the response's Date header (the skew rule, G-75); zero skips
	// the skew check.
	Date time.Time
	// SiteAllowed, when set, refuses rows of the sites it returns false
	// for (site_mismatch).
	SiteAllowed func(site string) bool
	// ExpectedSite, non-empty for a peer's body, refuses rows of any other
	// grid_site (site_mismatch): the verified identity decides, never the
	// labels (G-02).
	ExpectedSite string
}

// Result is what Parse accepted and what it refused.
type Result struct {
	Samples []Sample           // the accepted rows, in body order
	Dropped map[DropReason]int // refused rows by reason (nil when none)
	// FirstParseError describes the first malformed line (with its line
	// number), for logs; nil when no row was dropped as parse.
	FirstParseError error
	// Bytes is the size of the body read.
	Bytes int
}

// Skew bounds of G-75.
const (
	MaxFutureSkew = time.Second
	MaxAge        = 24 * time.Hour
)

var bufPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

type target struct{ site, provider string }

// Parse reads a body of at most opts.MaxBytes bytes (reading at most one
// byte more); over the limit it returns ErrTooLarge and nothing. A read
// error is returned as it is, with nothing. Every other problem drops the
// rows it concerns (see the package documentation for the order of the
// checks).
func Parse(r io.Reader, opts ParseOptions) (Result, error) {
	lim := opts.Limits.withDefaults()
	buf := bufPool.Get().(*bytes.Buffer)
	buf.Reset()
	defer func() {
		if buf.Cap() <= 2*DefaultMaxBytes {
			bufPool.Put(buf)
		}
	}()
	if _, err := buf.ReadFrom(io.LimitReader(r, lim.MaxBytes+1)); err != nil {
		return Result{}, err
	}
	if int64(buf.Len()) > lim.MaxBytes {
		return Result{}, ErrTooLarge
	}
	return parseBody(buf.Bytes(), opts, lim), nil
}

func parseBody(body []byte, opts ParseOptions, lim Limits) Result {
	res := Result{Bytes: len(body), Samples: make([]Sample, 0, bytes.Count(body, []byte{'\n'})+1)}
	p := parser{strs: make(map[string]string, 16)}
	lines := make(map[target]int, 16)
	var dateMs int64
	checkSkew := !opts.Date.IsZero()
	if checkSkew {
		dateMs = opts.Date.UnixMilli()
	}
	drop := func(reason DropReason) {
		if res.Dropped == nil {
			res.Dropped = make(map[DropReason]int, len(DropReasons))
		}
		res.Dropped[reason]++
	}
	for lineNo := 1; len(body) > 0; lineNo++ {
		var line []byte
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i], body[i+1:]
		} else {
			line, body = body, nil
		}
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		row, prob := parseLine(line)
		if prob.msg != "" {
			drop(DropParse)
			if res.FirstParseError == nil {
				res.FirstParseError = prob.err(lineNo)
			}
			continue
		}
		site := p.intern(row.site)
		if (opts.ExpectedSite != "" && site != opts.ExpectedSite) || (opts.SiteAllowed != nil && !opts.SiteAllowed(site)) {
			drop(DropSiteMismatch)
			continue
		}
		if checkSkew && (row.ms > dateMs+MaxFutureSkew.Milliseconds() || row.ms < dateMs-MaxAge.Milliseconds()) {
			drop(DropSkew)
			continue
		}
		s := Sample{
			Name:     row.ser.name,
			Site:     site,
			Cluster:  p.intern(row.cluster),
			Provider: p.intern(row.provider),
			Value:    row.value,
			Stamp:    time.UnixMilli(row.ms),
		}
		t := target{s.Site, s.Provider}
		if lines[t] >= lim.MaxLinesPerTarget {
			drop(DropCap)
			continue
		}
		lines[t]++
		res.Samples = append(res.Samples, s)
	}
	capProviders(&res, lines, lim.MaxProvidersPerSite, drop)
	return res
}

// capProviders drops the rows of the providers of a site beyond the first
// max by name.
func capProviders(res *Result, lines map[target]int, maxProviders int, drop func(DropReason)) {
	perSite := make(map[string][]string)
	over := false
	for t := range lines {
		if t.provider == "" {
			continue
		}
		perSite[t.site] = append(perSite[t.site], t.provider)
		if len(perSite[t.site]) > maxProviders {
			over = true
		}
	}
	if !over {
		return
	}
	refused := make(map[target]bool)
	for site, provs := range perSite {
		if len(provs) <= maxProviders {
			continue
		}
		slices.Sort(provs)
		for _, p := range provs[maxProviders:] {
			refused[target{site, p}] = true
		}
	}
	kept := res.Samples[:0]
	for _, s := range res.Samples {
		if refused[target{s.Site, s.Provider}] {
			drop(DropCap)
			continue
		}
		kept = append(kept, s)
	}
	clear(res.Samples[len(kept):])
	res.Samples = kept
}

type parser struct {
	strs map[string]string
}

// intern returns b as a string, one allocation per distinct value.
func (p *parser) intern(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if s, ok := p.strs[string(b)]; ok {
		return s
	}
	s := string(b)
	p.strs[s] = s
	return s
}

type row struct {
	ser                     *series
	site, cluster, provider []byte
	value                   float64
	ms                      int64
}

// problem is a malformed line: a fixed message and the bytes it is about.
type problem struct {
	msg    string
	detail []byte
}

func (p problem) err(line int) error {
	if p.detail == nil {
		return fmt.Errorf("signals: line %d: %s", line, p.msg)
	}
	d := p.detail
	if len(d) > 80 {
		d = d[:80]
	}
	return fmt.Errorf("signals: line %d: %s %q", line, p.msg, d)
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' }

func skipBlanks(b []byte, i int) int {
	for i < len(b) && isBlank(b[i]) {
		i++
	}
	return i
}

func isNameStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == ':'
}

func isNameChar(c byte) bool { return isNameStart(c) || c >= '0' && c <= '9' }

// parseLine parses one sample line of the closed set.
func parseLine(b []byte) (row, problem) {
	var r row
	i := 0
	for i < len(b) && (isNameChar(b[i]) && (i > 0 || isNameStart(b[i]))) {
		i++
	}
	if i == 0 {
		return r, problem{msg: "invalid metric name at", detail: b}
	}
	r.ser = lookupSeries(b[:i])
	if r.ser == nil {
		return r, problem{msg: "unknown series", detail: b[:i]}
	}
	var seen [3]bool
	if j := skipBlanks(b, i); j < len(b) && b[j] == '{' {
		i = j + 1
		for {
			i = skipBlanks(b, i)
			if i < len(b) && b[i] == '}' {
				i++
				break
			}
			start := i
			for i < len(b) && isNameChar(b[i]) && b[i] != ':' {
				i++
			}
			name := b[start:i]
			var slot int
			switch string(name) {
			case LabelSite:
				slot = 0
			case LabelCluster:
				slot = 1
			case LabelProvider:
				slot = 2
			default:
				return r, problem{msg: "unknown label", detail: name}
			}
			if seen[slot] {
				return r, problem{msg: "repeated label", detail: name}
			}
			seen[slot] = true
			i = skipBlanks(b, i)
			if i >= len(b) || b[i] != '=' {
				return r, problem{msg: "expected '=' after label", detail: name}
			}
			i = skipBlanks(b, i+1)
			if i >= len(b) || b[i] != '"' {
				return r, problem{msg: "expected '\"' after label", detail: name}
			}
			i++
			vstart := i
			for i < len(b) && b[i] != '"' {
				if b[i] == '\\' {
					i++ // escapes are skipped here; the value is refused below
				}
				i++
			}
			if i >= len(b) {
				return r, problem{msg: "unterminated label value of", detail: name}
			}
			val := b[vstart:i]
			i++
			switch slot {
			case 0:
				r.site = val
			case 1:
				r.cluster = val
			case 2:
				r.provider = val
			}
			i = skipBlanks(b, i)
			if i < len(b) && b[i] == ',' {
				i++
				continue
			}
			if i < len(b) && b[i] == '}' {
				i++
				break
			}
			return r, problem{msg: "expected ',' or '}' after label", detail: name}
		}
	}
	if r.ser.provider {
		if !seen[0] || !seen[1] || !seen[2] {
			return r, problem{msg: "a provider series needs grid_site, grid_cluster and grid_provider:", detail: b[:min(len(b), 80)]}
		}
	} else if !seen[0] || seen[1] || seen[2] {
		return r, problem{msg: "a peer round series takes grid_site only:", detail: b[:min(len(b), 80)]}
	}
	if !validLabel(r.site) {
		return r, problem{msg: "grid_site is not a DNS-1123 label:", detail: r.site}
	}
	if r.ser.provider {
		if !validSubdomain(r.cluster) {
			return r, problem{msg: "grid_cluster is not a DNS-1123 subdomain:", detail: r.cluster}
		}
		if !validLabel(r.provider) {
			return r, problem{msg: "grid_provider is not a DNS-1123 label:", detail: r.provider}
		}
	}
	// Value.
	if i >= len(b) || !isBlank(b[i]) {
		return r, problem{msg: "expected a blank and a value after", detail: b[:i]}
	}
	i = skipBlanks(b, i)
	vstart := i
	for i < len(b) && !isBlank(b[i]) {
		i++
	}
	if vstart == i {
		return r, problem{msg: "missing value"}
	}
	v, err := strconv.ParseFloat(string(b[vstart:i]), 64)
	if err != nil {
		return r, problem{msg: "invalid value", detail: b[vstart:i]}
	}
	if msg := checkValue(r.ser, v); msg != "" {
		return r, problem{msg: "value " + msg + ":", detail: b[vstart:i]}
	}
	r.value = v
	// Timestamp (required).
	i = skipBlanks(b, i)
	tstart := i
	for i < len(b) && !isBlank(b[i]) {
		i++
	}
	if tstart == i {
		return r, problem{msg: "missing timestamp"}
	}
	ms, err := strconv.ParseInt(string(b[tstart:i]), 10, 64)
	if err != nil {
		return r, problem{msg: "invalid timestamp (milliseconds)", detail: b[tstart:i]}
	}
	r.ms = ms
	if i = skipBlanks(b, i); i != len(b) {
		return r, problem{msg: "unexpected text after the timestamp", detail: b[i:]}
	}
	return r, problem{}
}

func validLabel(b []byte) bool {
	if len(b) == 0 || len(b) > 63 || b[0] == '-' || b[len(b)-1] == '-' {
		return false
	}
	for _, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

func validSubdomain(b []byte) bool {
	if len(b) == 0 || len(b) > 253 {
		return false
	}
	for len(b) > 0 {
		i := bytes.IndexByte(b, '.')
		if i < 0 {
			return validLabel(b)
		}
		if !validLabel(b[:i]) {
			return false
		}
		b = b[i+1:]
		if len(b) == 0 {
			return false // trailing dot
		}
	}
	return true
}
