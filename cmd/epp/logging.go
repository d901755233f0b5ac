package main

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

// logFlags are GIE's logging flags (controller-runtime's zap flags and
// -v). Switchyard logs through logr with the funcr sink: --zap-encoder
// json gives one JSON object per line, console a key=value line.
type logFlags struct {
	// errorsOnly logs errors and nothing else (the demo's default, so its
	// table is not interleaved with lifecycle lines); not a flag.
	errorsOnly bool
	v          int
	devel      bool
	encoder    string
	level      string
	stacktrace string
	timeEnc    string
}

func (f *logFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&f.v, "v", 2, "log verbosity: 0 errors, lifecycle and the pool's trouble (503 no_endpoints, once per 10s per reason), 1 changes and every refusal (4xx, 429, load's 503s), 2 fallbacks and pass-throughs (default), 3 one line per request, 4 protocol detail")
	fs.BoolVar(&f.devel, "zap-devel", true, "development logging: console encoder unless --zap-encoder says otherwise")
	fs.StringVar(&f.encoder, "zap-encoder", "", "log encoding: json or console")
	fs.StringVar(&f.level, "zap-log-level", "", "log level: error, info, debug or a verbosity number (overrides -v)")
	fs.StringVar(&f.stacktrace, "zap-stacktrace-level", "", "accepted for compatibility (no stack traces are logged)")
	fs.StringVar(&f.timeEnc, "zap-time-encoding", "", "timestamp format: rfc3339, rfc3339nano, iso8601, millis, nanos or epoch")
}

// logger builds the root logger writing to w.
func (f *logFlags) logger(w io.Writer) (logr.Logger, error) {
	verbosity := f.v
	switch f.level {
	case "":
	case "error", "info":
		verbosity = 0
	case "debug":
		verbosity = 4
	default:
		n, err := strconv.Atoi(f.level)
		if err != nil || n < 0 {
			return logr.Logger{}, fmt.Errorf("--zap-log-level: want error, info, debug or a non-negative number, got %q", f.level)
		}
		verbosity = n
	}
	if verbosity < 0 {
		return logr.Logger{}, fmt.Errorf("-v: must not be negative, got %d", verbosity)
	}
	format := time.RFC3339Nano
	switch f.timeEnc {
	case "", "rfc3339nano", "nanos", "millis", "epoch":
	case "rfc3339":
		format = time.RFC3339
	case "iso8601":
		format = "2006-01-02T15:04:05.000Z0700"
	default:
		return logr.Logger{}, fmt.Errorf("--zap-time-encoding: unknown encoding %q", f.timeEnc)
	}
	opts := funcr.Options{LogTimestamp: true, TimestampFormat: format, Verbosity: verbosity, LogCaller: funcr.None}
	if f.errorsOnly {
		opts.Verbosity = -1 // funcr: Info at V(0) is above -1, errors always log
	}
	var mu sync.Mutex
	write := func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		if prefix != "" {
			fmt.Fprintln(w, prefix, args)
			return
		}
		fmt.Fprintln(w, args)
	}
	switch f.encoder {
	case "json":
		return funcr.NewJSON(func(obj string) { write("", obj) }, opts), nil
	case "", "console":
		return funcr.New(write, opts), nil
	default:
		return logr.Logger{}, fmt.Errorf("--zap-encoder: want json or console, got %q", f.encoder)
	}
}
