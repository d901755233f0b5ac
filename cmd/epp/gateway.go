package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/switchyard-ai/switchyard/pkg/gateway"
)

func runGateway(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("epp gateway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8080", "HTTP listen address")
	eppAddr := fs.String("epp-addr", "127.0.0.1:9002", "the EPP's ext_proc address")
	eppTLS := fs.Bool("epp-tls", true, "TLS to the EPP (certificate not verified, as with the EPP's self-signed default)")
	subset := fs.String("subset-header", "", "request header whose comma-separated ip[:port] list becomes the subset hint (envoy.lb.subset_hint)")
	maxBody := fs.Int64("max-request-body-bytes", 64<<20, "largest request body accepted (413 above)")
	var lf logFlags
	lf.register(fs)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: epp gateway [flags]\n\nA small HTTP data plane that asks an EPP for every request over ext_proc, as Envoy does\n(FULL_DUPLEX_STREAMED bodies, envoy.lb metadata), and forwards to the endpoint it picks.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	logger, err := lf.logger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "epp gateway: %v\n", err)
		return 2
	}
	g, err := gateway.New(gateway.Options{
		EPPAddr:             *eppAddr,
		EPPTLS:              *eppTLS,
		SubsetHeader:        *subset,
		MaxRequestBodyBytes: *maxBody,
		Logger:              logger.WithName("gateway"),
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
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv := &http.Server{Handler: g, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	logger.Info("Gateway serving", "listen", lis.Addr().String(), "epp", *eppAddr)
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
