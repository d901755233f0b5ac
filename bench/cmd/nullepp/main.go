// Command nullepp is the benchmarks' protocol floor: an ext_proc server
// that routes every request to one endpoint without parsing it (see
// bench/nullepp).
//
//	nullepp -addr 127.0.0.1:9102 -endpoint 127.10.0.1:8000 [-tls]
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"flag"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/experimental"

	"github.com/switchyard-ai/switchyard/bench/nullepp"
	"github.com/switchyard-ai/switchyard/pkg/grpcpool"
)

// The floor gets the buffers Switchyard's EPP has (see package grpcpool),
// so that the ratio to it measures the EPP's work, not gRPC's pool.
func init() { experimental.SetDefaultBufferPool(grpcpool.Pool) }

func main() {
	addr := flag.String("addr", "127.0.0.1:9102", "ext_proc listen address (loopback)")
	endpoint := flag.String("endpoint", "127.10.0.1:8000", "the endpoint every request is routed to")
	useTLS := flag.Bool("tls", true, "serve TLS with a self-signed certificate, as GIE's EPP does by default")
	flag.Parse()
	if err := run(*addr, *endpoint, *useTLS); err != nil {
		fmt.Fprintln(os.Stderr, "nullepp:", err)
		os.Exit(1)
	}
}

func run(addr, endpoint string, useTLS bool) error {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	opts := []grpc.ServerOption{experimental.BufferPool(grpcpool.Pool)}
	if useTLS {
		cert, err := selfSigned()
		if err != nil {
			return err
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})))
	}
	g := grpc.NewServer(opts...)
	extprocv3.RegisterExternalProcessorServer(g, nullepp.New(endpoint))
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() { <-sig; g.GracefulStop() }()
	fmt.Fprintf(os.Stderr, "nullepp: serving ext_proc on %s, routing to %s\n", lis.Addr(), endpoint)
	return g.Serve(lis)
}

func selfSigned() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "nullepp"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
