package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	descBufferedBytes      = prometheus.NewDesc(NameExtprocBufferedBytes, "Body bytes the ext_proc streams hold now while they wait for the rest of a body (request bodies and buffered responses).", nil, nil)
	descBufferedBytesLimit = prometheus.NewDesc(NameExtprocBufferedBytesLimit, "The process-wide budget of buffered body bytes (--max-buffered-request-bytes).", nil, nil)
)

// bufferSource is what the ext_proc server attached: its budget and a
// function reading the bytes in use.
type bufferSource struct {
	limit int64
	inUse func() int64
}

// bufferCollector exports the buffer budget gauges. The value is read from
// the server's atomic counter when scraped, so the request path never
// touches a metric per body chunk. Nothing is exported before a server is
// attached.
type bufferCollector struct {
	src atomic.Pointer[bufferSource]
}

// Describe implements prometheus.Collector.
func (c *bufferCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descBufferedBytes
	ch <- descBufferedBytesLimit
}

// Collect implements prometheus.Collector.
func (c *bufferCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.src.Load()
	if s == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(descBufferedBytes, prometheus.GaugeValue, float64(s.inUse()))
	ch <- prometheus.MustNewConstMetric(descBufferedBytesLimit, prometheus.GaugeValue, float64(s.limit))
}

// BufferBudget attaches the ext_proc server's buffer budget:
// switchyard_extproc_buffered_bytes reads inUse at every scrape and
// switchyard_extproc_buffered_bytes_limit is limit. A later call replaces
// the earlier source (the last server started wins, also across Metrics
// values sharing one registry). inUse must be safe for concurrent use. A
// nil inUse detaches the source.
func (m *Metrics) BufferBudget(limit int64, inUse func() int64) {
	if m == nil {
		return
	}
	if inUse == nil {
		m.buffer.src.Store(nil)
		return
	}
	m.buffer.src.Store(&bufferSource{limit: limit, inUse: inUse})
}
