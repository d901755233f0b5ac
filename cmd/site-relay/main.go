// Command site-relay is Switchyard's per-site relay of multi-site load
// signals (package pkg/multisite/relay):
//
//	site-relay [serve] [--config FILE] [flags]   serve (the default command)
//	site-relay validate [flags] FILE             check a configuration file
//
// Configuration comes from a YAML file and flags; GRID_SIGNALS_SCRAPE_INTERVAL_SECS
// sets the scrape interval. Precedence: flag > environment > file >
// default. Exit codes: 0 success, 1 an invalid configuration or a failure
// while serving, 2 a usage error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"github.com/switchyard-ai/switchyard/pkg/multisite/relay"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const usage = `Switchyard site-relay: scrapes this site's EPP, exchanges load signals with
peer relays over mutual TLS, and serves every site's signals to the local EPP.

Usage:
  site-relay [serve] [--config FILE] [flags]   serve (signals on :8443 with mutual TLS,
                                               health, status and metrics on :8080)
  site-relay validate [flags] FILE             check a configuration file (with any flags
                                               and GRID_SIGNALS_SCRAPE_INTERVAL_SECS applied);
                                               print OK and warnings, or every error with
                                               its field path

Run "site-relay <command> -h" for the flags.
`

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		switch args[0] {
		case "serve":
			return runServe(ctx, args[1:], getenv, stdout, stderr)
		case "validate":
			return runValidate(args[1:], getenv, stdout, stderr)
		case "help":
			fmt.Fprint(stdout, usage)
			return 0
		default:
			fmt.Fprintf(stderr, "site-relay: unknown command %q\n\n%s", args[0], usage)
			return 2
		}
	}
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
		fmt.Fprint(stdout, usage)
		return 0
	}
	return runServe(ctx, args, getenv, stdout, stderr)
}

// configFlags are the flags that set configuration fields; each one given
// overrides the file and the environment.
type configFlags struct {
	fs        *flag.FlagSet
	site      string
	cluster   string
	trust     string
	listen    string
	admin     string
	certFile  string
	keyFile   string
	caFile    string
	eppSPIFFE string
	eppPin    string
	providers multiFlag
	endpoint  string
	tokenFile string
	stale     int
	peers     multiFlag
	scrape    time.Duration
	scrapeTO  time.Duration
	poll      time.Duration
	connectTO time.Duration
	requestTO time.Duration
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, " ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func (f *configFlags) register(fs *flag.FlagSet) {
	f.fs = fs
	fs.StringVar(&f.site, "site", "", "this site's name (DNS-1123 label): the grid_site of its rows")
	fs.StringVar(&f.cluster, "cluster", "", "this site's cluster (DNS-1123 subdomain): the grid_cluster of its rows")
	fs.StringVar(&f.trust, "trust-domain", "", "SPIFFE trust domain: default identities spiffe://<domain>/site/<peer> and .../site/<site>/epp")
	fs.StringVar(&f.listen, "listen-address", "", "signals address, mutual TLS (default "+relay.DefaultListenAddress+")")
	fs.StringVar(&f.admin, "admin-address", "", "health, status and metrics address, plain HTTP (default "+relay.DefaultAdminAddress+")")
	fs.StringVar(&f.certFile, "tls-cert-file", "", "the relay's certificate chain (PEM), reloaded on change")
	fs.StringVar(&f.keyFile, "tls-key-file", "", "the relay's private key (PEM), reloaded on change")
	fs.StringVar(&f.caFile, "tls-ca-file", "", "CA bundle peer and EPP certificates must chain to, reloaded on change")
	fs.StringVar(&f.eppSPIFFE, "local-epp-spiffe-id", "", "the local EPP's SPIFFE ID (the one client that gets every site's rows)")
	fs.StringVar(&f.eppPin, "local-epp-sha256", "", "the local EPP's certificate SHA-256 (instead of, or with, its SPIFFE ID)")
	fs.Var(&f.providers, "provider", "a provider (InferencePool) name; repeatable; replaces the file's providers, all scraping --metrics-endpoint")
	fs.StringVar(&f.endpoint, "metrics-endpoint", "", "the EPP Service's metrics URL for --provider (none: the providers publish no load)")
	fs.StringVar(&f.tokenFile, "metrics-token-file", "", "bearer token file for --metrics-endpoint (the EPP's --metrics-token-file)")
	fs.IntVar(&f.stale, "stale-metrics-seconds", 0, fmt.Sprintf("how long a failing scrape keeps the last readiness, for --provider (default %d)", relay.DefaultStaleMetricsSeconds))
	fs.Var(&f.peers, "peer", "a peer relay, site=NAME,address=HOST:PORT[,serverName=NAME][,spiffeID=ID][,sha256=HEX]; repeatable; replaces the file's peers")
	fs.DurationVar(&f.scrape, "scrape-interval", 0, "how often the EPP is scraped (default 1s; also "+relay.ScrapeIntervalEnv+")")
	fs.DurationVar(&f.scrapeTO, "scrape-timeout", 0, "timeout of one scrape (default 1s, at most the interval)")
	fs.DurationVar(&f.poll, "peer-poll-interval", 0, "how often every peer is polled (default 2s)")
	fs.DurationVar(&f.connectTO, "connect-timeout", 0, "peer connect and TLS handshake timeout (default 2s)")
	fs.DurationVar(&f.requestTO, "request-timeout", 0, "timeout of one peer poll, connect included (default 2s)")
}

// apply sets the fields of the flags given on the command line.
func (f *configFlags) apply(cfg *relay.Config) error {
	var err error
	f.fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "site":
			cfg.Site = f.site
		case "cluster":
			cfg.Cluster = f.cluster
		case "trust-domain":
			cfg.TrustDomain = f.trust
		case "listen-address":
			cfg.ListenAddress = f.listen
		case "admin-address":
			cfg.AdminAddress = f.admin
		case "tls-cert-file":
			cfg.TLS.CertFile = f.certFile
		case "tls-key-file":
			cfg.TLS.KeyFile = f.keyFile
		case "tls-ca-file":
			cfg.TLS.CAFile = f.caFile
		case "local-epp-spiffe-id":
			cfg.LocalEPP.Identity.SPIFFEID = f.eppSPIFFE
		case "local-epp-sha256":
			cfg.LocalEPP.Identity.SHA256 = f.eppPin
		case "scrape-interval":
			cfg.ScrapeInterval = f.scrape
		case "scrape-timeout":
			cfg.ScrapeTimeout = f.scrapeTO
		case "peer-poll-interval":
			cfg.PeerPollInterval = f.poll
		case "connect-timeout":
			cfg.ConnectTimeout = f.connectTO
		case "request-timeout":
			cfg.RequestTimeout = f.requestTO
		}
	})
	if len(f.providers) > 0 {
		cfg.Providers = nil
		for _, name := range f.providers {
			p := relay.Provider{Name: name}
			if f.endpoint != "" {
				p.MetricsConfig = &relay.MetricsConfig{Endpoint: f.endpoint, BearerTokenFile: f.tokenFile, StaleMetricsSeconds: f.stale}
			}
			cfg.Providers = append(cfg.Providers, p)
		}
	} else if f.endpoint != "" || f.tokenFile != "" || f.stale != 0 {
		return errors.New("--metrics-endpoint, --metrics-token-file and --stale-metrics-seconds apply to --provider")
	}
	if len(f.peers) > 0 {
		cfg.Peers = nil
		for i, s := range f.peers {
			p, perr := parsePeer(s)
			if perr != nil && err == nil {
				err = fmt.Errorf("--peer %d %q: %w", i+1, s, perr)
			}
			cfg.Peers = append(cfg.Peers, p)
		}
	}
	return err
}

// parsePeer parses site=NAME,address=HOST:PORT[,serverName=..][,spiffeID=..][,sha256=..].
func parsePeer(s string) (relay.Peer, error) {
	var p relay.Peer
	for part := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return p, fmt.Errorf("%q is not key=value", part)
		}
		switch k {
		case "site":
			p.Site = v
		case "address":
			p.Address = v
		case "serverName":
			p.ServerName = v
		case "spiffeID":
			p.Identity.SPIFFEID = v
		case "sha256":
			p.Identity.SHA256 = v
		default:
			return p, fmt.Errorf("unknown key %q (site, address, serverName, spiffeID, sha256)", k)
		}
	}
	if p.Site == "" || p.Address == "" {
		return p, errors.New("site and address are required")
	}
	return p, nil
}

// load builds the configuration: file, environment, flags, defaults,
// validation.
func load(file string, f *configFlags, getenv func(string) string) (*relay.Config, []string, error) {
	cfg := &relay.Config{}
	if file != "" {
		data, err := readFile(file)
		if err != nil {
			return nil, nil, err
		}
		if cfg, err = relay.Decode(data); err != nil {
			return nil, nil, err
		}
	}
	if err := cfg.ApplyEnv(getenv); err != nil {
		return nil, nil, err
	}
	if err := f.apply(cfg); err != nil {
		return nil, nil, err
	}
	cfg.SetDefaults()
	warnings, err := cfg.Validate()
	if err != nil {
		return nil, warnings, err
	}
	return cfg, warnings, nil
}

func readFile(path string) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read configuration: %w", err)
	}
	defer func() { _ = fh.Close() }()
	data, err := io.ReadAll(io.LimitReader(fh, relay.MaxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read configuration %s: %w", path, err)
	}
	return data, nil
}

const serveUsage = `Usage: site-relay [serve] [--config FILE] [flags]

Serves /v1/site/signals over mutual TLS (the local EPP gets every site's rows,
peers get this site's), scrapes the EPP every scrape interval and polls every
peer every poll interval. SIGINT or SIGTERM stops it.

Flags:
`

func newFlagSet() *flag.FlagSet { return flag.NewFlagSet("site-relay", flag.ContinueOnError) }

func runServe(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := newFlagSet()
	fs.SetOutput(stderr)
	file := fs.String("config", "", "the configuration file (YAML or JSON)")
	verbosity := fs.Int("v", 0, "log verbosity: 0 errors and changes of state, 1 details (refused clients, truncation, outcome changes)")
	format := fs.String("log-format", "console", "log format: console or json")
	var cf configFlags
	cf.register(fs)
	fs.Usage = func() {
		fmt.Fprint(stderr, serveUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "site-relay: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	log, err := newLogger(stderr, *verbosity, *format)
	if err != nil {
		fmt.Fprintf(stderr, "site-relay: %v\n", err)
		return 2
	}
	cfg, warnings, err := load(*file, &cf, getenv)
	for _, w := range warnings {
		log.Info("configuration warning", "warning", w)
	}
	if err != nil {
		fmt.Fprintf(stderr, "site-relay: %v\n", err)
		return 1
	}
	r, err := relay.New(cfg, relay.Options{Logger: log})
	if err != nil {
		fmt.Fprintf(stderr, "site-relay: %v\n", err)
		return 1
	}
	if err := r.Run(ctx); err != nil {
		log.Error(err, "site-relay stopped")
		return 1
	}
	fmt.Fprintln(stdout, "site-relay stopped")
	return 0
}

const validateUsage = `Usage: site-relay validate [flags] FILE

Loads FILE as serve does (GRID_SIGNALS_SCRAPE_INTERVAL_SECS and any flags
applied over it, then the defaults) and prints "FILE: OK" and its warnings,
or every error with its field path. Certificates are not read.

Exit code: 0 valid, 1 invalid, 2 usage error.

Flags (as serve):
`

func runValidate(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := newFlagSet()
	fs.SetOutput(stderr)
	var cf configFlags
	cf.register(fs)
	fs.Usage = func() {
		fmt.Fprint(stderr, validateUsage)
		fs.PrintDefaults()
	}
	var files []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		files = append(files, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(files) != 1 {
		fmt.Fprintf(stderr, "site-relay validate: want exactly one file, got %d\n\n", len(files))
		fs.Usage()
		return 2
	}
	_, warnings, err := load(files[0], &cf, getenv)
	if err != nil {
		fmt.Fprintf(stdout, "%s: %v\n", files[0], err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: OK\n", files[0])
	for _, w := range warnings {
		fmt.Fprintf(stderr, "%s: warning: %s\n", files[0], w)
	}
	return 0
}

// newLogger writes logr lines to w.
func newLogger(w io.Writer, v int, format string) (logr.Logger, error) {
	if v < 0 {
		return logr.Logger{}, fmt.Errorf("-v: must not be negative, got %d", v)
	}
	opts := funcr.Options{LogTimestamp: true, TimestampFormat: time.RFC3339Nano, Verbosity: v}
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
	switch format {
	case "json":
		return funcr.NewJSON(func(obj string) { write("", obj) }, opts), nil
	case "console", "":
		return funcr.New(write, opts), nil
	}
	return logr.Logger{}, fmt.Errorf("--log-format: want console or json, got %q", format)
}
