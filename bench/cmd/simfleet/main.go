// Command simfleet serves a fleet of modelsim model servers (metrics and
// the OpenAI API) in one process, for the overhead benchmark: the model
// servers run beside the EPP under test but outside the load generator's
// process, as they would on their own machines, so that serving the EPP's
// scrapes does not stall the load generator's measurements.
//
//	simfleet -n 100 -port 8000 -time-scale 0.01
//
// Server i listens on 127.10.(i/250).(i%250+1):port (matrix.FleetIP,
// which the overhead matrix reads the pods' addresses from). simfleet prints
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
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/switchyard-ai/switchyard/bench/matrix"
	"github.com/switchyard-ai/switchyard/pkg/modelsim"
)

func main() {
	n := flag.Int("n", 10, "model servers (at most 250×256)")
	port := flag.Int("port", 8000, "port every server listens on")
	scale := flag.Float64("time-scale", 0.01, "modelsim's multiplier of simulated times")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := run(ctx, *n, *port, *scale, func() { fmt.Println("ready") }); err != nil {
		fmt.Fprintln(os.Stderr, "simfleet:", err)
		os.Exit(1)
	}
}

// addr is server i's listen address.
func addr(i, port int) string {
	return net.JoinHostPort(matrix.FleetIP(i), strconv.Itoa(port))
}

// run serves n model servers on port until ctx ends or one fails; ready
// is called once every server listens. Every server is closed on return.
func run(ctx context.Context, n, port int, scale float64, ready func()) error {
	if n < 1 || n > matrix.FleetMax {
		return fmt.Errorf("-n: must be in 1..%d, got %d", matrix.FleetMax, n)
	}
	var servers []*http.Server
	var sims []*modelsim.Server
	var serving sync.WaitGroup // the servers' Serve loops, owned by run
	defer func() {
		for _, s := range servers {
			_ = s.Close()
		}
		serving.Wait()
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
		serving.Go(func() {
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("server %d (%s): %w", i, addr(i, port), err)
			}
		})
	}
	ready()
	select {
	case <-ctx.Done():
		return nil
	case err := <-errc:
		return err
	}
}
