package tlsutil

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-ai/switchyard/pkg/internal/filewatch"
)

// MaxCABundleBytes bounds a CA bundle file.
const MaxCABundleBytes = 4 << 20

// CABundle serves the certificate pool of a PEM file of CA certificates
// and, while Run runs, follows changes to it, as Reloader does for a
// certificate pair: a file that does not load is refused (logged once,
// counted) and the current pool stays. It is safe for concurrent use.
type CABundle struct {
	path   string
	logger logr.Logger

	pool atomic.Pointer[x509.CertPool]

	mu          sync.Mutex
	loaded      []byte
	lastFailure [sha256.Size]byte
	readSum     [sha256.Size]byte
	readOK      bool

	reloadOK, reloadFailed prometheus.Counter // nil without a Registerer

	debounce, poll time.Duration
}

// NewCABundle loads the PEM CA certificates of path; the error names the
// file and the block at fault. With WithRegisterer it records
// switchyard_tls_ca_bundle_reloads_total{purpose,result="success|failure"}
// (the purpose from WithPurpose).
func NewCABundle(path string, logger logr.Logger, opts ...ReloaderOption) (*CABundle, error) {
	if path == "" {
		return nil, errors.New("tlsutil: empty CA bundle path")
	}
	o, err := options(opts)
	if err != nil {
		return nil, err
	}
	b := &CABundle{path: path, logger: logger, debounce: debounceDelay, poll: pollInterval}
	data, err := readBounded(path, MaxCABundleBytes)
	if err != nil {
		return nil, err
	}
	pool, _, err := ParseCABundle(data)
	if err != nil {
		return nil, fmt.Errorf("tlsutil: %s: %w", path, err)
	}
	if o.reg != nil {
		reloads, err := register(o.reg, "switchyard_tls_ca_bundle_reloads_total", prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "switchyard_tls_ca_bundle_reloads_total",
			Help: "Reloads of a TLS CA bundle after a change, by purpose (serving, relay_server, signals_client) and result (success or failure).",
		}, []string{"purpose", "result"}))
		if err != nil {
			return nil, err
		}
		b.reloadOK, b.reloadFailed = reloads.WithLabelValues(string(o.purpose), "success"), reloads.WithLabelValues(string(o.purpose), "failure")
	}
	b.loaded = data
	b.pool.Store(pool)
	return b, nil
}

// Pool returns the current pool; pass the method value b.Pool to
// VerifyPeer.
func (b *CABundle) Pool() *x509.CertPool { return b.pool.Load() }

// Run follows changes to the file until ctx is done. Call it once, in its
// own goroutine; it returns when ctx is cancelled.
func (b *CABundle) Run(ctx context.Context) {
	b.mu.Lock()
	sum := filewatch.Sum(b.loaded)
	b.mu.Unlock()
	opts := filewatch.Options{Debounce: b.debounce, Poll: b.poll, Initial: &sum, Logger: b.logger.WithValues("file", b.path)}
	if err := filewatch.Run(ctx, []string{b.path}, opts, func() ([32]byte, bool) {
		b.Reload()
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.readSum, b.readOK
	}); err != nil {
		b.logger.Error(err, "cannot watch the CA bundle", "file", b.path)
	}
}

// Reload re-reads the file now and serves its pool if it changed and
// loads; it reports whether a new pool is being served.
func (b *CABundle) Reload() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	data, err := readBounded(b.path, MaxCABundleBytes)
	b.readSum, b.readOK = filewatch.Sum(data), err == nil
	if err == nil && bytes.Equal(data, b.loaded) {
		return false
	}
	var pool *x509.CertPool
	var n int
	if err == nil {
		if pool, n, err = ParseCABundle(data); err != nil {
			err = fmt.Errorf("tlsutil: %s: %w", b.path, err)
		}
	}
	if err != nil {
		h := sha256.New()
		h.Write(data)
		h.Write([]byte{0})
		h.Write([]byte(err.Error()))
		var sum [sha256.Size]byte
		h.Sum(sum[:0])
		if sum != b.lastFailure {
			b.lastFailure = sum
			b.logger.Error(err, "refusing the new CA bundle; still using the current one", "file", b.path)
			if b.reloadFailed != nil {
				b.reloadFailed.Inc()
			}
		}
		return false
	}
	b.lastFailure = [sha256.Size]byte{}
	b.loaded = data
	b.pool.Store(pool)
	if b.reloadOK != nil {
		b.reloadOK.Inc()
	}
	b.logger.V(1).Info("reloaded CA bundle", "file", b.path, "certificates", n)
	return true
}

// ParseCABundle parses PEM CERTIFICATE blocks (other block types are
// skipped) into a pool and returns how many it holds; a bundle without a
// certificate, or with a block that does not parse, is an error naming
// the block.
func ParseCABundle(data []byte) (*x509.CertPool, int, error) {
	pool := x509.NewCertPool()
	n, block := 0, 0
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		block++
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, 0, fmt.Errorf("PEM block %d: parse certificate: %w", block, err)
		}
		pool.AddCert(c)
		n++
	}
	if n == 0 {
		return nil, 0, errors.New("no PEM CERTIFICATE block")
	}
	return pool, n, nil
}

// readBounded reads a file of at most limit bytes.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tlsutil: read: %w", err)
	}
	defer func() { _ = f.Close() }()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(f, limit+1)); err != nil {
		return nil, fmt.Errorf("tlsutil: read %s: %w", path, err)
	}
	if int64(buf.Len()) > limit {
		return nil, fmt.Errorf("tlsutil: %s: larger than %d bytes", path, limit)
	}
	return buf.Bytes(), nil
}
