package config

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard-ai/switchyard/pkg/flowcontrol"
	"github.com/switchyard-ai/switchyard/pkg/scheduling"
)

// Plugin types the loader adds when a configuration leaves them out, as
// GIE v1.5 does.
const (
	SingleProfileHandlerType = "single-profile-handler"
	MaxScorePickerType       = "max-score-picker"
	OpenAIParserType         = "openai-parser"
	UtilizationDetectorType  = "utilization-detector"
	MetricsDataSourceType    = "metrics-data-source"
	CoreMetricsExtractorType = "core-metrics-extractor"
)

// Options configures Load.
type Options struct {
	// Registry holds the plugin types; required.
	Registry *scheduling.Registry
	// Context bounds the plugins' background work; defaults to Background.
	Context context.Context
	// Logger is given to plugins.
	Logger logr.Logger
	// Registerer receives framework and plugin metrics; defaults to a
	// private registry.
	Registerer prometheus.Registerer
	// Seed makes plugin randomness reproducible (0: random).
	Seed uint64
	// Previous is the configuration a reload replaces. An instance of it
	// with the same name, type and effective parameters is kept, with its
	// state (prefix index, in-flight counts, counters) and its context,
	// instead of a newly built one, which is closed at once. Plugins share
	// nothing but per-request state, so kept and new instances mix safely.
	// Once the new configuration serves, release Previous against it
	// (Previous.Release(next)). A released Previous keeps nothing.
	Previous *Loaded

	// MaxConfigBytes bounds the document, as read and once its YAML
	// aliases are expanded; 0 means DefaultMaxConfigBytes.
	MaxConfigBytes int
	// MaxPlugins bounds the instances declared under plugins; 0 means
	// DefaultMaxPlugins.
	MaxPlugins int
	// MaxProfiles bounds schedulingProfiles; 0 means DefaultMaxProfiles.
	MaxProfiles int
	// MaxProfilePlugins bounds the plugin references of one scheduling
	// profile; 0 means DefaultMaxProfilePlugins.
	MaxProfilePlugins int

	// SelectionStrategy, when not empty, is the selection strategy the
	// user chose outside the file (--selection-strategy, else
	// SWITCHYARD_SELECTION_STRATEGY), in any spelling strategies.Parse
	// accepts; an unknown name fails the load. It sets the strategy of
	// every strategy-picker (without the file's strategyParameters when
	// the file names another strategy). A configuration without a strategy-picker
	// (every GIE and llm-d configuration) gets, in each profile, a
	// strategy-picker of that strategy in place of the profile's picker,
	// with the replaced picker's maxNumOfEndpoints; the profile's scorers
	// keep precedence. Loaded.Notes says what changed.
	SelectionStrategy string

	// ScrapeInterval is the host's model-server metrics scrape interval
	// (epp serve's --refresh-metrics-interval), passed to plugins
	// (scheduling.HandleOptions.ScrapeInterval, scheduling.ScrapeIntervalOf):
	// engine-load-picker derives its freshness from it and warns when its
	// scrapeInterval parameter differs. 0 means unknown: plugins keep their
	// own defaults.
	ScrapeInterval time.Duration
}

// Default bounds of a configuration. Every instance costs memory, metric
// series and, in a profile, time on every request, so a configuration an
// outsider (or a mistake) can hand to a hot reload must not be unbounded.
// The largest GIE and llm-d sample configurations declare fewer than 20
// plugins in at most a handful of profiles; the defaults leave an order of
// magnitude of room above that.
const (
	// DefaultMaxConfigBytes is 1 MiB, the most a Kubernetes ConfigMap
	// holds, where the file usually comes from.
	DefaultMaxConfigBytes = 1 << 20
	// DefaultMaxPlugins bounds plugin instances.
	DefaultMaxPlugins = 512
	// DefaultMaxProfiles bounds scheduling profiles. A profile handler
	// runs at most every profile per request.
	DefaultMaxProfiles = 64
	// DefaultMaxProfilePlugins bounds the filters, scorers and picker one
	// profile runs on every request.
	DefaultMaxProfilePlugins = 128
)

// limitOr returns v, or def when v is not positive.
func limitOr(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// DataSourceBinding is a data source with its extractors.
type DataSourceBinding struct {
	Source     scheduling.DataSource
	Extractors []scheduling.DataExtractor
}

// Loaded is a configuration ready to serve.
type Loaded struct {
	// Config is the effective configuration: every default filled in.
	Config *EndpointPickerConfig
	// Scheduler runs the configuration's plugins.
	Scheduler *scheduling.Scheduler
	// Plugins are the instances by name.
	Plugins map[string]scheduling.Plugin
	// Parser is the request parser plugin.
	Parser scheduling.Parser
	// SaturationDetector is the configured detector.
	SaturationDetector scheduling.SaturationDetector
	// DataSources are the data layer's sources, empty when disabled.
	DataSources []DataSourceBinding
	// FeatureGates are the enabled gates.
	FeatureGates map[string]bool
	// FlowControl is the flow-control configuration, with its policy
	// instances, when the flowControl gate is on; nil otherwise. Its Clock
	// is unset: the host builds the controller with flowcontrol.New.
	FlowControl *flowcontrol.Config
	// Warnings are problems that do not stop the configuration from
	// working, such as a deprecated plugin type.
	Warnings []string
	// Kept names the instances taken over from Options.Previous.
	Kept []string
	// Notes say what the loader changed beyond the file's own defaults
	// (the selection strategy override), every one on every load. The
	// loader logs them (Options.Logger) at start-up, and on a reload only
	// those Options.Previous did not have.
	Notes []string

	handle   *scheduling.BasicHandle
	owned    map[string]*instance // every instance, kept ones included
	order    []string             // names of owned, in configuration order
	metrics  *scheduling.FrameworkMetrics
	logger   logr.Logger
	mu       sync.Mutex
	released bool
}

// instance is one plugin instance with what ends its life. A kept instance
// is the same *instance in both configurations.
type instance struct {
	plugin scheduling.Plugin
	typ    string
	cancel context.CancelFunc
	once   sync.Once
}

// close cancels the instance's context and closes it, once. A panic in a
// plugin's Close is logged, not spread: the configuration that replaced
// the instance is serving by then.
func (in *instance) close(logger logr.Logger, info scheduling.CloseInfo) {
	in.once.Do(func() {
		in.cancel()
		c, ok := in.plugin.(scheduling.Closer)
		if !ok {
			return
		}
		defer func() {
			if r := recover(); r != nil {
				logger.Error(fmt.Errorf("panic: %v", r), "Plugin panicked in Close", "plugin", in.plugin.TypedName().String())
			}
		}()
		c.Close(info)
	})
}

// Release ends l's service: next is the configuration serving instead (a
// reload's new one, or, for a configuration the host refused after
// loading it, the Previous it was loaded against), or nil at shutdown.
// Every instance of l that next did not keep has its context cancelled
// and is closed (scheduling.Closer), with Successor true when next has an
// instance of the same name and type; the framework's
// plugin_duration_seconds series l used and no other configuration on the
// registerer (next, in particular) uses are deleted.
// Call it after next took over: requests already running on l finish on
// it, and its closed instances stay safe for them. Release is idempotent
// and not safe to call concurrently with a Load that uses l as Previous.
func (l *Loaded) Release(next *Loaded) {
	if l == nil || l == next {
		return
	}
	l.mu.Lock()
	done := l.released
	l.released = true
	l.mu.Unlock()
	if done {
		return
	}
	var nextTypes map[string]bool
	if next != nil {
		nextTypes = make(map[string]bool, len(next.owned))
		for _, n := range next.owned {
			nextTypes[n.typ] = true
		}
	}
	for _, name := range l.order {
		in := l.owned[name]
		succ := false
		if next != nil {
			if n := next.owned[name]; n != nil {
				if n == in {
					continue // kept by next
				}
				succ = n.typ == in.typ
			}
		}
		in.close(l.logger, scheduling.CloseInfo{Successor: succ, TypeServes: succ || nextTypes[in.typ]})
	}
	l.metrics.Release()
}

// Close releases every instance of l, as at shutdown: Release(nil).
func (l *Loaded) Close() { l.Release(nil) }

func (l *Loaded) isReleased() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.released
}

// LoadFile reads and loads a configuration file.
func LoadFile(path string, opts Options) (*Loaded, error) {
	data, err := ReadFile(path, opts.MaxConfigBytes)
	if err != nil {
		return nil, err
	}
	return Load(data, opts)
}

// ReadFile reads a configuration file of at most maxBytes (0:
// DefaultMaxConfigBytes) without reading more: a larger file is refused
// with the *ValidationError Load gives for a document that large. Other
// errors are read errors.
func ReadFile(path string, maxBytes int) ([]byte, error) {
	maxBytes = limitOr(maxBytes, DefaultMaxConfigBytes)
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read configuration: %w", err)
	}
	defer func() { _ = f.Close() }()
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() > int64(maxBytes) {
		return nil, tooLarge(fi.Size(), maxBytes)
	}
	data, err := io.ReadAll(io.LimitReader(f, int64(maxBytes)+1))
	if err != nil {
		return nil, fmt.Errorf("read configuration: %w", err)
	}
	if len(data) > maxBytes {
		return nil, tooLarge(int64(len(data)), maxBytes)
	}
	return data, nil
}

// tooLarge is the error of a document over the size limit.
func tooLarge(size int64, maxBytes int) error {
	errs := &errorList{}
	errs.Add("", "the document is %d bytes, more than the limit of %d bytes", size, maxBytes)
	return errs.Err()
}

var knownGates = []string{GateDataLayer, GateEnableLegacyMetrics, GateFlowControl, GatePrepareDataPlugins}

// Load decodes, defaults, validates and builds a configuration. Every
// problem is reported at once in a *ValidationError.
func Load(data []byte, opts Options) (*Loaded, error) {
	if opts.Registry == nil {
		return nil, fmt.Errorf("load configuration: no plugin registry")
	}
	maxBytes := limitOr(opts.MaxConfigBytes, DefaultMaxConfigBytes)
	if len(data) > maxBytes {
		return nil, tooLarge(int64(len(data)), maxBytes)
	}
	errs := &errorList{}
	cfg := decode(data, maxBytes, errs)
	if cfg == nil {
		return nil, errs.Err()
	}
	if !checkLimits(cfg, opts, errs) {
		return nil, errs.Err()
	}
	l := &loader{
		opts:      opts,
		cfg:       cfg,
		errs:      errs,
		instances: map[string]scheduling.Plugin{},
		owned:     map[string]*instance{},
		failed:    map[string]bool{},
		specIndex: map[string]int{},
		hidden:    map[string]string{},
		out:       &Loaded{FeatureGates: map[string]bool{}, logger: opts.Logger},
	}
	if !l.selectionStrategy() {
		return nil, errs.Err()
	}
	l.handle = scheduling.NewHandle(scheduling.HandleOptions{Context: opts.Context, Logger: opts.Logger, Registerer: opts.Registerer, Seed: opts.Seed, APIVersion: cfg.APIVersion, ScrapeInterval: opts.ScrapeInterval})
	// The instances are found through the configuration from now on.
	defer l.handle.Seal()
	l.out.handle, l.out.owned = l.handle, l.owned
	l.header()
	l.instantiate()
	l.addProducers()
	l.defaultScheduling()
	if l.overrideProfilePickers() && l.errs.Len() == 0 {
		// The strategies added may consume data no configured plugin
		// produces yet.
		l.addProducers()
	}
	l.parser()
	l.saturationDetector()
	l.dataLayer()
	l.flowControl()
	sched := l.build()
	l.out.order = l.order
	if err := errs.Err(); err != nil {
		// Nothing this load built serves: close it, leaving the
		// instances it kept and the series Previous uses.
		l.out.Release(opts.Previous)
		return nil, err
	}
	l.fillParams()
	l.out.Config = cfg
	l.out.Scheduler = sched
	l.out.Plugins = l.instances
	return l.out, nil
}

// checkLimits refuses a configuration with more plugins, profiles or
// profile references than opts allow, before anything is built. It
// reports whether the configuration is within bounds.
func checkLimits(cfg *EndpointPickerConfig, opts Options, errs *errorList) bool {
	ok := true
	if n, limit := len(cfg.Plugins), limitOr(opts.MaxPlugins, DefaultMaxPlugins); n > limit {
		errs.Add("plugins", "%d instances exceed the limit of %d", n, limit)
		ok = false
	}
	if n, limit := len(cfg.SchedulingProfiles), limitOr(opts.MaxProfiles, DefaultMaxProfiles); n > limit {
		errs.Add("schedulingProfiles", "%d profiles exceed the limit of %d", n, limit)
		ok = false
	}
	limit := limitOr(opts.MaxProfilePlugins, DefaultMaxProfilePlugins)
	for i, prof := range cfg.SchedulingProfiles {
		if n := len(prof.Plugins); n > limit {
			errs.Add(field(index("schedulingProfiles", i), "plugins"), "%d plugin references exceed the limit of %d", n, limit)
			ok = false
		}
	}
	return ok
}

type loader struct {
	opts      Options
	cfg       *EndpointPickerConfig
	errs      *errorList
	handle    *scheduling.BasicHandle
	instances map[string]scheduling.Plugin
	owned     map[string]*instance
	order     []string          // instance names in configuration order
	failed    map[string]bool   // declared, but could not be built
	specIndex map[string]int    // name -> index in cfg.Plugins
	hidden    map[string]string // strategy instance -> the plugin it belongs to
	override  string            // canonical Options.SelectionStrategy
	out       *Loaded
}

func (l *loader) warn(format string, args ...any) {
	l.out.Warnings = append(l.out.Warnings, fmt.Sprintf(format, args...))
}

// label names a plugin instance in messages: plugins[3] "my-queue" (queue-scorer).
func (l *loader) label(name string) string {
	if parent, ok := l.hidden[name]; ok {
		return fmt.Sprintf("%s, strategy instance %q", l.label(parent), name)
	}
	i, ok := l.specIndex[name]
	if !ok {
		return fmt.Sprintf("plugin %q", name)
	}
	return fmt.Sprintf("plugins[%d] %q (%s)", i, name, l.cfg.Plugins[i].Type)
}

func (l *loader) header() {
	switch l.cfg.APIVersion {
	case APIVersionGIE, APIVersionLLMD:
	case "":
		l.errs.Add("apiVersion", "missing; use %q or %q", APIVersionGIE, APIVersionLLMD)
	default:
		l.errs.Add("apiVersion", "unsupported %q; use %q or %q", l.cfg.APIVersion, APIVersionGIE, APIVersionLLMD)
	}
	switch l.cfg.Kind {
	case Kind:
	case "":
		l.errs.Add("kind", "missing; use %q", Kind)
	default:
		l.errs.Add("kind", "unsupported %q; use %q", l.cfg.Kind, Kind)
	}
	for i, g := range l.cfg.FeatureGates {
		path := index("featureGates", i)
		switch {
		case !slices.Contains(knownGates, g):
			msg := fmt.Sprintf("unknown feature gate %q; known gates: %s", g, strings.Join(knownGates, ", "))
			if s := closest(g, knownGates); s != "" {
				msg = fmt.Sprintf("unknown feature gate %q (did you mean %q?)", g, s)
			}
			l.errs.Add(path, "%s", msg)
		default:
			l.out.FeatureGates[g] = true
		}
	}
}

// instantiate builds every declared plugin.
func (l *loader) instantiate() {
	for i := range l.cfg.Plugins {
		spec := &l.cfg.Plugins[i]
		path := index("plugins", i)
		if spec.Type == "" {
			l.errs.Add(field(path, "type"), "missing; every plugin needs a type")
			continue
		}
		if spec.Name == "" {
			spec.Name = spec.Type
		}
		if prev, dup := l.specIndex[spec.Name]; dup {
			l.errs.Add(field(path, "name"), "duplicate plugin name %q (also plugins[%d]); give each instance its own name", spec.Name, prev)
			continue
		}
		if parent, dup := l.hidden[spec.Name]; dup {
			l.errs.Add(field(path, "name"), "%q is the name of the strategy instance of %s; give this plugin another name", spec.Name, l.label(parent))
			continue
		}
		l.specIndex[spec.Name] = i
		l.construct(spec.Name, spec.Type, spec.Parameters)
	}
}

// construct builds one instance and reports its errors under its label.
func (l *loader) construct(name, pluginType string, params json.RawMessage) bool {
	ok, _ := l.constructAt(name, pluginType, params, site{label: l.label(name)})
	return ok
}

// site is where an instance's errors are reported: under the label of the
// configured plugin, with a prefix naming the parameter a nested strategy
// instance comes from ("strategyParameters: ").
type site struct {
	label, prefix string
	depth         int // nesting depth of strategy instances
}

// constructAt builds one instance (and first the strategy instances its
// parameters name) and reports its errors at s. It reports whether the
// instance exists afterwards and whether it is a new one (not kept from
// Options.Previous).
func (l *loader) constructAt(name, pluginType string, params json.RawMessage, s site) (ok, fresh bool) {
	reg, found := l.opts.Registry.Lookup(pluginType)
	if !found {
		l.failed[name] = true
		msg := fmt.Sprintf("unknown plugin type %q: Switchyard does not have it", pluginType)
		if sug := l.opts.Registry.Suggest(pluginType); len(sug) > 0 {
			msg += fmt.Sprintf(" (closest known types: %s)", strings.Join(sug, ", "))
		}
		l.errs.Add(s.label, "%s", msg)
		return false, false
	}
	if reg.Deprecated != "" {
		l.warn("%s: plugin type %q is deprecated: %s", s.label, pluginType, reg.Deprecated)
	}
	params, nested := l.strategies(name, pluginType, params, s)
	h := l.handle.ForInstance()
	// When a strategy instance could not be built (its error is
	// reported), the factory sees a stand-in, so that it still reports the
	// problems of its own parameters.
	label := s.label
	handle := stubHandle{InstanceHandle: h, stubs: nested.stubs, warn: func(msg string) { l.warn("%s: %s", label, msg) }}
	p, err := reg.Factory(name, params, handle)
	if err != nil {
		h.Cancel()
		l.failed[name] = true
		for _, e := range scheduling.Errors(err) {
			l.errs.Add(s.label, "parameters: %s%v", s.prefix, e)
		}
		return false, false
	}
	in := &instance{plugin: p, typ: p.TypedName().Type, cancel: h.Cancel}
	if len(nested.stubs) > 0 {
		in.close(l.opts.Logger, scheduling.CloseInfo{})
		l.failed[name] = true
		return false, false
	}
	fresh = true
	// An instance is kept only with the strategy instances it resolved.
	if old, keep := l.previous(name, pluginType); keep && !nested.fresh {
		// The duplicate was built to compare parameters; the kept
		// instance owns the name's series.
		in.close(l.opts.Logger, scheduling.CloseInfo{Successor: true, TypeServes: true})
		in, p = old, old.plugin
		l.out.Kept = append(l.out.Kept, name)
		fresh = false
	}
	l.handle.AddPlugin(name, p)
	l.owned[name] = in
	l.instances[name] = p
	l.order = append(l.order, name)
	return true, fresh
}

// previous returns the instance of the replaced configuration to keep in
// place of a new one: same name, same type, equal effective parameters.
func (l *loader) previous(name, pluginType string) (*instance, bool) {
	prev := l.opts.Previous
	if prev == nil || prev.handle == nil || prev.isReleased() {
		return nil, false
	}
	old, ok := prev.owned[name]
	if !ok || old.plugin.TypedName().Type != pluginType {
		return nil, false
	}
	oldParams, ok1 := prev.handle.Params(name)
	newParams, ok2 := l.handle.Params(name)
	if ok1 != ok2 || !reflect.DeepEqual(oldParams, newParams) {
		l.opts.Logger.V(1).Info("Plugin parameters changed; its state starts afresh", "plugin", name, "type", pluginType)
		return nil, false
	}
	return old, true
}

// addDefault adds an instance the configuration left out, named after its
// type, to the effective configuration. It reports whether the instance
// exists afterwards.
func (l *loader) addDefault(pluginType string, params json.RawMessage, why string) bool {
	if i, taken := l.specIndex[pluginType]; taken {
		if l.cfg.Plugins[i].Type == pluginType {
			return !l.failed[pluginType]
		}
		l.errs.Add(l.label(pluginType), "%s needs a %s plugin named %q, but this name is taken by a plugin of another type; rename it", why, pluginType, pluginType)
		return false
	}
	l.cfg.Plugins = append(l.cfg.Plugins, PluginSpec{Name: pluginType, Type: pluginType, Parameters: params})
	l.specIndex[pluginType] = len(l.cfg.Plugins) - 1
	return l.construct(pluginType, pluginType, params)
}

// addProducers instantiates the producer of every consumed key that no
// configured plugin produces, as GIE does for the prefix scorer. Consumers
// that pass parameters to their default producer (the prefix scorer passes
// its own) take precedence over those that take the producer's defaults
// (the prefix affinity filter), whatever the configuration order; among
// the former, the last one configured wins, as in GIE, with a warning when
// they disagree. A consumed key nobody produces is an error.
func (l *loader) addProducers() {
	produced := map[string]bool{}
	markProduced := func(name string) {
		if dp, ok := l.instances[name].(scheduling.DataProducer); ok {
			for _, k := range dp.Produces() {
				produced[k] = true
			}
		}
	}
	for _, name := range l.order {
		markProduced(name)
	}
	type proposal struct {
		consumer, key, ptype string
		params               []byte
	}
	var withParams, withoutParams []proposal
	consumers := slices.Clone(l.order)
	for _, name := range consumers {
		dc, ok := l.instances[name].(scheduling.DataConsumer)
		def, hasDefault := l.instances[name].(scheduling.DefaultProducer)
		if !ok || !hasDefault {
			continue
		}
		for _, key := range dc.Consumes() {
			if produced[key] {
				continue
			}
			if ptype, params, found := def.DefaultProducer(key); found {
				p := proposal{consumer: name, key: key, ptype: ptype, params: params}
				if len(params) > 0 {
					withParams = append(withParams, p)
				} else {
					withoutParams = append(withoutParams, p)
				}
			}
		}
	}
	slices.Reverse(withParams) // the last configured consumer wins
	chosen := map[string]proposal{}
	for _, p := range append(withParams, withoutParams...) {
		if prev, ok := chosen[p.key]; ok {
			if prev.ptype == p.ptype && len(p.params) > 0 && !jsonEqual(prev.params, p.params) {
				l.warn("%s: its parameters for the %s it needs are ignored: %s was configured later and its parameters are used", l.label(p.consumer), p.ptype, l.label(prev.consumer))
			}
			continue
		}
		chosen[p.key] = p
		if produced[p.key] {
			continue // created for an earlier key
		}
		if l.addDefault(p.ptype, p.params, l.label(p.consumer)) {
			markProduced(p.ptype)
		}
		if !produced[p.key] && !l.anyFailed() {
			l.errs.Add(l.label(p.consumer), "consumes %q, which its default producer %q does not produce", p.key, p.ptype)
		}
		produced[p.key] = true // report once
	}
	if l.anyFailed() {
		return // a plugin that failed may have been the producer: do not add noise
	}
	for _, name := range consumers {
		dc, ok := l.instances[name].(scheduling.DataConsumer)
		if !ok {
			continue
		}
		for _, key := range dc.Consumes() {
			if !produced[key] {
				l.errs.Add(l.label(name), "consumes %q, which no configured plugin produces; add a plugin that produces it", key)
				produced[key] = true // report once
			}
		}
	}
}

// jsonEqual reports whether two JSON documents hold the same value.
func jsonEqual(a, b []byte) bool {
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return bytes.Equal(a, b)
	}
	ja, _ := json.Marshal(va)
	jb, _ := json.Marshal(vb)
	return bytes.Equal(ja, jb)
}

func isSchedulingPlugin(p scheduling.Plugin) bool {
	switch p.(type) {
	case scheduling.Filter, scheduling.Scorer, scheduling.Picker:
		return true
	}
	return false
}

// defaultScheduling applies GIE's scheduling defaults: a default profile,
// the single profile handler, a picker for every profile, scorer weights.
func (l *loader) defaultScheduling() {
	if len(l.cfg.SchedulingProfiles) == 0 {
		prof := SchedulingProfile{Name: "default"}
		for _, name := range l.order {
			if _, hidden := l.hidden[name]; !hidden && isSchedulingPlugin(l.instances[name]) {
				prof.Plugins = append(prof.Plugins, SchedulingPlugin{PluginRef: name})
			}
		}
		l.cfg.SchedulingProfiles = []SchedulingProfile{prof}
	}
	if len(l.cfg.SchedulingProfiles) == 1 && len(l.handlers()) == 0 && !l.anyFailed() {
		l.addDefault(SingleProfileHandlerType, nil, "a single scheduling profile")
	}
	pickerName := ""
	for _, name := range l.order {
		if _, hidden := l.hidden[name]; hidden {
			continue
		}
		if _, ok := l.instances[name].(scheduling.Picker); ok {
			pickerName = name
			break
		}
	}
	for i := range l.cfg.SchedulingProfiles {
		prof := &l.cfg.SchedulingProfiles[i]
		hasPicker := false
		for j := range prof.Plugins {
			ref := &prof.Plugins[j]
			p := l.instances[ref.PluginRef]
			if _, ok := p.(scheduling.Scorer); ok && ref.Weight == nil {
				w := DefaultScorerWeight
				ref.Weight = &w
			}
			if _, ok := p.(scheduling.Picker); ok {
				hasPicker = true
			}
			if l.failed[ref.PluginRef] {
				hasPicker = true // unknown kind: do not add a picker beside it
			}
		}
		if hasPicker {
			continue
		}
		if pickerName == "" {
			if !l.addDefault(MaxScorePickerType, nil, fmt.Sprintf("schedulingProfiles[%d] without a picker", i)) {
				return
			}
			pickerName = MaxScorePickerType
		}
		prof.Plugins = append(prof.Plugins, SchedulingPlugin{PluginRef: pickerName})
	}
}

func (l *loader) anyFailed() bool { return len(l.failed) > 0 }

func (l *loader) handlers() []string {
	var out []string
	for _, name := range l.order {
		if _, ok := l.instances[name].(scheduling.ProfileHandler); ok {
			out = append(out, name)
		}
	}
	return out
}

func (l *loader) undefined(path, ref string) {
	if l.failed[ref] {
		return // its own error is already reported
	}
	names := make([]string, 0, len(l.specIndex))
	for n := range l.specIndex {
		names = append(names, n)
	}
	sort.Strings(names)
	msg := fmt.Sprintf("%q is not defined", ref)
	if s := closest(ref, names); s != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", s)
	} else {
		msg += " in plugins"
	}
	l.errs.Add(path, "%s", msg)
}

func (l *loader) parser() {
	if l.cfg.Parser == nil {
		l.cfg.Parser = &ParserConfig{PluginRef: OpenAIParserType}
	}
	ref := l.cfg.Parser.PluginRef
	if ref == "" {
		l.errs.Add("parser.pluginRef", "missing; name a parser plugin such as %q", OpenAIParserType)
		return
	}
	if _, ok := l.specIndex[ref]; !ok && ref == OpenAIParserType {
		l.addDefault(OpenAIParserType, nil, "the default parser")
	}
	p, ok := l.instances[ref]
	if !ok {
		l.undefined("parser.pluginRef", ref)
		return
	}
	parser, ok := p.(scheduling.Parser)
	if !ok {
		l.errs.Add("parser.pluginRef", "%s is not a parser", l.label(ref))
		return
	}
	l.out.Parser = parser
}

func (l *loader) saturationDetector() {
	sd := l.cfg.SaturationDetector
	if sd == nil {
		sd = &SaturationDetectorConfig{}
		l.cfg.SaturationDetector = sd
	}
	inline := sd.QueueDepthThreshold != nil || sd.KVCacheUtilThreshold != nil || sd.MetricsStalenessThreshold != ""
	if inline {
		if sd.PluginRef != "" {
			l.errs.Add("saturationDetector", "set either pluginRef or the inline thresholds of GIE v1.3/v1.4 (queueDepthThreshold, kvCacheUtilThreshold, metricsStalenessThreshold), not both")
			return
		}
		params := map[string]any{}
		if sd.QueueDepthThreshold != nil {
			params["queueDepthThreshold"] = *sd.QueueDepthThreshold
		}
		if sd.KVCacheUtilThreshold != nil {
			params["kvCacheUtilThreshold"] = *sd.KVCacheUtilThreshold
		}
		if sd.MetricsStalenessThreshold != "" {
			params["metricsStalenessThreshold"] = sd.MetricsStalenessThreshold
		}
		raw, _ := json.Marshal(params)
		l.warn("saturationDetector: the inline thresholds are GIE v1.3/v1.4 syntax; they now configure a %s plugin referenced by saturationDetector.pluginRef", UtilizationDetectorType)
		if !l.addDefault(UtilizationDetectorType, raw, "saturationDetector") {
			return
		}
		*sd = SaturationDetectorConfig{PluginRef: UtilizationDetectorType}
	}
	if sd.PluginRef == "" {
		sd.PluginRef = UtilizationDetectorType
	}
	if _, ok := l.specIndex[sd.PluginRef]; !ok && sd.PluginRef == UtilizationDetectorType {
		l.addDefault(UtilizationDetectorType, nil, "the default saturation detector")
	}
	p, ok := l.instances[sd.PluginRef]
	if !ok {
		l.undefined("saturationDetector.pluginRef", sd.PluginRef)
		return
	}
	det, ok := p.(scheduling.SaturationDetector)
	if !ok {
		l.errs.Add("saturationDetector.pluginRef", "%s is not a saturation detector", l.label(sd.PluginRef))
		return
	}
	l.out.SaturationDetector = det
}

func (l *loader) dataLayer() {
	if l.out.FeatureGates[GateEnableLegacyMetrics] {
		if l.cfg.DataLayer != nil {
			l.warn("dataLayer: ignored because the %s feature gate is on; metrics are scraped with the built-in vLLM mapping", GateEnableLegacyMetrics)
			l.cfg.DataLayer = nil
		}
		return
	}
	if l.cfg.DataLayer == nil {
		okSrc := l.addDefault(MetricsDataSourceType, nil, "the default data layer")
		okExt := l.addDefault(CoreMetricsExtractorType, nil, "the default data layer")
		if !okSrc || !okExt {
			return
		}
		l.cfg.DataLayer = &DataLayerConfig{Sources: []DataLayerSource{{
			PluginRef:  MetricsDataSourceType,
			Extractors: []DataLayerExtractor{{PluginRef: CoreMetricsExtractorType}},
		}}}
	}
	if len(l.cfg.DataLayer.Sources) == 0 {
		l.warn("dataLayer: no sources, so no model-server metrics are collected: scorers and detectors that read queue, KV cache or LoRA metrics see none (omit dataLayer to get the default metrics source)")
	}
	for i, src := range l.cfg.DataLayer.Sources {
		spath := index("dataLayer.sources", i)
		binding := DataSourceBinding{}
		p, ok := l.instances[src.PluginRef]
		switch {
		case src.PluginRef == "":
			l.errs.Add(field(spath, "pluginRef"), "missing")
		case !ok:
			l.undefined(field(spath, "pluginRef"), src.PluginRef)
		default:
			ds, isDS := p.(scheduling.DataSource)
			if !isDS {
				l.errs.Add(field(spath, "pluginRef"), "%s is not a data source", l.label(src.PluginRef))
			}
			binding.Source = ds
		}
		for j, ext := range src.Extractors {
			epath := index(field(spath, "extractors"), j) + ".pluginRef"
			p, ok := l.instances[ext.PluginRef]
			switch {
			case ext.PluginRef == "":
				l.errs.Add(epath, "missing")
			case !ok:
				l.undefined(epath, ext.PluginRef)
			default:
				de, isDE := p.(scheduling.DataExtractor)
				if !isDE {
					l.errs.Add(epath, "%s is not a data extractor", l.label(ext.PluginRef))
					continue
				}
				binding.Extractors = append(binding.Extractors, de)
			}
		}
		if binding.Source != nil {
			l.out.DataSources = append(l.out.DataSources, binding)
		}
	}
}

// build validates the profiles and assembles the scheduler.
func (l *loader) build() *scheduling.Scheduler {
	metrics, err := scheduling.NewFrameworkMetrics(l.handle.Registerer())
	if err != nil {
		l.errs.Add("", "register framework metrics: %v", err)
		return nil
	}
	l.out.metrics = metrics
	var profiles []*scheduling.Profile
	seen := map[string]int{}
	for i, prof := range l.cfg.SchedulingProfiles {
		path := index("schedulingProfiles", i)
		if prof.Name == "" {
			l.errs.Add(field(path, "name"), "missing; every profile needs a name")
		} else if prev, dup := seen[prof.Name]; dup {
			l.errs.Add(field(path, "name"), "duplicate profile name %q (also schedulingProfiles[%d])", prof.Name, prev)
		}
		seen[prof.Name] = i
		var (
			filters   []scheduling.Filter
			scorers   []scheduling.WeightedScorer
			picker    scheduling.Picker
			pickerRef string
			broken    bool
		)
		for j, ref := range prof.Plugins {
			rpath := index(field(path, "plugins"), j)
			if ref.PluginRef == "" {
				l.errs.Add(field(rpath, "pluginRef"), "missing")
				broken = true
				continue
			}
			if ref.Weight != nil && *ref.Weight < 0 {
				l.errs.Add(field(rpath, "weight"), "must be >= 0, got %v", *ref.Weight)
				broken = true
			}
			p, ok := l.instances[ref.PluginRef]
			if parent, hidden := l.hidden[ref.PluginRef]; hidden {
				l.errs.Add(field(rpath, "pluginRef"), "%q is the strategy instance of %s, which profiles do not reference; reference %q", ref.PluginRef, l.label(parent), parent)
				broken = true
				continue
			}
			if !ok {
				l.undefined(field(rpath, "pluginRef"), ref.PluginRef)
				broken = true
				continue
			}
			used := false
			if f, ok := p.(scheduling.Filter); ok {
				filters = append(filters, f)
				used = true
			}
			if s, ok := p.(scheduling.Scorer); ok {
				w := DefaultScorerWeight
				if ref.Weight != nil {
					w = *ref.Weight
				}
				scorers = append(scorers, scheduling.WeightedScorer{Scorer: s, Weight: w})
				used = true
			} else if ref.Weight != nil {
				l.warn("%s.weight: ignored: %s is not a scorer", rpath, l.label(ref.PluginRef))
			}
			if pk, ok := p.(scheduling.Picker); ok {
				if picker != nil {
					l.errs.Add(field(rpath, "pluginRef"), "%s is a second picker in profile %q (the first is %q); a profile has exactly one picker", l.label(ref.PluginRef), prof.Name, pickerRef)
					broken = true
				} else {
					picker, pickerRef = pk, ref.PluginRef
				}
				used = true
			}
			if !used {
				l.warn("%s.pluginRef: %s is not a filter, scorer or picker; it has no effect in a profile", rpath, l.label(ref.PluginRef))
			}
		}
		if broken || picker == nil {
			continue
		}
		p, err := scheduling.NewProfile(prof.Name, filters, scorers, picker, metrics)
		if err != nil {
			l.errs.Add(path, "%v", err)
			continue
		}
		profiles = append(profiles, p)
	}

	handlers := l.handlers()
	switch {
	case len(handlers) > 1:
		l.errs.Add("plugins", "more than one profile handler (%s); configure exactly one", strings.Join(handlers, ", "))
	case len(handlers) == 0 && len(l.cfg.SchedulingProfiles) > 1:
		l.errs.Add("schedulingProfiles", "%d profiles need a profile handler plugin, and none is configured", len(l.cfg.SchedulingProfiles))
	case len(handlers) == 1 && len(l.cfg.SchedulingProfiles) > 1:
		if t := l.instances[handlers[0]].TypedName().Type; t == SingleProfileHandlerType {
			l.errs.Add("schedulingProfiles", "%s runs exactly one profile, but %d are configured; use a handler that supports several", l.label(handlers[0]), len(l.cfg.SchedulingProfiles))
		}
	}
	if l.errs.Len() > 0 {
		return nil
	}

	cfg := scheduling.SchedulerConfig{
		ProfileHandler:     l.instances[handlers[0]].(scheduling.ProfileHandler),
		Profiles:           profiles,
		SaturationDetector: l.out.SaturationDetector,
		Metrics:            metrics,
	}
	for _, name := range l.order {
		p := l.instances[name]
		if v, ok := p.(scheduling.DataProducer); ok {
			cfg.Producers = append(cfg.Producers, v)
		}
		if v, ok := p.(scheduling.Admitter); ok {
			cfg.Admitters = append(cfg.Admitters, v)
		}
		if v, ok := p.(scheduling.PreRequest); ok {
			cfg.PreRequest = append(cfg.PreRequest, v)
		}
		if v, ok := p.(scheduling.ResponseReceived); ok {
			cfg.ResponseReceived = append(cfg.ResponseReceived, v)
		}
		if v, ok := p.(scheduling.ResponseStreaming); ok {
			cfg.ResponseStreaming = append(cfg.ResponseStreaming, v)
		}
		if v, ok := p.(scheduling.ResponseComplete); ok {
			cfg.ResponseComplete = append(cfg.ResponseComplete, v)
		}
	}
	s, err := scheduling.NewScheduler(cfg)
	if err != nil {
		l.errs.Add("plugins", "%v", err)
		return nil
	}
	return s
}

// fillParams writes each instance's effective parameters (defaults
// applied) into the effective configuration.
func (l *loader) fillParams() {
	for i := range l.cfg.Plugins {
		spec := &l.cfg.Plugins[i]
		p, ok := l.handle.Params(spec.Name)
		if !ok {
			continue
		}
		raw, err := json.Marshal(p)
		if err != nil || string(raw) == "{}" {
			continue
		}
		spec.Parameters = l.effectiveNested(spec.Name, spec.Type, raw)
	}
}
