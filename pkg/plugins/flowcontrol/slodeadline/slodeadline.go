// Package slodeadline provides the slo-deadline-ordering-policy: a flow's
// requests leave by their time-to-first-token deadline, the time the
// request arrived plus the milliseconds of its SLO header
// (x-llm-d-slo-ttft-ms, as llm-d; GIE v1.5's x-slo-ttft-ms is read when it
// is absent). Requests without a valid SLO (missing, not an integer,
// negative) come after every request with one, in enqueue order; equal
// deadlines leave in enqueue order.
package slodeadline

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard-ai/switchyard/pkg/flowcontrol"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Type is the plugin type used in configuration.
const Type = "slo-deadline-ordering-policy"

// Header names.
const (
	// HeaderLLMD is llm-d's SLO header.
	HeaderLLMD = "x-llm-d-slo-ttft-ms"
	// HeaderGIE is GIE v1.5's SLO header.
	HeaderGIE = "x-slo-ttft-ms"
)

// maxHeaders bounds Params.Headers.
const maxHeaders = 8

// Params configures the policy.
type Params struct {
	// Headers are the request headers read for the SLO, in milliseconds;
	// the first one present wins.
	Headers []string `json:"headers"`
}

// DefaultParams returns the defaults: llm-d's header, then GIE's.
func DefaultParams() Params { return Params{Headers: []string{HeaderLLMD, HeaderGIE}} }

// Validate checks the parameters.
func (p *Params) Validate() error {
	var errs []error
	if len(p.Headers) == 0 {
		errs = append(errs, errors.New("headers: must name at least one header"))
	}
	if len(p.Headers) > maxHeaders {
		errs = append(errs, fmt.Errorf("headers: at most %d headers, got %d", maxHeaders, len(p.Headers)))
	}
	for i, h := range p.Headers {
		if h == "" || strings.ToLower(h) != h || strings.ContainsAny(h, " \t:") {
			errs = append(errs, fmt.Errorf("headers[%d]: %q is not a lower-case header name", i, h))
		}
	}
	return errors.Join(errs...)
}

// Policy is a slo-deadline-ordering-policy instance. It is stateless.
type Policy struct {
	name    string
	headers []string
}

// New returns a slo-deadline-ordering-policy.
func New(name string, p Params, _ scheduling.Handle) (*Policy, error) {
	return &Policy{name: name, headers: p.Headers}, nil
}

// TypedName implements scheduling.Plugin.
func (p *Policy) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: Type, Name: p.name}
}

// maxSLO caps an SLO so that the deadline cannot overflow.
const maxSLO = 100 * 365 * 24 * time.Hour

// OrderKey implements flowcontrol.OrderingPolicy: the deadline in Unix
// nanoseconds, math.MaxInt64 without a valid SLO.
func (p *Policy) OrderKey(it *flowcontrol.Item) int64 {
	for _, h := range p.headers {
		v, ok := it.Headers[h]
		if !ok {
			continue
		}
		ms, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || ms < 0 {
			return math.MaxInt64
		}
		slo := maxSLO
		if ms < int64(maxSLO/time.Millisecond) {
			slo = time.Duration(ms) * time.Millisecond
		}
		received := it.Received
		if received.IsZero() {
			received = it.EnqueueTime()
		}
		return received.Add(slo).UnixNano()
	}
	return math.MaxInt64
}

// Registration registers the slo-deadline-ordering-policy.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Beta,
	Factory:   scheduling.Typed(DefaultParams, New),
}

var (
	_ scheduling.Plugin          = (*Policy)(nil)
	_ flowcontrol.OrderingPolicy = (*Policy)(nil)
)
