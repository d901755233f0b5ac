package gateway

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric label values (closed sets).
const (
	// source of a request's final status.
	sourceUpstream = "upstream" // the model server answered (possibly non-2xx)
	sourceEPP      = "epp"      // the EPP answered with an immediate_response
	sourceGateway  = "gateway"  // the gateway generated the reply (see Reason*)
	sourceClient   = "client"   // the client went away before a reply (code "499")

	attemptOK             = "ok"
	attemptConnectFailure = "connect_failure"
	attemptError          = "error"

	extProcUnavailable = "unavailable"
	extProcTimeout     = "timeout"
	extProcProtocol    = "protocol"

	// kind of timeout (see Options).
	timeoutBodyRead        = "body_read"        // BodyReadTimeout: 408
	timeoutUpstreamHeaders = "upstream_headers" // UpstreamHeaderTimeout: 504
	timeoutUpstreamIdle    = "upstream_idle"    // UpstreamIdleTimeout: 504 or aborted response
)

// statusClientClosed is recorded when the client disconnected first.
const statusClientClosed = 499

// metrics are the gateway's Prometheus collectors:
//
//	switchyard_gateway_requests_total{code,source}      requests by final HTTP status and who produced it
//	switchyard_gateway_upstream_attempts_total{result}  upstream attempts: ok, connect_failure, error
//	switchyard_gateway_fallback_walks_total             moves to the next endpoint after a connect failure
//	switchyard_gateway_ext_proc_errors_total{kind}      ext_proc failures: unavailable, timeout, protocol
//	switchyard_gateway_timeouts_total{kind}             requests cut by a gateway bound: body_read,
//	                                                    upstream_headers, upstream_idle
//	switchyard_gateway_concurrency_rejections_total     requests refused (503) by MaxConcurrentRequests
//	switchyard_gateway_requests_in_flight               requests being handled now
//	switchyard_gateway_epp_connections                  gRPC connections open to the EPP
//
// Gateways sharing a Registerer share these collectors, so the gauges are the
// sums over them.
type metrics struct {
	requests      *prometheus.CounterVec
	attempts      map[string]prometheus.Counter
	fallbackWalks prometheus.Counter
	extProcErrors map[string]prometheus.Counter
	timeouts      map[string]prometheus.Counter
	rejected      prometheus.Counter
	inFlight      prometheus.Gauge
	eppConns      prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "switchyard", Subsystem: "gateway", Name: "requests_total",
		Help: "HTTP requests handled by the gateway, by final status code and by who produced the status (upstream, epp, gateway, client).",
	}, []string{"code", "source"})
	attempts := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "switchyard", Subsystem: "gateway", Name: "upstream_attempts_total",
		Help: "Upstream request attempts by result (ok, connect_failure, error).",
	}, []string{"result"})
	walks := prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "switchyard", Subsystem: "gateway", Name: "fallback_walks_total",
		Help: "Times the gateway moved on to the next endpoint of the EPP's list after a connect failure.",
	})
	errs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "switchyard", Subsystem: "gateway", Name: "ext_proc_errors_total",
		Help: "ext_proc stream failures by kind (unavailable, timeout, protocol).",
	}, []string{"kind"})
	timeouts := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "switchyard", Subsystem: "gateway", Name: "timeouts_total",
		Help: "Requests cut by a gateway timeout, by kind (body_read, upstream_headers, upstream_idle).",
	}, []string{"kind"})
	rejected := prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "switchyard", Subsystem: "gateway", Name: "concurrency_rejections_total",
		Help: "Requests refused with 503 because the gateway had its maximum of concurrent requests in flight.",
	})
	inFlight := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "switchyard", Subsystem: "gateway", Name: "requests_in_flight",
		Help: "Requests the gateway is handling now (each holds one ext_proc stream at most).",
	})
	eppConns := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "switchyard", Subsystem: "gateway", Name: "epp_connections",
		Help: "gRPC connections open to the EPP; another is dialed when every one holds StreamsPerConnection ext_proc streams.",
	})

	var err error
	if requests, err = register(reg, requests); err != nil {
		return nil, err
	}
	if attempts, err = register(reg, attempts); err != nil {
		return nil, err
	}
	if walks, err = register(reg, walks); err != nil {
		return nil, err
	}
	if errs, err = register(reg, errs); err != nil {
		return nil, err
	}
	if timeouts, err = register(reg, timeouts); err != nil {
		return nil, err
	}
	if rejected, err = register(reg, rejected); err != nil {
		return nil, err
	}
	if inFlight, err = register(reg, inFlight); err != nil {
		return nil, err
	}
	if eppConns, err = register(reg, eppConns); err != nil {
		return nil, err
	}
	m := &metrics{
		requests:      requests,
		fallbackWalks: walks,
		attempts:      map[string]prometheus.Counter{},
		extProcErrors: map[string]prometheus.Counter{},
		timeouts:      map[string]prometheus.Counter{},
		rejected:      rejected,
		inFlight:      inFlight,
		eppConns:      eppConns,
	}
	for _, r := range []string{attemptOK, attemptConnectFailure, attemptError} {
		m.attempts[r] = attempts.WithLabelValues(r)
	}
	for _, k := range []string{extProcUnavailable, extProcTimeout, extProcProtocol} {
		m.extProcErrors[k] = errs.WithLabelValues(k)
	}
	for _, k := range []string{timeoutBodyRead, timeoutUpstreamHeaders, timeoutUpstreamIdle} {
		m.timeouts[k] = timeouts.WithLabelValues(k)
	}
	return m, nil
}

// register registers c, reusing an identical collector registered earlier.
func register[T prometheus.Collector](reg prometheus.Registerer, c T) (T, error) {
	if reg == nil {
		return c, nil
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(T); ok {
				return existing, nil
			}
		}
		return c, fmt.Errorf("gateway: register metrics: %w", err)
	}
	return c, nil
}

func (m *metrics) request(code int, source string) {
	if code < 100 || code > 999 {
		code = 0
	}
	m.requests.WithLabelValues(statusString(code), source).Inc()
}
