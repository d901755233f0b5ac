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
//  1. DataProducer plugins compute per-request data (for example which
//     endpoints hold the prompt's prefix). They run in the order their
//     declared dependencies require: a producer that consumes a key runs
//     after the producer of that key.
//  2. Admitter plugins may refuse the request with an HTTP status code and a
//     reason; a configured SaturationDetector sheds sheddable requests
//     (priority < 0) when the pool is saturated.
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
