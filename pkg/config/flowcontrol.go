package config

import (
	"math"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/switchyard-ai/switchyard/pkg/flowcontrol"
)

// Flow-control plugin types the loader adds when the flowControl section
// leaves them out, as GIE v1.5 does.
const (
	FCFSOrderingPolicyType         = "fcfs-ordering-policy"
	GlobalStrictFairnessPolicyType = "global-strict-fairness-policy"
	StaticUsageLimitPolicyType     = "static-usage-limit-policy"
)

// DefaultPriorityBandMaxBytes is GIE v1.5's byte limit of a band whose
// maxBytes is unset or 0.
const DefaultPriorityBandMaxBytes = 1_000_000_000

// MaxPriorityBands bounds flowControl.priorityBands (and, as
// flowcontrol.Config.MaxBands, the bands created for other priorities).
const MaxPriorityBands = flowcontrol.DefaultMaxBands

// flowControl checks the flowControl section and, with its gate on,
// builds Loaded.FlowControl and fills the section's defaults into the
// effective configuration. Without the gate the section is ignored, as in
// GIE, after its syntax is checked (GIE's strict decoding refuses a bad
// quantity or duration there too).
func (l *loader) flowControl() {
	fc := l.cfg.FlowControl
	gate := slices.Contains(l.cfg.FeatureGates, GateFlowControl)
	if !gate {
		if fc != nil {
			l.warn("flowControl: ignored because the %s feature gate is off (as in GIE)", GateFlowControl)
			l.flowControlSyntax(fc)
		}
		return
	}
	if fc == nil {
		fc = &FlowControlConfig{}
		l.cfg.FlowControl = fc
	}
	out := &flowcontrol.Config{MaxBands: MaxPriorityBands}
	maxBytes, _ := l.quantityValue("flowControl.maxBytes", fc.MaxBytes)
	maxRequests, _ := l.quantityValue("flowControl.maxRequests", fc.MaxRequests)
	out.MaxBytes, out.MaxRequests = uint64(maxBytes), uint64(maxRequests)
	ttl, ok := l.durationValue("flowControl.defaultRequestTTL", fc.DefaultRequestTTL)
	out.DefaultRequestTTL = ttl
	if ok {
		fc.DefaultRequestTTL = ttl.String()
	}
	if fc.NoEndpointRequestTTL == "" {
		out.NoEndpointRequestTTL = ttl
		if ok {
			fc.NoEndpointRequestTTL = ttl.String()
		}
	} else if d, ok := l.durationValue("flowControl.noEndpointRequestTTL", fc.NoEndpointRequestTTL); ok {
		out.NoEndpointRequestTTL = d
		fc.NoEndpointRequestTTL = d.String()
	}
	if fc.DefaultPriorityBand == nil {
		fc.DefaultPriorityBand = &PriorityBandConfig{}
	}
	out.DefaultBand = l.flowBand("flowControl.defaultPriorityBand", fc.DefaultPriorityBand)
	if fc.DefaultNegativePriorityBand != nil {
		b := l.flowBand("flowControl.defaultNegativePriorityBand", fc.DefaultNegativePriorityBand)
		out.DefaultNegativeBand = &b
	}
	if n := len(fc.PriorityBands); n > MaxPriorityBands {
		l.errs.Add("flowControl.priorityBands", "%d bands exceed the limit of %d", n, MaxPriorityBands)
	}
	seen := map[int]int{}
	for i := range fc.PriorityBands {
		b := &fc.PriorityBands[i]
		path := index("flowControl.priorityBands", i)
		if prev, dup := seen[b.Priority]; dup {
			l.errs.Add(field(path, "priority"), "duplicate priority %d (also priorityBands[%d])", b.Priority, prev)
			continue
		}
		seen[b.Priority] = i
		out.Bands = append(out.Bands, l.flowBand(path, b))
	}
	if fc.UsageLimitPolicyPluginRef == "" {
		fc.UsageLimitPolicyPluginRef = StaticUsageLimitPolicyType
	}
	if p, ok := l.flowPlugin("flowControl.usageLimitPolicyPluginRef", fc.UsageLimitPolicyPluginRef, StaticUsageLimitPolicyType, "the default usage-limit policy"); ok {
		if u, ok := p.(flowcontrol.UsageLimitPolicy); ok {
			out.UsageLimit = u
		} else {
			l.errs.Add("flowControl.usageLimitPolicyPluginRef", "%s is not a usage-limit policy (such as %s)", l.label(fc.UsageLimitPolicyPluginRef), StaticUsageLimitPolicyType)
		}
	}
	l.out.FlowControl = out
}

// flowBand resolves one band (or band template) and fills its defaults.
func (l *loader) flowBand(path string, b *PriorityBandConfig) flowcontrol.BandConfig {
	out := flowcontrol.BandConfig{Priority: b.Priority}
	if v, ok := l.quantityValue(field(path, "maxBytes"), b.MaxBytes); ok {
		if v == 0 {
			v = DefaultPriorityBandMaxBytes
			b.MaxBytes = resource.NewQuantity(v, resource.DecimalSI).String()
		}
		out.MaxBytes = uint64(v)
	}
	if v, ok := l.quantityValue(field(path, "maxRequests"), b.MaxRequests); ok {
		out.MaxRequests = uint64(v)
	}
	if b.FairnessPolicyRef == "" {
		b.FairnessPolicyRef = GlobalStrictFairnessPolicyType
	}
	if p, ok := l.flowPlugin(field(path, "fairnessPolicyRef"), b.FairnessPolicyRef, GlobalStrictFairnessPolicyType, "the default fairness policy"); ok {
		if f, ok := p.(flowcontrol.FairnessPolicy); ok {
			out.Fairness = f
		} else {
			l.errs.Add(field(path, "fairnessPolicyRef"), "%s is not a fairness policy (such as %s or round-robin-fairness-policy)", l.label(b.FairnessPolicyRef), GlobalStrictFairnessPolicyType)
		}
	}
	if b.OrderingPolicyRef == "" {
		b.OrderingPolicyRef = FCFSOrderingPolicyType
	}
	if p, ok := l.flowPlugin(field(path, "orderingPolicyRef"), b.OrderingPolicyRef, FCFSOrderingPolicyType, "the default ordering policy"); ok {
		if o, ok := p.(flowcontrol.OrderingPolicy); ok {
			out.Ordering = o
		} else {
			l.errs.Add(field(path, "orderingPolicyRef"), "%s is not an ordering policy (such as %s, edf-ordering-policy or slo-deadline-ordering-policy)", l.label(b.OrderingPolicyRef), FCFSOrderingPolicyType)
		}
	}
	return out
}

// flowPlugin returns the instance ref names, adding the default instance
// (named after its type, as GIE does) when ref is that type and the
// configuration does not declare it.
func (l *loader) flowPlugin(path, ref, defaultType, why string) (any, bool) {
	if _, declared := l.specIndex[ref]; !declared && ref == defaultType {
		if !l.addDefault(defaultType, nil, why) {
			return nil, false
		}
	}
	p, ok := l.instances[ref]
	if !ok {
		l.undefined(path, ref)
		return nil, false
	}
	return p, true
}

// maxQuantity bounds quantities (bytes or requests) to what fits an int64.
var maxQuantity = resource.NewQuantity(math.MaxInt64, resource.DecimalSI)

// quantityValue parses a Kubernetes quantity (empty is 0), rounding a
// fraction up as GIE does.
func (l *loader) quantityValue(path, q string) (int64, bool) {
	if q == "" {
		return 0, true
	}
	v, err := resource.ParseQuantity(q)
	switch {
	case err != nil:
		l.errs.Add(path, "invalid quantity %q: use a Kubernetes quantity such as 10Gi or 5k", q)
		return 0, false
	case v.Sign() < 0:
		l.errs.Add(path, "must be >= 0, got %s", q)
		return 0, false
	case v.Cmp(*maxQuantity) > 0:
		l.errs.Add(path, "%s is too large (at most %d)", q, int64(math.MaxInt64))
		return 0, false
	}
	return v.Value(), true
}

// durationValue parses a Go duration (empty is 0).
func (l *loader) durationValue(path, s string) (time.Duration, bool) {
	if s == "" {
		return 0, true
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		l.errs.Add(path, "invalid duration %q: use e.g. 60s", s)
		return 0, false
	case d < 0:
		l.errs.Add(path, "must be >= 0, got %s", s)
		return 0, false
	}
	return d, true
}

// flowControlSyntax checks the values of a section the gate leaves off.
func (l *loader) flowControlSyntax(fc *FlowControlConfig) {
	l.quantityValue("flowControl.maxBytes", fc.MaxBytes)
	l.quantityValue("flowControl.maxRequests", fc.MaxRequests)
	l.durationValue("flowControl.defaultRequestTTL", fc.DefaultRequestTTL)
	l.durationValue("flowControl.noEndpointRequestTTL", fc.NoEndpointRequestTTL)
	band := func(path string, b *PriorityBandConfig) {
		l.quantityValue(field(path, "maxBytes"), b.MaxBytes)
		l.quantityValue(field(path, "maxRequests"), b.MaxRequests)
	}
	if fc.DefaultPriorityBand != nil {
		band("flowControl.defaultPriorityBand", fc.DefaultPriorityBand)
	}
	if fc.DefaultNegativePriorityBand != nil {
		band("flowControl.defaultNegativePriorityBand", fc.DefaultNegativePriorityBand)
	}
	seen := map[int]int{}
	for i := range fc.PriorityBands {
		path := index("flowControl.priorityBands", i)
		if prev, dup := seen[fc.PriorityBands[i].Priority]; dup {
			l.errs.Add(field(path, "priority"), "duplicate priority %d (also priorityBands[%d])", fc.PriorityBands[i].Priority, prev)
		}
		seen[fc.PriorityBands[i].Priority] = i
		band(path, &fc.PriorityBands[i])
	}
}
