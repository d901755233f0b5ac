package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/switchyard-ai/switchyard/pkg/gateway"
)

func runGateway(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return gatewayMain(ctx, args, stdout, stderr)
}

// gatewayMain runs `epp gateway` until ctx is done.
func gatewayMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("epp gateway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8080", "HTTP listen address")
	eppAddr := fs.String("epp-addr", "127.0.0.1:9002", "the EPP's ext_proc address")
	eppTLS := fs.Bool("epp-tls", true, "TLS to the EPP (certificate not verified, as with the EPP's self-signed default)")
	subset := fs.String("subset-header", "", "request header whose comma-separated ip[:port] list becomes the subset hint (envoy.lb.subset_hint)")
	maxBody := fs.Int64("max-request-body-bytes", gateway.DefaultMaxRequestBodyBytes, "largest request body accepted (413 above; 0 = the default)")
	bodyTimeout := fs.Duration("body-read-timeout", gateway.DefaultBodyReadTimeout,
		"time from the start of a request to the last byte of its body; a slower client gets 408 and its EPP stream is cancelled (0 = the default)")
	readHeaderTimeout := fs.Duration("read-header-timeout", gateway.DefaultReadHeaderTimeout,
		"time a client has to send its request line and headers (0 = the default)")
	maxHeaderBytes := fs.Int("max-header-bytes", gateway.DefaultMaxHeaderBytes,
		"largest request header block (431 above; 0 = the default)")
	upHeaderTimeout := fs.Duration("upstream-header-timeout", gateway.DefaultUpstreamHeaderTimeout,
		"time from sending a request upstream (connects included) to the response headers, 504 after; keep it above the longest non-streaming completion (0 = the default)")
	upIdleTimeout := fs.Duration("upstream-idle-timeout", gateway.DefaultUpstreamIdleTimeout,
		"longest wait for the next piece of an upstream response body; the response is then cut (0 = the default)")
	maxConcurrent := fs.Int("max-concurrent-requests", gateway.DefaultMaxConcurrentRequests,
		"requests handled at once, each holding at most one EPP stream; one more gets 503 with Retry-After (0 = the default)")
	perConn := fs.Int("streams-per-connection", gateway.DefaultStreamsPerConnection,
		"EPP streams on one gRPC connection before another is dialed; keep it at or below the EPP's max concurrent streams (0 = the default)")
	var lf logFlags
	lf.register(fs)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: epp gateway [flags]\n\nA small HTTP data plane that asks an EPP for every request over ext_proc, as Envoy does\n(FULL_DUPLEX_STREAMED bodies, envoy.lb metadata), and forwards to the endpoint it picks.\nEvery request is bounded in time (header, body and upstream timeouts) and in number\n(--max-concurrent-requests); switchyard_gateway_timeouts_total counts the cuts.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "epp gateway: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if err := checkNonNegative([]flagValue{
		{"max-request-body-bytes", *maxBody < 0, *maxBody},
		{"body-read-timeout", *bodyTimeout < 0, *bodyTimeout},
		{"read-header-timeout", *readHeaderTimeout < 0, *readHeaderTimeout},
		{"max-header-bytes", *maxHeaderBytes < 0, *maxHeaderBytes},
		{"upstream-header-timeout", *upHeaderTimeout < 0, *upHeaderTimeout},
		{"upstream-idle-timeout", *upIdleTimeout < 0, *upIdleTimeout},
		{"max-concurrent-requests", *maxConcurrent < 0, *maxConcurrent},
		{"streams-per-connection", *perConn < 0, *perConn},
	}); err != nil {
		fmt.Fprintf(stderr, "epp gateway: %v\n", err)
		return 2
	}
	logger, err := lf.logger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "epp gateway: %v\n", err)
		return 2
	}
	g, err := gateway.New(gateway.Options{
		EPPAddr:               *eppAddr,
		EPPTLS:                *eppTLS,
		SubsetHeader:          *subset,
		MaxRequestBodyBytes:   *maxBody,
		BodyReadTimeout:       *bodyTimeout,
		UpstreamHeaderTimeout: *upHeaderTimeout,
		UpstreamIdleTimeout:   *upIdleTimeout,
		MaxConcurrentRequests: *maxConcurrent,
		StreamsPerConnection:  *perConn,
		ReadHeaderTimeout:     *readHeaderTimeout,
		MaxHeaderBytes:        *maxHeaderBytes,
		Logger:                logger.WithName("gateway"),
	})
	if err != nil {
		fmt.Fprintf(stderr, "epp gateway: %v\n", err)
		return 1
	}
	defer g.Close()
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(stderr, "epp gateway: %v\n", err)
		return 1
	}
	srv := gateway.NewHTTPServer("", g)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	logger.Info("Gateway serving", "listen", lis.Addr().String(), "epp", *eppAddr,
		"bodyReadTimeout", *bodyTimeout, "upstreamHeaderTimeout", *upHeaderTimeout, "upstreamIdleTimeout", *upIdleTimeout,
		"maxConcurrentRequests", *maxConcurrent, "maxHeaderBytes", *maxHeaderBytes)
	fmt.Fprintf(stdout, "gateway listening on http://%s\n", lis.Addr())
	select {
	case <-ctx.Done():
	case err := <-errc:
		logger.Error(err, "Gateway failed")
		return 1
	}
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		logger.Error(err, "Gateway shutdown")
	}
	<-errc
	return 0
}

// flagValue is a numeric flag's value and whether it is negative.
type flagValue struct {
	name     string
	negative bool
	value    any
}

// checkNonNegative refuses negative bounds, naming each flag.
func checkNonNegative(flags []flagValue) error {
	var errs []error
	for _, f := range flags {
		if f.negative {
			errs = append(errs, fmt.Errorf("--%s: must be >= 0 (0 = the default), got %v", f.name, f.value))
		}
	}
	return errors.Join(errs...)
}
