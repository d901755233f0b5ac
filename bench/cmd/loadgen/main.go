// Command loadgen drives an EPP over ext_proc and prints one JSON report
// (see bench/loadgen).
//
//	loadgen -target 127.0.0.1:9002 -tls -rate 2000 -duration 10s -prompt-bytes 1024 -pid 1234
//	loadgen -target 127.0.0.1:9002 -concurrency 16 -duration 10s -prompt-bytes 204800
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/switchyard-ai/switchyard/bench/loadgen"
)

// Output is the JSON line loadgen prints: the settings and the report,
// latencies in microseconds.
type Output struct {
	Target      string  `json:"target"`
	Label       string  `json:"label,omitempty"`
	Rate        float64 `json:"rate,omitempty"`
	Concurrency int     `json:"concurrency,omitempty"`
	PromptBytes int     `json:"promptBytes"`
	Sent        int64   `json:"sent"`
	Routed      int64   `json:"routed"`
	Refused     int64   `json:"refused"`
	Errors      int64   `json:"errors"`
	Dropped     int64   `json:"dropped"`
	Seconds     float64 `json:"seconds"`
	Throughput  float64 `json:"throughput"`
	DecisionP50 int64   `json:"decisionP50us"`
	DecisionP90 int64   `json:"decisionP90us"`
	DecisionP99 int64   `json:"decisionP99us"`
	DecisionMax int64   `json:"decisionMaxUs"`
	TotalP50    int64   `json:"totalP50us"`
	TotalP99    int64   `json:"totalP99us"`
	CPUSeconds  float64 `json:"cpuSeconds"`
	CPUPer1000  float64 `json:"cpuPer1000"`
	PeakRSS     int64   `json:"peakRssBytes"`
	FirstError  string  `json:"firstError,omitempty"`
}

func main() {
	var cfg loadgen.Config
	var promptBytes, variants int
	var model, label string
	flag.StringVar(&cfg.Target, "target", "127.0.0.1:9002", "the EPP's ext_proc address (loopback)")
	flag.BoolVar(&cfg.TLS, "tls", false, "dial with TLS")
	flag.StringVar(&cfg.CAFile, "ca-file", "", "verify the EPP's certificate against this CA (default: no verification, as GIE's gateway)")
	flag.IntVar(&cfg.Conns, "conns", 2, "gRPC connections (Envoy: one per worker)")
	flag.Float64Var(&cfg.Rate, "rate", 0, "open loop: Poisson arrivals per second")
	flag.Uint64Var(&cfg.Seed, "seed", 1, "arrival seed")
	flag.IntVar(&cfg.Concurrency, "concurrency", 0, "closed loop: concurrent streams")
	flag.IntVar(&cfg.MaxInFlight, "max-in-flight", 4096, "open loop: most outstanding exchanges")
	flag.DurationVar(&cfg.Duration, "duration", 10*time.Second, "measured duration")
	flag.DurationVar(&cfg.Warmup, "warmup", 2*time.Second, "unmeasured warm-up")
	flag.DurationVar(&cfg.Timeout, "timeout", 10*time.Second, "one exchange's bound")
	flag.IntVar(&cfg.PID, "pid", 0, "the EPP's process id, for CPU and peak RSS")
	flag.IntVar(&promptBytes, "prompt-bytes", 1024, "request body size")
	flag.IntVar(&variants, "variants", 64, "distinct prompts cycled through")
	flag.StringVar(&model, "model", "meta-llama/Llama-3.1-8B-Instruct", "the request's model")
	flag.StringVar(&label, "label", "", "a label copied into the output")
	flag.Parse()
	xs := loadgen.ChatExchanges(model, promptBytes, max(variants, 1))
	cfg.Exchange = func(i int) *loadgen.Exchange { return xs[i%len(xs)] }
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rep, err := loadgen.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
	out := Output{
		Target: cfg.Target, Label: label, Rate: cfg.Rate, Concurrency: cfg.Concurrency, PromptBytes: promptBytes,
		Sent: rep.Sent, Routed: rep.Routed, Refused: rep.Refused, Errors: rep.Errors, Dropped: rep.Dropped,
		Seconds: rep.Elapsed.Seconds(), Throughput: rep.Throughput,
		DecisionP50: rep.Decision.P50.Microseconds(), DecisionP90: rep.Decision.P90.Microseconds(),
		DecisionP99: rep.Decision.P99.Microseconds(), DecisionMax: rep.Decision.Max.Microseconds(),
		TotalP50: rep.Total.P50.Microseconds(), TotalP99: rep.Total.P99.Microseconds(),
		CPUSeconds: rep.CPU.Seconds(), CPUPer1000: rep.CPUPer1000(), PeakRSS: rep.PeakRSS, FirstError: rep.FirstError,
	}
	_ = json.NewEncoder(os.Stdout).Encode(out)
}
