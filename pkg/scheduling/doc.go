// Package scheduling is Switchyard's scheduling framework: the plugin
// interfaces, the request and endpoint views plugins see, the plugin
// registry and parameter decoding, and the engine that runs scheduling
// profiles. It imports no plugin; in-tree plugins live under pkg/plugins and
// out-of-tree plugins import this package the same way.
//
// # Extension points
//
// A request is scheduled in this order (see Scheduler):
//
//  0. Before the Scheduler, with multi-site on, the host's site stage
//     (pkg/multisite/sitestage, called by pkg/extproc) chooses the
//     request's site from the learner's site snapshot. Only a request
//     for the local site reaches the steps below, with every profile
//     seeing the same local candidates; a request for another site goes
//     to that site's gateway and is not scheduled here. The stage is the
//     host's, not a plugin: it must run once per request, before any
//     profile, and choose among destinations that are not endpoints. It
//     sets Request.SkipSaturationShedding, so step 2's saturation
//     shedding does not refuse what the stage routed (its own shedding
//     rule refuses instead).
//  1. DataProducer plugins compute per-request data (for example which
//     endpoints hold the prompt's prefix). They run in the order their
//     declared dependencies require: a producer that consumes a key runs
//     after the producer of that key.
//  2. Admitter plugins may refuse the request with an HTTP status code and a
//     reason; a configured SaturationDetector sheds sheddable requests
//     (priority < 0) when the pool is saturated (not with
//     Request.SkipSaturationShedding).
//  3. The ProfileHandler chooses which profiles run, possibly in several
//     rounds, and which profile's result is the primary one.
//  4. Each profile runs its Filters in order (each narrows the candidate
//     list), adds clamp(score, 0, 1) × weight for every Scorer (weights are
//     raw multipliers, not normalised, as in GIE), and lets its Picker choose.
//  5. PreRequest plugins see the result before the request is forwarded.
//  6. ResponseReceived (headers), ResponseStreaming (each body chunk) and
//     ResponseComplete (exactly once per scheduled request, also when the
//     client disconnects) follow the response.
//
// # Writing a plugin
//
// A plugin is a type with TypedName and one or more extension-point
// methods. Its package declares a Type constant (kebab-case, ending in its
// kind), a Params struct with a DefaultParams function and, if needed, a
// Validate method that reports every problem prefixed with its JSON field
// name, and a Registration whose Factory is built with Typed. Typed applies
// defaults, decodes parameters strictly (an unknown key is an error), runs
// Validate and then the constructor.
//
// # Lifecycle
//
// The configuration loader builds every instance with a Handle of its own
// whose Context is a child of the loader's context. A reload builds the
// new configuration beside the serving one and keeps each instance whose
// name, type and effective parameters did not change (with its state and
// its Context); the duplicate it built to compare parameters is discarded.
// Each dropped instance has its Context cancelled and, if it implements
// Closer, Close called exactly once:
//
//   - when the configuration that replaced it is serving (after the
//     server swapped configurations), for every instance the new
//     configuration did not keep;
//   - at once, for a duplicate discarded in favour of a kept instance;
//   - when a load fails (or the host refuses a loaded configuration), for
//     every instance that load built;
//   - at shutdown, for every instance of the serving configuration.
//
// CloseInfo.Successor says whether an instance of the same name and type
// serves instead (a rebuilt instance, the kept original of a discarded
// duplicate, the serving instance beside a failed load): series labelled
// with the name then stay, since the successor resolved the same
// children; otherwise the plugin deletes them. CloseInfo.TypeServes says
// whether any instance of the same type serves on (under any name): state
// that every instance of a type shares on the endpoints (the circuit
// breaker's) is then left to it.
//
// A plugin with background work implements Runner: the host calls Run,
// with a RunEnv over the whole pool, once the configuration that holds it
// serves, and ends it before Close. A plugin that only needs to see the
// whole pool beside a request's candidates (an Admitter that tells "not
// served here" from "not available now") embeds PoolWatcher, which makes
// it a Runner that keeps the RunEnv. Host settings plugins adapt to (the
// metrics scrape interval, ScrapeIntervalOf) come with the Handle
// (HandleOptions, HostSettings).
//
// Requests that started on the old configuration finish on it, so they
// may call an instance during and after Close: it must stay safe (no
// panic, no blocking, no leak) and should stop growing state and updating
// series. Close must release what the garbage collector cannot, or
// should not wait for while such requests hold the old configuration:
// goroutines (stop them through the Context or in Close), metric series
// labelled with the instance (unless Successor), and large caches or
// indexes. The framework's own plugin_duration_seconds series are
// reference-counted by FrameworkMetrics and deleted when no serving
// configuration uses their labels any more.
//
// # Concurrency
//
// Plugins are called concurrently for different requests. Endpoint and the
// Metrics it carries are immutable snapshots: plugins must not modify them.
// Per-request data is kept on the Request with typed StateKeys. The request
// path does no network I/O and takes no lock shared by all requests.
//
// # Metrics
//
// The framework records inference_extension_plugin_duration_seconds with
// the labels extension_point, plugin_type and plugin_name on the registerer
// given by the Handle; plugins register their own collectors there too,
// never on the global default registry.
package scheduling
