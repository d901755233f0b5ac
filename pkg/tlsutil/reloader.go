package tlsutil

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-ai/switchyard/pkg/internal/filewatch"
)

// File names inside the certificate directory (the keys of a
// kubernetes.io/tls Secret).
const (
	CertFile = "tls.crt"
	KeyFile  = "tls.key"
)

const (
	// debounceDelay lets a burst of events (two renames, a symlink swap)
	// settle before the pair is read.
	debounceDelay = 100 * time.Millisecond
	// pollInterval re-reads the pair in case an event was missed.
	pollInterval = time.Minute
)

// Reloader serves the certificate pair of a directory and, while Run runs,
// follows changes to it. It is safe for concurrent use.
type Reloader struct {
	dir, certPath, keyPath string
	logger                 logr.Logger

	cert atomic.Pointer[tls.Certificate]

	mu          sync.Mutex // serialises reload
	loadedCert  []byte     // file contents of the pair being served
	loadedKey   []byte
	lastFailure [sha256.Size]byte // digest of the last refused input, reported once
	readSum     [sha256.Size]byte // filewatch.Sum of the files the last Reload read
	readOK      bool              // the last Reload could read both files

	reloadOK, reloadFailed prometheus.Counter // nil without a Registerer
	expiry                 prometheus.Gauge

	debounce, poll time.Duration
}

// ReloaderOption configures a Reloader.
type ReloaderOption func(*reloaderOptions)

type reloaderOptions struct {
	reg     prometheus.Registerer
	purpose Purpose
}

// WithRegisterer registers the reload metrics (see the package
// documentation) on reg; collectors already registered there are reused.
// Without it the Reloader records no metrics.
func WithRegisterer(reg prometheus.Registerer) ReloaderOption {
	return func(o *reloaderOptions) { o.reg = reg }
}

// Purpose tells apart the certificates (and CA bundles) of one process in
// the metrics' purpose label: a closed set.
type Purpose string

// The purposes.
const (
	// PurposeServing is the EPP's serving certificate (ext_proc, metrics);
	// the default.
	PurposeServing Purpose = "serving"
	// PurposeRelayServer is a site-relay's certificate and CA bundle: the
	// certificate is served on its signals port and presented to its
	// peers, the bundle verifies both.
	PurposeRelayServer Purpose = "relay_server"
	// PurposeSignalsClient is the EPP's client certificate to its
	// site-relay, and the CA bundle that verifies the relay.
	PurposeSignalsClient Purpose = "signals_client"
)

// Purposes lists every Purpose.
var Purposes = []Purpose{PurposeServing, PurposeRelayServer, PurposeSignalsClient}

// WithPurpose sets the purpose label of the metrics (PurposeServing when
// not given); a value outside Purposes is refused by the constructor. Use
// each purpose for one certificate (and one CA bundle) per registry: two
// with the same purpose share their series.
func WithPurpose(p Purpose) ReloaderOption {
	return func(o *reloaderOptions) { o.purpose = p }
}

// options applies opts over the defaults and checks the purpose.
func options(opts []ReloaderOption) (reloaderOptions, error) {
	o := reloaderOptions{purpose: PurposeServing}
	for _, opt := range opts {
		opt(&o)
	}
	if !slices.Contains(Purposes, o.purpose) {
		return o, fmt.Errorf("tlsutil: purpose %q is not one of %v", o.purpose, Purposes)
	}
	return o, nil
}

// NewReloader loads certDir/tls.crt and certDir/tls.key; the error names
// the file at fault. logger logs reloads at V(1), refused pairs as errors
// and watch events at V(4). Call Run to follow changes.
func NewReloader(certDir string, logger logr.Logger, opts ...ReloaderOption) (*Reloader, error) {
	if certDir == "" {
		return nil, errors.New("tlsutil: empty certificate directory")
	}
	return newReloader(certDir, filepath.Join(certDir, CertFile), filepath.Join(certDir, KeyFile), logger, opts)
}

// NewFileReloader is NewReloader for a certificate chain and a key at
// paths of their own (a client certificate, say).
func NewFileReloader(certFile, keyFile string, logger logr.Logger, opts ...ReloaderOption) (*Reloader, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("tlsutil: both a certificate file and a key file are required")
	}
	return newReloader(filepath.Dir(certFile), certFile, keyFile, logger, opts)
}

func newReloader(dir, certPath, keyPath string, logger logr.Logger, opts []ReloaderOption) (*Reloader, error) {
	o, err := options(opts)
	if err != nil {
		return nil, err
	}
	reg := o.reg
	r := &Reloader{
		dir:      dir,
		certPath: certPath,
		keyPath:  keyPath,
		logger:   logger,
		debounce: debounceDelay,
		poll:     pollInterval,
	}
	certPEM, keyPEM, err := r.read()
	if err != nil {
		return nil, err
	}
	cert, err := loadPair(certPEM, keyPEM, r.certPath, r.keyPath)
	if err != nil {
		return nil, err
	}
	if reg != nil {
		if err := r.registerMetrics(reg, o.purpose); err != nil {
			return nil, err
		}
	}
	r.store(cert, certPEM, keyPEM)
	return r, nil
}

func (r *Reloader) registerMetrics(reg prometheus.Registerer, purpose Purpose) error {
	reloads, err := register(reg, "switchyard_tls_certificate_reloads_total", prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "switchyard_tls_certificate_reloads_total",
		Help: "Reloads of a TLS certificate pair after a change, by purpose (serving, relay_server, signals_client) and result (success or failure).",
	}, []string{"purpose", "result"}))
	if err != nil {
		return err
	}
	expiry, err := register(reg, "switchyard_tls_certificate_expiry_timestamp_seconds", prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "switchyard_tls_certificate_expiry_timestamp_seconds",
		Help: "NotAfter of the TLS certificate in use, as Unix time in seconds, by purpose (serving, relay_server, signals_client).",
	}, []string{"purpose"}))
	if err != nil {
		return err
	}
	r.reloadOK = reloads.WithLabelValues(string(purpose), "success")
	r.reloadFailed = reloads.WithLabelValues(string(purpose), "failure")
	r.expiry = expiry.WithLabelValues(string(purpose))
	return nil
}

// register registers c, or returns the collector already registered under
// the same description.
func register[C prometheus.Collector](reg prometheus.Registerer, name string, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, fmt.Errorf("tlsutil: register %s: %w", name, err)
}

// GetCertificate returns the current certificate; use it as
// tls.Config.GetCertificate.
func (r *Reloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return r.cert.Load(), nil
}

// GetClientCertificate returns the current certificate; use it as
// tls.Config.GetClientCertificate of a mutual-TLS client.
func (r *Reloader) GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	return r.cert.Load(), nil
}

// Current returns the certificate being served.
func (r *Reloader) Current() *tls.Certificate { return r.cert.Load() }

// Run follows changes to the directory until ctx is done. Call it once, in
// its own goroutine; it returns when ctx is cancelled. If the directory
// cannot be watched, it logs the error and only re-reads the pair every
// minute.
func (r *Reloader) Run(ctx context.Context) {
	r.mu.Lock()
	sum := filewatch.Sum(r.loadedCert, r.loadedKey)
	r.mu.Unlock()
	opts := filewatch.Options{Debounce: r.debounce, Poll: r.poll, Initial: &sum, Logger: r.logger.WithValues("dir", r.dir)}
	if err := filewatch.Run(ctx, []string{r.certPath, r.keyPath}, opts, func() ([32]byte, bool) {
		r.Reload()
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.readSum, r.readOK
	}); err != nil {
		r.logger.Error(err, "cannot watch the certificate directory", "dir", r.dir)
	}
}

// Reload re-reads the pair now and serves it if it changed and loads; a
// pair that does not load is refused (logged once, counted as a failure)
// and the current certificate stays. It reports whether a new certificate
// is being served. Run calls it; tests and signal handlers may too.
func (r *Reloader) Reload() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	certPEM, keyPEM, err := r.read()
	r.readSum, r.readOK = filewatch.Sum(certPEM, keyPEM), err == nil
	if err == nil && bytes.Equal(certPEM, r.loadedCert) && bytes.Equal(keyPEM, r.loadedKey) {
		return false // unchanged
	}
	var cert *tls.Certificate
	if err == nil {
		cert, err = loadPair(certPEM, keyPEM, r.certPath, r.keyPath)
	}
	if err != nil {
		h := sha256.New()
		h.Write(certPEM)
		h.Write([]byte{0})
		h.Write(keyPEM)
		h.Write([]byte(err.Error()))
		var sum [sha256.Size]byte
		h.Sum(sum[:0])
		if sum != r.lastFailure {
			r.lastFailure = sum
			r.logger.Error(err, "refusing the new TLS certificate pair; still serving the current one", "dir", r.dir)
			if r.reloadFailed != nil {
				r.reloadFailed.Inc()
			}
		}
		return false
	}
	r.lastFailure = [sha256.Size]byte{}
	r.store(cert, certPEM, keyPEM)
	if r.reloadOK != nil {
		r.reloadOK.Inc()
	}
	leaf := cert.Leaf
	r.logger.V(1).Info("reloaded TLS certificate", "dir", r.dir, "serial", leaf.SerialNumber.String(),
		"notAfter", leaf.NotAfter, "dnsNames", leaf.DNSNames)
	if time.Now().After(leaf.NotAfter) {
		r.logger.Info("the reloaded TLS certificate has expired", "dir", r.dir, "notAfter", leaf.NotAfter)
	}
	return true
}

func (r *Reloader) store(cert *tls.Certificate, certPEM, keyPEM []byte) {
	r.loadedCert, r.loadedKey = certPEM, keyPEM
	r.cert.Store(cert)
	if r.expiry != nil {
		r.expiry.Set(float64(cert.Leaf.NotAfter.Unix()))
	}
}

func (r *Reloader) read() (certPEM, keyPEM []byte, err error) {
	certPEM, err = os.ReadFile(r.certPath)
	if err != nil {
		return nil, nil, fmt.Errorf("tlsutil: read certificate: %w", err)
	}
	keyPEM, err = os.ReadFile(r.keyPath)
	if err != nil {
		return nil, nil, fmt.Errorf("tlsutil: read private key: %w", err)
	}
	return certPEM, keyPEM, nil
}

// loadPair parses a PEM certificate chain and key. On failure the error
// names the file at fault: the certificate, the key, or both when they do
// not match. The returned certificate has Leaf set.
func loadPair(certPEM, keyPEM []byte, certPath, keyPath string) (*tls.Certificate, error) {
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err == nil {
		if cert.Leaf == nil {
			if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
				return nil, fmt.Errorf("tlsutil: %s: %w", certPath, err)
			}
		}
		return &cert, nil
	}
	if cerr := checkCertPEM(certPEM); cerr != nil {
		return nil, fmt.Errorf("tlsutil: %s: %w", certPath, cerr)
	}
	if kerr := checkKeyPEM(keyPEM); kerr != nil {
		return nil, fmt.Errorf("tlsutil: %s: %w", keyPath, kerr)
	}
	return nil, fmt.Errorf("tlsutil: %s and %s do not form a pair: %w", certPath, keyPath, err)
}

// checkCertPEM reports why certPEM holds no usable certificate.
func checkCertPEM(certPEM []byte) error {
	rest := certPEM
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return errors.New("no PEM CERTIFICATE block")
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			return fmt.Errorf("parse certificate: %w", err)
		}
		return nil
	}
}

// checkKeyPEM reports why keyPEM holds no usable private key.
func checkKeyPEM(keyPEM []byte) error {
	rest := keyPEM
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return errors.New("no PEM PRIVATE KEY block")
		}
		switch b.Type {
		case "PRIVATE KEY":
			_, err := x509.ParsePKCS8PrivateKey(b.Bytes)
			return wrapKeyErr(err)
		case "RSA PRIVATE KEY":
			_, err := x509.ParsePKCS1PrivateKey(b.Bytes)
			return wrapKeyErr(err)
		case "EC PRIVATE KEY":
			_, err := x509.ParseECPrivateKey(b.Bytes)
			return wrapKeyErr(err)
		}
	}
}

func wrapKeyErr(err error) error {
	if err != nil {
		return fmt.Errorf("parse private key: %w", err)
	}
	return nil
}
