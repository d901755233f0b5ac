package gateway

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// Header names the gateway reads or writes (lower case, as on the wire to the EPP).
const (
	// DestinationHeader carries the EPP's destination list (ORIGINAL_DST with
	// use_http_header routes on it).
	DestinationHeader = "x-gateway-destination-endpoint"
	// ServedKey is the envoy.lb metadata key naming the endpoint that served.
	ServedKey = "x-gateway-destination-endpoint-served"
	// SubsetKey is the subset-hint metadata key.
	SubsetKey = "x-gateway-destination-endpoint-subset"
	// LBNamespace is the dynamic/filter metadata namespace of the destination
	// and the served endpoint.
	LBNamespace = "envoy.lb"
	// SubsetNamespace is the filter metadata namespace of the subset hint.
	SubsetNamespace = "envoy.lb.subset_hint"
	// ReasonHeader names why the gateway itself generated a reply.
	ReasonHeader = "x-switchyard-reason"
	// RequestIDHeader is generated when the client sent none, as Envoy does.
	RequestIDHeader = "x-request-id"
)

const (
	hdrXForwardedFor   = "X-Forwarded-For"
	hdrXForwardedProto = "X-Forwarded-Proto"
	hdrXRequestID      = "X-Request-Id"
	hdrUserAgent       = "User-Agent"
	hdrContentLength   = "Content-Length"
	hdrContentType     = "Content-Type"
	hdrTrailer         = "Trailer"
)

// commonHeaders maps canonical names of frequent headers to their lower-case
// form and back, so the hot path does not allocate for them.
var (
	canonToLower = map[string]string{}
	lowerToCanon = map[string]string{}
)

func init() {
	for _, c := range []string{
		"Accept", "Accept-Encoding", "Accept-Language", "Authorization", "Cache-Control",
		"Connection", "Content-Encoding", "Content-Length", "Content-Type", "Cookie", "Date",
		"Etag", "Expect", "Host", "Keep-Alive", "Last-Modified", "Location", "Origin",
		"Pragma", "Proxy-Connection", "Referer", "Retry-After", "Server", "Set-Cookie", "Te",
		"Trailer", "Transfer-Encoding", "Upgrade", "User-Agent", "Vary",
		"Traceparent", "Tracestate", "X-Forwarded-For", "X-Forwarded-Proto", "X-Request-Id",
		"X-Gateway-Destination-Endpoint", "X-Gateway-Destination-Endpoint-Subset",
		"X-Gateway-Destination-Endpoint-Served", "X-Gateway-Inference-Objective",
		"X-Gateway-Inference-Fairness-Id", "X-Gateway-Model-Name-Rewrite",
		"X-Went-Into-Resp-Headers", "X-Switchyard-Reason", "X-Ratelimit-Remaining-Requests",
		"X-Ratelimit-Remaining-Tokens",
	} {
		l := strings.ToLower(c)
		canonToLower[c] = l
		lowerToCanon[l] = c
	}
}

func lowerKey(canon string) string {
	if l, ok := canonToLower[canon]; ok {
		return l
	}
	return strings.ToLower(canon)
}

func canonKey(k string) string {
	if c, ok := lowerToCanon[k]; ok {
		return c
	}
	return textproto.CanonicalMIMEHeaderKey(k)
}

// hopByHop lists the headers Envoy's HTTP connection manager strips before
// filters run (and that Go's transport manages itself). TE is kept when it is
// exactly "trailers".
var hopByHop = [...]string{"Connection", "Proxy-Connection", "Keep-Alive", "Transfer-Encoding", "Upgrade", "Te", "Trailer"}

func isHopByHopLower(k string) bool {
	switch k {
	case "connection", "proxy-connection", "keep-alive", "transfer-encoding", "upgrade", "te", "trailer":
		return true
	}
	return false
}

// stripHopByHop removes hop-by-hop headers and the headers the Connection
// header nominates.
func stripHopByHop(h http.Header) {
	for _, v := range h["Connection"] {
		for tok := range strings.SplitSeq(v, ",") {
			if tok = textproto.TrimString(tok); tok != "" {
				h.Del(tok)
			}
		}
	}
	for _, k := range hopByHop {
		if k == "Te" {
			if v := h["Te"]; len(v) == 1 && strings.EqualFold(textproto.TrimString(v[0]), "trailers") {
				continue
			}
		}
		delete(h, k)
	}
}

// upstreamRequestHeader derives the request headers that both the EPP and the
// upstream see from the client's: a copy without hop-by-hop headers and Expect,
// with x-forwarded-for / x-forwarded-proto set like Envoy's use_remote_address:
// true, and x-request-id generated when absent.
func upstreamRequestHeader(r *http.Request) http.Header {
	h := r.Header.Clone()
	if h == nil {
		h = make(http.Header, 4)
	}
	stripHopByHop(h)
	delete(h, "Expect")
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil && ip != "" {
		if prior := h[hdrXForwardedFor]; len(prior) > 0 {
			h[hdrXForwardedFor] = []string{strings.Join(prior, ", ") + ", " + ip}
		} else {
			h[hdrXForwardedFor] = []string{ip}
		}
	}
	if r.TLS != nil {
		h[hdrXForwardedProto] = []string{"https"}
	} else {
		h[hdrXForwardedProto] = []string{"http"}
	}
	if v := h[hdrXRequestID]; len(v) == 0 || v[0] == "" {
		h[hdrXRequestID] = []string{newRequestID()}
	}
	return h
}

// newRequestID returns a random RFC 4122 version 4 UUID. Like Envoy's request
// ids it needs uniqueness, not unpredictability, so it uses math/rand/v2.
func newRequestID() string {
	var u [16]byte
	a, b := rand.Uint64(), rand.Uint64()
	for i := range 8 {
		u[i] = byte(a >> (8 * i))
		u[8+i] = byte(b >> (8 * i))
	}
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	const hexdigits = "0123456789abcdef"
	var out [36]byte
	j := 0
	for i, c := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			out[j] = '-'
			j++
		}
		out[j] = hexdigits[c>>4]
		out[j+1] = hexdigits[c&0x0f]
		j += 2
	}
	return string(out[:])
}

// rawBytes returns s's bytes without copying. The result is only ever read
// (marshalled into a ProcessingRequest); it must never be written.
func rawBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

type headerKey struct{ lower, canon string }

// headerMap converts pseudo-headers (already lower case, in order) and h into
// an ext_proc HeaderMap: pseudo-headers first, then h's headers sorted by
// lower-case name, one entry per value, values in raw_value.
func headerMap(pseudo []string, h http.Header) *corev3.HeaderMap {
	n := len(pseudo) / 2
	keys := make([]headerKey, 0, len(h))
	for k, vs := range h {
		keys = append(keys, headerKey{lower: lowerKey(k), canon: k})
		n += len(vs)
	}
	slices.SortFunc(keys, func(a, b headerKey) int { return strings.Compare(a.lower, b.lower) })
	vals := make([]corev3.HeaderValue, n)
	ptrs := make([]*corev3.HeaderValue, n)
	i := 0
	for p := 0; p+1 < len(pseudo); p += 2 {
		vals[i].Key, vals[i].RawValue = pseudo[p], rawBytes(pseudo[p+1])
		ptrs[i] = &vals[i]
		i++
	}
	for _, k := range keys {
		for _, v := range h[k.canon] {
			vals[i].Key, vals[i].RawValue = k.lower, rawBytes(v)
			ptrs[i] = &vals[i]
			i++
		}
	}
	return &corev3.HeaderMap{Headers: ptrs}
}

// statusStrings caches the decimal form of the common status codes.
var statusStrings = func() (s [600]string) {
	for i := 100; i < 600; i++ {
		s[i] = strconv.Itoa(i)
	}
	return
}()

func statusString(code int) string {
	if code >= 100 && code < 600 {
		return statusStrings[code]
	}
	return strconv.Itoa(code)
}

// mutationTarget selects the rules a header mutation is checked against.
type mutationTarget uint8

const (
	// targetRequest: Envoy's default HeaderMutationRules on request headers;
	// :path may change, :method/:authority/:scheme/host and x-envoy-* may not.
	targetRequest mutationTarget = iota
	// targetResponse: the same rules on response headers; :status may change.
	targetResponse
	// targetTrailers: the same rules on trailers; no pseudo-headers.
	targetTrailers
	// targetImmediate: Envoy's permissive rules for immediate responses
	// (allow_all_routing and allow_envoy); pseudo-headers are ignored.
	targetImmediate
)

// pseudoMutations collects accepted pseudo-header changes.
type pseudoMutations struct {
	path   string // new :path of the request, "" = unchanged
	status int    // new :status of the response, 0 = unchanged
}

// applyHeaderMutation applies m to h (canonical keys) the way Envoy's ext_proc
// filter does: remove_headers first, then set_headers in order. For each
// HeaderValueOption the non-default append_action wins; with the default
// (APPEND_IF_EXISTS_OR_ADD, indistinguishable from unset) the deprecated
// append flag decides and defaults to false in ext_proc, i.e. overwrite.
// Values come from raw_value (from value when raw_value is empty; setting both
// is an error). Disallowed changes are ignored, invalid names or values are an
// error (Envoy fails the stream for them).
func applyHeaderMutation(h http.Header, m *extprocv3.HeaderMutation, t mutationTarget, ps *pseudoMutations) error {
	if m == nil {
		return nil
	}
	for i, name := range m.GetRemoveHeaders() {
		lower := strings.ToLower(name)
		if !validMutationName(lower) {
			return fmt.Errorf("remove_headers[%d]: invalid header name %q", i, name)
		}
		if lower[0] == ':' || lower == "host" || (t != targetImmediate && strings.HasPrefix(lower, "x-envoy")) {
			continue // never removable / disallowed: ignored like Envoy
		}
		delete(h, canonKey(lower))
	}
	for i, opt := range m.GetSetHeaders() {
		hv := opt.GetHeader()
		if hv == nil {
			continue
		}
		if hv.GetValue() != "" && len(hv.GetRawValue()) > 0 {
			return fmt.Errorf("set_headers[%d] %q: only one of value and raw_value may be set", i, hv.GetKey())
		}
		lower := strings.ToLower(hv.GetKey())
		if !validMutationName(lower) {
			return fmt.Errorf("set_headers[%d]: invalid header name %q", i, hv.GetKey())
		}
		var value string
		if raw := hv.GetRawValue(); len(raw) > 0 {
			value = string(raw)
		} else {
			value = hv.GetValue()
		}
		if !validHeaderValue(value) {
			return fmt.Errorf("set_headers[%d] %q: invalid header value %q", i, hv.GetKey(), value)
		}
		appendMode, apply := false, true
		canon := ""
		exists := func() bool {
			if lower[0] == ':' {
				return true // pseudo-headers always exist
			}
			if canon == "" {
				canon = canonKey(lower)
			}
			return len(h[canon]) > 0
		}
		switch opt.GetAppendAction() {
		case corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD:
			appendMode = opt.GetAppend().GetValue()
		case corev3.HeaderValueOption_ADD_IF_ABSENT:
			appendMode, apply = true, !exists()
		case corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD:
		case corev3.HeaderValueOption_OVERWRITE_IF_EXISTS:
			apply = exists()
		default:
			return fmt.Errorf("set_headers[%d] %q: invalid append_action %d", i, hv.GetKey(), opt.GetAppendAction())
		}
		if !apply || !mutationAllowed(lower, t) {
			continue
		}
		if lower[0] == ':' {
			if err := applyPseudo(lower, value, t, ps); err != nil {
				return fmt.Errorf("set_headers[%d]: %w", i, err)
			}
			continue
		}
		if canon == "" {
			canon = canonKey(lower)
		}
		if appendMode {
			h[canon] = append(h[canon], value)
		} else {
			h[canon] = []string{value}
		}
	}
	return nil
}

// mutationAllowed reports whether Envoy's checker lets the EPP set this header.
func mutationAllowed(lower string, t mutationTarget) bool {
	if isHopByHopLower(lower) {
		return false // connection management stays with the gateway
	}
	if t == targetImmediate {
		return lower[0] != ':'
	}
	if lower == "host" || strings.HasPrefix(lower, "x-envoy") {
		return false
	}
	if t == targetRequest && lower == "content-length" {
		return false // the gateway sets it from the mutated body
	}
	switch lower {
	case ":path":
		return t == targetRequest
	case ":status":
		return t == targetResponse
	}
	return lower[0] != ':'
}

func applyPseudo(lower, value string, t mutationTarget, ps *pseudoMutations) error {
	switch {
	case lower == ":path" && t == targetRequest:
		if value == "" || (value[0] != '/' && value != "*") {
			return fmt.Errorf(":path %q must start with '/'", value)
		}
		ps.path = value
	case lower == ":status" && t == targetResponse:
		code, err := strconv.Atoi(value)
		if err != nil || code < 200 || code > 999 {
			return nil // Envoy ignores an invalid :status
		}
		ps.status = code
	}
	return nil
}

// validMutationName accepts a lower-cased header name: an RFC 9110 token,
// optionally prefixed by ':' (a pseudo-header).
func validMutationName(lower string) bool {
	if strings.HasPrefix(lower, ":") {
		return len(lower) > 1 && validHeaderName(lower[1:])
	}
	return validHeaderName(lower)
}

// validHeaderName reports whether s is a non-empty RFC 9110 token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x80 || !tokenChar[c] {
			return false
		}
	}
	return true
}

var tokenChar = func() (t [128]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return
}()

// validHeaderValue rejects control characters other than horizontal tab (Go's
// transport and server refuse to send them, and CR/LF/NUL are what Envoy
// rejects).
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		c := v[i]
		if (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// hasTrailerValues reports whether any trailer actually arrived (Go fills the
// declared keys with values only after the body's EOF).
func hasTrailerValues(t http.Header) bool {
	for _, v := range t {
		if len(v) > 0 {
			return true
		}
	}
	return false
}

// presentTrailers returns the trailers that carry values (declared but
// unsent trailers are dropped).
func presentTrailers(t http.Header) http.Header {
	out := make(http.Header, len(t))
	for k, v := range t {
		if len(v) > 0 {
			out[k] = v
		}
	}
	return out
}
