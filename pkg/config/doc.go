// Package config loads EndpointPickerConfig files, the configuration format
// of the GIE v1.5 and llm-d endpoint pickers, so that their existing files
// load unchanged.
//
// # Loading
//
// Load decodes a YAML or JSON document strictly (an unknown key is an
// error), instantiates every plugin through the registry, applies GIE's
// defaulting rules (instance names, a default profile, the single profile
// handler, a max-score picker, scorer weight 1, the openai parser, the
// utilization saturation detector, the metrics data layer, and producers the
// configured consumers need), validates cross references, and builds the
// scheduler. It reports every problem at once, each with its field path, as
// a *ValidationError.
//
// # Switchyard's own blocks
//
// Beside GIE's schema the document may hold `availability`, the
// multi-site availability settings (pkg/multisite/learner.Settings:
// shedding, smoothing, ceilingHalfLifeMs, ceilingFloor, exploreFloor,
// fullAfterMs, roomAfterMs, queueFull, freshnessWindowMs, the seed's
// snake_case names spelled camelCase). Nothing in it needs setting: an
// absent key keeps its default, the loaded configuration shows the block
// with every value in effect, and Loaded.AvailabilitySettings returns the
// defaults without a block (availability.go).
//
// # Bounds
//
// Start-up, hot reload and `epp validate` all go through Load, which
// refuses, before building anything: a document over Options.MaxConfigBytes
// (DefaultMaxConfigBytes, 1 MiB: what a ConfigMap holds), checked before
// decoding and again for its size once YAML aliases are expanded, so that a
// small document cannot expand into a huge one; more plugin instances than
// MaxPlugins (512), more profiles than MaxProfiles (64), and more plugin
// references in one profile than MaxProfilePlugins (128). The errors name
// the field and the limit (`plugins: 1300 instances exceed the limit of
// 512`). ReadFile reads a file up to the limit and no further.
//
// # Reloads and plugin lifecycle
//
// With Options.Previous, Load keeps the previous configuration's instances
// whose name, type and effective parameters did not change, and closes the
// duplicates it built to find out. Each instance has its own context, a
// child of Options.Context. After the host swapped configurations it calls
// Release on the old one with the new one: every instance the new one did
// not keep has its context cancelled and its Close called (see Lifecycle in
// pkg/scheduling), and the plugin_duration_seconds series no configuration
// uses any more are deleted; the series of a name rebuilt under the same
// type stay live. A failed Load releases what it built against Previous
// itself; a configuration the host refuses after loading it is released
// against the one that keeps serving; Close releases all at shutdown.
//
// # Selection strategies
//
// A strategy-picker (strategy, strategyParameters) and an
// engine-load-picker (baseStrategy, baseStrategyParameters) name a
// selection strategy of pkg/scheduling/strategies. Before building such a
// plugin N, the loader builds the strategy's picker type from the
// strategy's parameters, plus N's maxNumOfEndpoints, as a hidden instance
// named N/strategy (N/base), which N's factory finds with Handle.Plugin;
// an EngineLoad strategy has its base in turn (N/strategy/base). Errors of
// a strategy instance are N's, under the field they come from
// (`plugins[3] "p" (strategy-picker): parameters: strategyParameters:
// virtualNodes: must be 1..1000, got 0`); N's other problems are reported
// with them. Hidden instances are not listed under plugins in the
// effective configuration: their effective parameters, defaults filled
// in, appear inside N's. Profiles cannot reference them. A reload keeps a
// strategy instance whose type and parameters did not change, and keeps N
// only with the strategy instances it resolved; the replaced ones are
// released with the configuration.
//
// Options.SelectionStrategy (epp's --selection-strategy, else
// SWITCHYARD_SELECTION_STRATEGY) overrides the strategy of every
// strategy-picker (dropping the file's strategyParameters when it names
// another strategy: they were written for the file's). In a configuration without one (every GIE and llm-d
// configuration) it replaces each profile's picker with a strategy-picker
// of that strategy, named strategy-picker (strategy-picker-<profile> with
// several profiles), that keeps the replaced picker's maxNumOfEndpoints:
// the profile's scorers still decide when one endpoint scores clearly
// highest. Loaded.Notes say what changed; the loader logs them at
// start-up, then on a reload only the ones Options.Previous did not have.
// Without the option and without a strategy-picker the loader builds
// exactly what it built before strategies existed (a golden test holds it
// to that for the default and the GIE v1.5 configurations).
//
// # Switchyard's own top-level sections
//
// Besides GIE's schema the document may hold fallbackChains (a model → the
// ordered models a retryably refused request is scheduled for next; no
// self, duplicate or cyclic entries, at most MaxFallbackChainLength per
// chain, each problem under fallbackChains["model"][i]) and prefixRouting
// (anthropicCacheControlInjection, C-18). Both are decoded as strictly as
// the rest (fallback.go), render in the effective configuration, and are
// read by the server, not by plugins.
//
// # Flow control
//
// With the flowControl feature gate, the flowControl section (GIE v1.5's
// maxBytes, maxRequests, defaultRequestTTL, defaultPriorityBand,
// priorityBands and usageLimitPolicyPluginRef, and llm-d's
// noEndpointRequestTTL and defaultNegativePriorityBand) becomes
// Loaded.FlowControl, a pkg/flowcontrol Config whose policies are plugin
// instances: each fairnessPolicyRef, orderingPolicyRef and
// usageLimitPolicyPluginRef names a plugin of that kind, and the defaults
// (global-strict-fairness-policy, fcfs-ordering-policy,
// static-usage-limit-policy) are added under their type names when the
// configuration does not declare them, as GIE does. GIE's defaults apply:
// no global limit, a band byte limit of 1G (also for 0), no request limit,
// no TTL but the client's; noEndpointRequestTTL follows defaultRequestTTL.
// The effective configuration shows them all. Without the gate the section
// is ignored with a warning, as in GIE, after its values are checked.
//
// # Who imports it
//
// cmd/epp and the server. It imports pkg/scheduling and pkg/flowcontrol
// and takes the plugin registry as an argument, so it never imports a
// plugin.
package config
