// Command modelsim runs a simulated vLLM model server: the OpenAI API
// (/v1/completions, /v1/chat/completions, /v1/models), /health and a
// Prometheus /metrics endpoint with vLLM's metric names, backed by the
// engine model of pkg/modelsim. See README.md for flags and examples.
//
// Exit codes: 0 after a clean shutdown (SIGINT/SIGTERM), 1 when serving
// fails, 2 on a usage or configuration error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"github.com/switchyard-ai/switchyard/pkg/modelsim"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}

// settings are the flags that are not part of modelsim.Config.
type settings struct {
	host         string
	port         int
	id           string
	errorRate    float64
	extraLatency time.Duration
	metricsFault string
	rateLimit    string
	verbosity    int
}

// parseFlags maps the command line onto a Config (starting from
// modelsim.DefaultConfig) and the remaining settings.
func parseFlags(args []string, output io.Writer) (modelsim.Config, settings, error) {
	cfg := modelsim.DefaultConfig()
	var st settings
	fs := flag.NewFlagSet("modelsim", flag.ContinueOnError)
	fs.SetOutput(output)
	fs.Usage = func() {
		fmt.Fprintf(output, "Usage: modelsim [flags]\n\nA simulated vLLM model server. Flags may be written -flag or --flag.\n\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&st.host, "host", "127.0.0.1", "address to listen on (0.0.0.0 for all interfaces)")
	fs.IntVar(&st.port, "port", 8000, "TCP port to listen on (0 picks a free port)")
	fs.StringVar(&st.id, "id", "", "identity echoed in the x-modelsim-id response header (default: the listen address)")
	fs.IntVar(&st.verbosity, "v", 0, "log verbosity: 1 life-cycle and fault changes, 4 every request")
	fs.StringVar(&cfg.Model, "model", cfg.Model, "served model name")
	fs.IntVar(&cfg.MaxRunning, "max-running", cfg.MaxRunning, "max running sequences in the batch (vLLM max_num_seqs)")
	fs.IntVar(&cfg.MaxWaiting, "max-waiting", cfg.MaxWaiting, "waiting-queue bound, 429 beyond it (0 = unbounded)")
	fs.IntVar(&cfg.KVBlocks, "kv-blocks", cfg.KVBlocks, "KV-cache blocks (vLLM num_gpu_blocks)")
	fs.IntVar(&cfg.BlockSize, "block-size", cfg.BlockSize, "tokens per KV block")
	fs.IntVar(&cfg.MaxModelLen, "max-model-len", cfg.MaxModelLen, "context length: prompt plus output tokens")
	fs.IntVar(&cfg.MaxBatchedTokens, "max-batched-tokens", cfg.MaxBatchedTokens, "token budget per step (0 = no limit)")
	fs.DurationVar(&cfg.PrefillPerToken, "prefill-per-token", cfg.PrefillPerToken, "prefill time per uncached prompt token")
	fs.DurationVar(&cfg.DecodeBase, "decode-base", cfg.DecodeBase, "step time with one sequence")
	fs.DurationVar(&cfg.DecodePerSeq, "decode-per-seq", cfg.DecodePerSeq, "extra step time per additional sequence")
	fs.IntVar(&cfg.DefaultMaxTokens, "default-max-tokens", cfg.DefaultMaxTokens, "output tokens of a request without max_tokens")
	fs.Float64Var(&cfg.TimeScale, "time-scale", cfg.TimeScale, "multiplier of all simulated times (0 = never sleep)")
	fs.Func("lora", "comma-separated LoRA adapter names served besides the base model (repeatable)", func(v string) error {
		for name := range strings.SplitSeq(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				cfg.LoRAs = append(cfg.LoRAs, name)
			}
		}
		return nil
	})
	fs.IntVar(&cfg.MaxLoRAs, "max-loras", cfg.MaxLoRAs, "adapters that may run at once (vLLM max_loras)")
	fs.Func("seed", "seed of generated text, ids and injected errors (default 0)", func(v string) error {
		n, err := strconv.ParseUint(v, 0, 64)
		cfg.Seed = n
		return err
	})
	fs.Float64Var(&st.errorRate, "error-rate", 0, "fraction of generation requests answered 500 (0..1)")
	fs.DurationVar(&st.extraLatency, "extra-latency", 0, "delay added before every generation request (not scaled by --time-scale)")
	fs.StringVar(&st.metricsFault, "metrics-fault", "ok", "how /metrics misbehaves: ok, garbage, slow, 500, or nan, inf, negative (valid metrics whose load gauges read NaN, +Inf or -5)")
	fs.StringVar(&st.rateLimit, "ratelimit", "", "answer generation requests with OpenAI x-ratelimit-{limit,remaining}-{requests,tokens} headers from this budget: requests=REMAINING/LIMIT and/or tokens=REMAINING/LIMIT (e.g. requests=2/100); changed at run time with PUT "+modelsim.RateLimitPath+" (JSON), off with DELETE")
	if err := fs.Parse(args); err != nil {
		return cfg, st, err
	}
	if fs.NArg() > 0 {
		return cfg, st, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	var errs []error
	if st.port < 0 || st.port > 65535 {
		errs = append(errs, fmt.Errorf("--port: must be between 0 and 65535, got %d", st.port))
	}
	if st.errorRate < 0 || st.errorRate > 1 || math.IsNaN(st.errorRate) {
		errs = append(errs, fmt.Errorf("--error-rate: must be between 0 and 1, got %v", st.errorRate))
	}
	if st.extraLatency < 0 {
		errs = append(errs, fmt.Errorf("--extra-latency: must not be negative, got %s", st.extraLatency))
	}
	if _, err := modelsim.ParseMetricsFault(st.metricsFault); err != nil {
		errs = append(errs, fmt.Errorf("--metrics-fault: %w", err))
	}
	if st.rateLimit != "" {
		if _, err := modelsim.ParseRateLimit(st.rateLimit); err != nil {
			errs = append(errs, fmt.Errorf("--ratelimit: %w", err))
		}
	}
	if err := cfg.Validate(); err != nil {
		errs = append(errs, err)
	}
	return cfg, st, errors.Join(errs...)
}

func run(ctx context.Context, args []string, stderr io.Writer) int {
	cfg, st, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "modelsim: %v\n", err)
		return 2
	}
	log := funcr.New(func(prefix, args string) {
		if prefix != "" {
			fmt.Fprintln(stderr, prefix, args)
			return
		}
		fmt.Fprintln(stderr, args)
	}, funcr.Options{Verbosity: st.verbosity, LogTimestamp: true})
	return serve(ctx, cfg, st, log, stderr)
}

func serve(ctx context.Context, cfg modelsim.Config, st settings, log logr.Logger, stderr io.Writer) int {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort(st.host, strconv.Itoa(st.port)))
	if err != nil {
		fmt.Fprintf(stderr, "modelsim: %v\n", err)
		return 1
	}
	id := st.id
	if id == "" {
		id = ln.Addr().String()
	}
	s, err := modelsim.New(cfg, modelsim.WithLogger(log), modelsim.WithID(id))
	if err != nil {
		_ = ln.Close()
		fmt.Fprintf(stderr, "modelsim: %v\n", err)
		return 2
	}
	fault, _ := modelsim.ParseMetricsFault(st.metricsFault)
	s.SetErrorRate(st.errorRate)
	s.SetExtraLatency(st.extraLatency)
	s.SetMetricsFault(fault)
	if st.rateLimit != "" {
		rl, _ := modelsim.ParseRateLimit(st.rateLimit)
		s.SetRateLimit(&rl)
	}
	log.Info("modelsim listening", "addr", "http://"+ln.Addr().String(), "model", cfg.Model, "id", id,
		"maxRunning", cfg.MaxRunning, "kvBlocks", cfg.KVBlocks, "blockSize", cfg.BlockSize, "timeScale", cfg.TimeScale)
	if err := s.Serve(ctx, ln); err != nil {
		fmt.Fprintf(stderr, "modelsim: %v\n", err)
		return 1
	}
	log.Info("modelsim stopped", "served", s.Stats().Served)
	return 0
}
