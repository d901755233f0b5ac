// Package metricssource provides the metrics-data-source plugin: the data
// layer source that scrapes each endpoint's Prometheus text metrics.
//
// The plugin only holds the validated scrape settings (scheme, path, TLS
// verification); the server's scraper reads them with Settings and does
// the polling. Extractors configured under it in
// dataLayer.sources[].extractors (such as core-metrics-extractor) turn the
// scraped text into endpoint metrics. Parameters and defaults match GIE
// v1.5's metrics-data-source.
package metricssource

import (
	"errors"
	"fmt"
	"strings"

	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Type is the plugin type name used in configuration.
const Type = "metrics-data-source"

// Params configures a metrics-data-source.
type Params struct {
	// Scheme is the protocol used to scrape the model servers: "http" or
	// "https". Default "http".
	Scheme string `json:"scheme"`
	// Path is the URL path of the metrics endpoint on each model server.
	// Default "/metrics"; must start with "/" and hold no query or
	// fragment.
	Path string `json:"path"`
	// InsecureSkipVerify skips verification of the model servers' TLS
	// certificates when Scheme is "https" (model servers usually have
	// self-signed certificates). Default true.
	InsecureSkipVerify bool `json:"insecureSkipVerify"`
	// NameFilter asks each model server for only the metric families the
	// extractors read, with one name[] query parameter per family
	// (/metrics?name[]=vllm:num_requests_waiting&…). Prometheus
	// client_python's exposition (vLLM, SGLang, trtllm-serve) then answers
	// a few lines instead of every histogram; a server that ignores the
	// parameter answers its whole body, which is filtered as before. Set it
	// to false for a server or proxy that refuses unknown query
	// parameters. Default true (GIE has no such parameter and always reads
	// the whole body).
	NameFilter bool `json:"nameFilter"`
}

// DefaultParams returns the defaults of GIE v1.5, and NameFilter on.
func DefaultParams() Params {
	return Params{Scheme: "http", Path: "/metrics", InsecureSkipVerify: true, NameFilter: true}
}

// Validate reports every invalid field.
func (p *Params) Validate() error {
	var errs []error
	if p.Scheme != "http" && p.Scheme != "https" {
		errs = append(errs, fmt.Errorf("scheme: must be \"http\" or \"https\", got %q", p.Scheme))
	}
	switch {
	case !strings.HasPrefix(p.Path, "/"):
		errs = append(errs, fmt.Errorf("path: must start with \"/\", got %q", p.Path))
	case strings.ContainsAny(p.Path, "?#"):
		errs = append(errs, fmt.Errorf("path: must be a path without query or fragment, got %q", p.Path))
	case strings.ContainsFunc(p.Path, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		errs = append(errs, fmt.Errorf("path: must not contain spaces or control characters, got %q", p.Path))
	}
	return errors.Join(errs...)
}

// Source is a metrics-data-source instance. It is immutable.
type Source struct {
	name     string
	settings Params
}

// New builds a source from validated parameters.
func New(name string, p Params, _ scheduling.Handle) (*Source, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &Source{name: name, settings: p}, nil
}

// TypedName implements scheduling.Plugin.
func (s *Source) TypedName() scheduling.TypedName {
	return scheduling.TypedName{Type: Type, Name: s.name}
}

// IsDataSource implements scheduling.DataSource.
func (s *Source) IsDataSource() {}

// Settings returns the validated scrape settings for the server's scraper.
func (s *Source) Settings() Params { return s.settings }

// Registration registers the metrics-data-source type.
var Registration = scheduling.Registration{
	Type:      Type,
	Stability: scheduling.Beta,
	Factory:   scheduling.Typed(DefaultParams, New),
}

var _ scheduling.DataSource = (*Source)(nil)
