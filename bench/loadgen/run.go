package loadgen

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// Config is one load run against one EPP.
type Config struct {
	// Target is the EPP's ext_proc address (host:port, loopback).
	Target string
	// TLS dials with TLS; CAFile verifies the EPP's certificate, else
	// the certificate is not verified (GIE's EPP serves a self-signed
	// one and its reference gateway skips verification).
	TLS    bool
	CAFile string
	// Conns is the number of gRPC connections the streams spread over
	// (Envoy opens one per worker thread); default 2.
	Conns int
	// Rate > 0 runs open loop: Poisson arrivals at Rate per second
	// (Seed fixes them). Otherwise Concurrency streams run closed loop.
	Rate        float64
	Seed        uint64
	Concurrency int
	// MaxInFlight bounds the open loop's outstanding exchanges (default
	// 4096): an arrival beyond it is counted as Dropped, not sent, so an
	// EPP that stalls cannot make the generator hold unbounded memory.
	MaxInFlight int
	// Duration is how long arrivals are generated (after Warmup, whose
	// exchanges are not recorded).
	Duration, Warmup time.Duration
	// Exchange returns the i-th request (shared and read-only after its
	// Prepare; return the same few values over and over).
	Exchange func(i int) *Exchange
	// Timeout bounds one exchange (default 10 s).
	Timeout time.Duration
	// PID, when > 0, is the EPP's process: its CPU time and peak RSS
	// over the run are reported.
	PID int
}

// Report is what a run measured.
type Report struct {
	Sent, Routed, Refused, Errors, Dropped int64
	// Elapsed is the measured part of the run; Throughput the exchanges
	// completed per second in it.
	Elapsed    time.Duration
	Throughput float64
	Decision   Summary
	Total      Summary
	// CPU is the EPP's CPU time over the measured part; PeakRSS its peak
	// resident set (0 without PID).
	CPU     time.Duration
	PeakRSS int64
	// FirstError is the first exchange error, for the log.
	FirstError string
}

// CPUPer1000 is the EPP's CPU seconds per 1000 exchanges.
func (r *Report) CPUPer1000() float64 {
	done := r.Routed + r.Refused
	if done == 0 {
		return 0
	}
	return r.CPU.Seconds() * 1000 / float64(done)
}

// Dial opens the connections of cfg.
func Dial(cfg Config) ([]*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	if cfg.TLS {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if cfg.CAFile != "" {
			pem, err := os.ReadFile(cfg.CAFile)
			if err != nil {
				return nil, err
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("%s: no certificate", cfg.CAFile)
			}
			tc.RootCAs = pool
		} else {
			tc.InsecureSkipVerify = true //nolint:gosec // as GIE's reference gateway: the EPP's self-signed certificate
		}
		creds = credentials.NewTLS(tc)
	}
	n := cfg.Conns
	if n <= 0 {
		n = 2
	}
	conns := make([]*grpc.ClientConn, 0, n)
	for range n {
		c, err := grpc.NewClient(cfg.Target, grpc.WithTransportCredentials(creds),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
		if err != nil {
			for _, c := range conns {
				_ = c.Close()
			}
			return nil, err
		}
		conns = append(conns, c)
	}
	return conns, nil
}

// Run drives the EPP as cfg says and reports. It returns when every
// exchange it started has ended.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Exchange == nil {
		return nil, errors.New("loadgen: no Exchange")
	}
	if cfg.Rate <= 0 && cfg.Concurrency <= 0 {
		return nil, errors.New("loadgen: set Rate (open loop) or Concurrency (closed loop)")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 4096
	}
	conns, err := Dial(cfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	clients := make([]extprocv3.ExternalProcessorClient, len(conns))
	for i, c := range conns {
		clients[i] = extprocv3.NewExternalProcessorClient(c)
	}
	if cfg.Warmup > 0 {
		w := &runner{cfg: cfg, clients: clients}
		w.cfg.Duration = cfg.Warmup
		w.run(ctx)
	}
	r := &runner{cfg: cfg, clients: clients}
	var before ProcUsage
	if cfg.PID > 0 {
		_ = ResetPeak(cfg.PID) // best effort: VmHWM then covers this run only
		if before, err = ReadProc(cfg.PID); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	r.run(ctx)
	elapsed := time.Since(start)
	rep := r.report(elapsed)
	if cfg.PID > 0 {
		after, err := ReadProc(cfg.PID)
		if err != nil {
			return nil, err
		}
		rep.CPU, rep.PeakRSS = after.CPU-before.CPU, after.PeakRSS
	}
	return rep, ctx.Err()
}

type runner struct {
	cfg     Config
	clients []extprocv3.ExternalProcessorClient

	seq                                  atomic.Int64
	sent, routed, refused, errs, dropped atomic.Int64
	mu                                   sync.Mutex
	decision, total                      *Histogram
	firstErr                             string
}

// run generates arrivals for cfg.Duration and waits for every exchange.
func (r *runner) run(ctx context.Context) {
	r.decision, r.total = NewHistogram(), NewHistogram()
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Duration+r.cfg.Timeout)
	defer cancel()
	var wg sync.WaitGroup
	if r.cfg.Rate > 0 {
		sem := make(chan struct{}, r.cfg.MaxInFlight)
		sched := NewSchedule(r.cfg.Rate, r.cfg.Seed)
		start := time.Now()
		for {
			at := sched.Next()
			if at >= r.cfg.Duration {
				break
			}
			if d := time.Until(start.Add(at)); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-ctx.Done():
					t.Stop()
					wg.Wait()
					return
				case <-t.C:
				}
			}
			select {
			case sem <- struct{}{}:
			default:
				r.dropped.Add(1)
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				r.one(ctx, nil, nil) // records under the lock: a histogram per arrival would cost 100s of KiB
			}()
		}
		wg.Wait()
		return
	}
	deadline := time.Now().Add(r.cfg.Duration)
	for range r.cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, t := NewHistogram(), NewHistogram()
			for time.Now().Before(deadline) && ctx.Err() == nil {
				r.one(ctx, d, t)
			}
			r.merge(d, t)
		}()
	}
	wg.Wait()
}

// one plays one exchange and records it in d and t (nil: in the run's
// histograms, under its lock).
func (r *runner) one(ctx context.Context, d, t *Histogram) {
	i := r.seq.Add(1) - 1
	x := r.cfg.Exchange(int(i))
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	r.sent.Add(1)
	res, err := x.Run(ctx, r.clients[int(i)%len(r.clients)], "lg-"+strconv.FormatInt(i, 10))
	switch {
	case err != nil:
		r.errs.Add(1)
		r.mu.Lock()
		if r.firstErr == "" {
			r.firstErr = err.Error()
		}
		r.mu.Unlock()
		return
	case res.Status != 0:
		r.refused.Add(1)
	default:
		r.routed.Add(1)
	}
	if d == nil {
		r.mu.Lock()
		r.decision.Record(res.Decision)
		r.total.Record(res.Total)
		r.mu.Unlock()
		return
	}
	d.Record(res.Decision)
	t.Record(res.Total)
}

func (r *runner) merge(d, t *Histogram) {
	r.mu.Lock()
	r.decision.Merge(d)
	r.total.Merge(t)
	r.mu.Unlock()
}

func (r *runner) report(elapsed time.Duration) *Report {
	rep := &Report{
		Sent: r.sent.Load(), Routed: r.routed.Load(), Refused: r.refused.Load(), Errors: r.errs.Load(), Dropped: r.dropped.Load(),
		Elapsed: elapsed, Decision: r.decision.Summary(), Total: r.total.Summary(), FirstError: r.firstErr,
	}
	if elapsed > 0 {
		rep.Throughput = float64(rep.Routed+rep.Refused) / elapsed.Seconds()
	}
	return rep
}
