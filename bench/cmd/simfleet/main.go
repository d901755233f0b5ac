// Command simfleet serves a fleet of modelsim model servers (metrics and
// the OpenAI API) in one process, for the overhead benchmark: the model
// servers run beside the EPP under test but outside the load generator's
// process, as they would on their own machines, so that serving the EPP's
// scrapes does not stall the load generator's measurements.
//
//	simfleet -n 100 -port 8000 -time-scale 0.01
//
// Server i listens on 127.10.(i/250).(i%250+1):port. simfleet prints
// "ready" on stdout once every server listens and stops on SIGTERM or
// SIGINT.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/switchyard-ai/switchyard/pkg/modelsim"
)

func main() {
	n := flag.Int("n", 10, "model servers (at most 250×256)")
	port := flag.Int("port", 8000, "port every server listens on")
	scale := flag.Float64("time-scale", 0.01, "modelsim's multiplier of simulated times")
	flag.Parse()
	if err := run(*n, *port, *scale); err != nil {
		fmt.Fprintln(os.Stderr, "simfleet:", err)
		os.Exit(1)
	}
}

// addr is server i's listen address.
func addr(i, port int) string {
	return fmt.Sprintf("127.10.%d.%d:%d", i/250, i%250+1, port)
}

func run(n, port int, scale float64) error {
	if n < 1 || n > 250*256 {
		return fmt.Errorf("-n: must be in 1..%d, got %d", 250*256, n)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var servers []*http.Server
	var sims []*modelsim.Server
	defer func() {
		for _, s := range servers {
			_ = s.Close()
		}
		for _, s := range sims {
			_ = s.Close()
		}
	}()
	errc := make(chan error, n)
	for i := range n {
		cfg := modelsim.DefaultConfig()
		cfg.TimeScale = scale
		sim, err := modelsim.New(cfg, modelsim.WithID(fmt.Sprintf("sim-%d", i)))
		if err != nil {
			return err
		}
		if err := sim.Start(ctx); err != nil {
			return err
		}
		sims = append(sims, sim)
		ln, err := net.Listen("tcp", addr(i, port))
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: sim.Handler(), ReadHeaderTimeout: 5 * time.Second}
		servers = append(servers, srv)
		go func() {
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
	}
	fmt.Println("ready")
	select {
	case <-ctx.Done():
		return nil
	case err := <-errc:
		return err
	}
}
