package signals

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Path is where a site-relay serves signals; ContentType is the body's
// media type.
const (
	Path        = "/v1/site/signals"
	ContentType = "text/plain; version=0.0.4"
)

// Series names (the closed set of the format).
const (
	NameAverageRunning   = "llm_d_epp_average_running_requests"
	NameAverageQueue     = "llm_d_epp_average_queue_size"
	NameReadyEndpoints   = "llm_d_epp_ready_endpoints"
	NameFlowControlQueue = "llm_d_epp_flow_control_queue_size"
	NameAverageKVCache   = "llm_d_epp_average_kv_cache_utilization"
	NameConfigGeneration = "grid_provider_config_generation"
	NamePublishesLoad    = "grid_provider_publishes_load"
	NamePeerRoundEnd     = "grid_peer_poll_round_end_timestamp_seconds"
	NamePeerRounds       = "grid_peer_poll_rounds_total"
)

// Label names.
const (
	LabelSite     = "grid_site"
	LabelCluster  = "grid_cluster"
	LabelProvider = "grid_provider"
)

// PoolSeries are the five EPP pool gauges a relay reads at one instant
// (G-05), in a fixed order.
var PoolSeries = [...]string{NameAverageRunning, NameAverageQueue, NameReadyEndpoints, NameFlowControlQueue, NameAverageKVCache}

// MaxGeneration is the largest grid_provider_config_generation value: every
// integer up to it is exact in a float64.
const MaxGeneration = 1 << 53

// Default limits.
const (
	// DefaultMaxBytes is the EPP's read ceiling per poll (G-70).
	DefaultMaxBytes = 1 << 20
	// RelayMaxBytes is what a relay keeps its body to its EPP under (G-71).
	RelayMaxBytes = 768 << 10
	// DefaultMaxLinesPerTarget cuts each target (G-71).
	DefaultMaxLinesPerTarget = 4096
	// DefaultMaxProvidersPerSite caps the providers of one site.
	DefaultMaxProvidersPerSite = 64
)

// Sample is one row.
type Sample struct {
	Name     string    // one of the series above
	Site     string    // grid_site
	Cluster  string    // grid_cluster ("" for peer round rows)
	Provider string    // grid_provider ("" for peer round rows)
	Value    float64   // finite, non-negative
	Stamp    time.Time // millisecond precision
}

// DropReason says why Parse refused a row; the set is closed (DropReasons).
type DropReason string

// Drop reasons (the label values of grid_signals_ingest_dropped_total).
const (
	DropSkew         DropReason = "skew"
	DropSiteMismatch DropReason = "site_mismatch"
	DropCap          DropReason = "cap"
	DropParse        DropReason = "parse"
)

// DropReasons lists every DropReason, for initialising metric labels.
var DropReasons = [...]DropReason{DropSkew, DropSiteMismatch, DropCap, DropParse}

// Store and cut label values of grid_signals_relay_truncated_total.
const (
	StoreLocal = "local"
	StorePeer  = "peer"
	CutTarget  = "target"
	CutLines   = "lines"
)

// Limits bounds a body. A zero field takes its default (DefaultMaxBytes,
// DefaultMaxLinesPerTarget, DefaultMaxProvidersPerSite); a negative one is
// invalid (Parse and Encode treat it as the default too).
type Limits struct {
	MaxBytes            int64 // a body above it is refused whole (EPP: 1 MiB, G-70)
	MaxLinesPerTarget   int   // 4096
	MaxProvidersPerSite int   // 64, the first by name
}

func (l Limits) withDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	if l.MaxLinesPerTarget <= 0 {
		l.MaxLinesPerTarget = DefaultMaxLinesPerTarget
	}
	if l.MaxProvidersPerSite <= 0 {
		l.MaxProvidersPerSite = DefaultMaxProvidersPerSite
	}
	return l
}

// ErrTooLarge is returned by Parse for a body above Limits.MaxBytes.
var ErrTooLarge = errors.New("signals: body larger than the limit")

// series describes one name of the closed set.
type series struct {
	name     string
	provider bool // per-provider labels; else per-peer (grid_site only)
	check    func(v float64) string
}

func checkBool(v float64) string {
	if v != 0 && v != 1 {
		return "must be 0 or 1"
	}
	return ""
}

func checkGeneration(v float64) string {
	if v != math.Trunc(v) || v > MaxGeneration {
		return "must be an integer of at most 2^53"
	}
	return ""
}

var seriesList = [...]series{
	{name: NameAverageRunning, provider: true},
	{name: NameAverageQueue, provider: true},
	{name: NameReadyEndpoints, provider: true},
	{name: NameFlowControlQueue, provider: true},
	{name: NameAverageKVCache, provider: true},
	{name: NameConfigGeneration, provider: true, check: checkGeneration},
	{name: NamePublishesLoad, provider: true, check: checkBool},
	{name: NamePeerRoundEnd},
	{name: NamePeerRounds},
}

func lookupSeries(name []byte) *series {
	for i := range seriesList {
		if seriesList[i].name == string(name) {
			return &seriesList[i]
		}
	}
	return nil
}

// IsProviderSeries reports whether name is a per-provider series (labels
// grid_site, grid_cluster, grid_provider); the other known series are
// per-peer round rows.
func IsProviderSeries(name string) bool {
	s := lookupSeries([]byte(name))
	return s != nil && s.provider
}

// Validate reports what is wrong with s as a row of the format, or nil.
func (s Sample) Validate() error {
	ser := lookupSeries([]byte(s.Name))
	if ser == nil {
		return fmt.Errorf("signals: unknown series %q", s.Name)
	}
	if err := ValidateLabel(s.Site); err != nil {
		return fmt.Errorf("signals: %s %s: %w", s.Name, LabelSite, err)
	}
	if ser.provider {
		if err := ValidateSubdomain(s.Cluster); err != nil {
			return fmt.Errorf("signals: %s %s: %w", s.Name, LabelCluster, err)
		}
		if err := ValidateLabel(s.Provider); err != nil {
			return fmt.Errorf("signals: %s %s: %w", s.Name, LabelProvider, err)
		}
	} else if s.Cluster != "" || s.Provider != "" {
		return fmt.Errorf("signals: %s takes no %s or %s", s.Name, LabelCluster, LabelProvider)
	}
	if msg := checkValue(ser, s.Value); msg != "" {
		return fmt.Errorf("signals: %s value %v: %s", s.Name, s.Value, msg)
	}
	return nil
}

func checkValue(ser *series, v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "must be finite"
	}
	if v < 0 {
		return "must not be negative"
	}
	if ser.check != nil {
		return ser.check(v)
	}
	return ""
}

// ValidateLabel checks that s is a DNS-1123 label: 1 to 63 lowercase
// letters, digits and '-', starting and ending with a letter or digit.
func ValidateLabel(s string) error {
	if msg := labelProblem(s); msg != "" {
		return errors.New(msg)
	}
	return nil
}

func labelProblem(s string) string {
	if s == "" {
		return "must not be empty"
	}
	if len(s) > 63 {
		return fmt.Sprintf("must be at most 63 characters, got %d", len(s))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-':
			if i == 0 || i == len(s)-1 {
				return fmt.Sprintf("%q must start and end with a lowercase letter or digit (DNS-1123 label)", s)
			}
		default:
			return fmt.Sprintf("%q must be a DNS-1123 label (lowercase letters, digits and '-')", s)
		}
	}
	return ""
}

// ValidateSubdomain checks that s is a DNS-1123 subdomain: at most 253
// characters, DNS-1123 labels joined by '.'.
func ValidateSubdomain(s string) error {
	if s == "" {
		return errors.New("must not be empty")
	}
	if len(s) > 253 {
		return fmt.Errorf("must be at most 253 characters, got %d", len(s))
	}
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == '.' {
			if msg := labelProblem(s[start:i]); msg != "" {
				return fmt.Errorf("%q must be a DNS-1123 subdomain: %s", s, msg)
			}
			start = i + 1
		}
	}
	return nil
}
