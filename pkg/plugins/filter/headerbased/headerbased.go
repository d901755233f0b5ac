// Package headerbased provides the header-based-testing-filter, GIE's
// conformance-test filter: it keeps only the endpoints a request names in
// its test-epp-endpoint-selection header. It exists for tests and
// conformance runs; do not put it in a production profile.
package headerbased

import (
	"context"
	"net"
	"strconv"
	"strings"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Type is the plugin type used in configuration.
const Type = "header-based-testing-filter"

// Header is the request header naming the endpoints to keep: a
// comma-separated list of "IP" (every endpoint at that address) or
// "IP:port" (only that endpoint) entries. IPv6 addresses may be written
// with or without brackets: "2001:db8::1", "[2001:db8::1]", "[2001:db8::1]:8000".
const Header = "test-epp-endpoint-selection"

// Params is empty: the header-based-testing-filter takes no parameters.
type Params = scheduling.NoParams

// DefaultParams returns the (empty) default parameters.
func DefaultParams() Params { return Params{} }

// Filter is a header-based-testing-filter instance. It is stateless and
// safe for concurrent use.
type Filter struct {
	typedName scheduling.TypedName
}

// New returns a header-based-testing-filter.
func New(name string, _ Params, _ scheduling.Handle) (*Filter, error) {
	if name == "" {
		name = Type
	}
	return &Filter{typedName: scheduling.TypedName{Type: Type, Name: name}}, nil
}

// TypedName implements scheduling.Plugin.
func (f *Filter) TypedName() scheduling.TypedName { return f.typedName }

// entry is one item of the header: an address and a port, or any port
// when port is -1.
type entry struct {
	host string
	port int
}

// linearMax is the longest header list matched by scanning it for every
// endpoint; longer lists are put in a map.
const linearMax = 16

// Filter implements scheduling.Filter. It keeps, in their input order, the
// endpoints whose address is listed in the header without a port and those
// whose address and port are listed together. Without the header, or with
// a blank one, it keeps nothing, so the request fails, as in GIE.
//
// Two differences from GIE v1.5, which follow GIE's own description of the
// header: every endpoint the header names is kept, so an address without a
// port keeps all the endpoints at that address and two entries with one
// address and different ports keep both (GIE keeps at most one endpoint
// per address: the one named by the first matching entry, and for a bare
// address the last candidate at it); and the kept endpoints are in
// candidate order (GIE returns them in header order).
func (f *Filter) Filter(_ context.Context, req *scheduling.Request, endpoints []*scheduling.Endpoint) []*scheduling.Endpoint {
	if req == nil {
		return nil
	}
	value := strings.TrimSpace(req.Header(Header))
	if value == "" {
		return nil
	}
	var buf [4]entry
	entries := buf[:0]
	for item := range strings.SplitSeq(value, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		host, port, err := net.SplitHostPort(item)
		if err != nil { // no port: a bare address, possibly a bracketed IPv6 one
			entries = append(entries, entry{unbracket(item), -1})
			continue
		}
		// As in GIE the port must be written as the endpoint's port is
		// ("8000", not "08000" or "+8000"); otherwise nothing matches.
		if p, err := strconv.Atoi(port); err == nil && p >= 0 && strconv.Itoa(p) == port {
			entries = append(entries, entry{unbracket(host), p})
		}
	}
	match := func(addr string, port int) bool {
		for _, en := range entries {
			if en.host == addr && (en.port < 0 || en.port == port) {
				return true
			}
		}
		return false
	}
	if len(entries) > linearMax {
		set := make(map[entry]struct{}, len(entries))
		for _, en := range entries {
			set[en] = struct{}{}
		}
		match = func(addr string, port int) bool {
			if _, ok := set[entry{addr, -1}]; ok {
				return true
			}
			_, ok := set[entry{addr, port}]
			return ok
		}
	}
	var kept []*scheduling.Endpoint
	for _, e := range endpoints {
		m := e.Metadata()
		addr := m.Address
		if strings.HasPrefix(addr, "[") {
			addr = unbracket(addr)
		}
		if addr != "" && match(addr, m.Port) {
			kept = append(kept, e)
		}
	}
	return kept
}

func unbracket(s string) string { return strings.Trim(s, "[]") }

// Registration registers the header-based-testing-filter.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Beta,
	Factory:   scheduling.Typed(DefaultParams, New),
}

var _ scheduling.Filter = (*Filter)(nil)
