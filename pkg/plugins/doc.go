// Package plugins holds Switchyard's in-tree plugins, one folder each under
// filter/, scorer/, picker/, profile/, producer/, saturation/, admitter/
// (admission before any profile), health/ (eligibility: active health
// checks, circuit breaking), datalayer/ and parser/, and InTree, the one
// list that registers them.
//
// # Adding a plugin
//
//  1. Make a folder pkg/plugins/<kind>/<name>/ (one lowercase word).
//  2. In <name>.go declare Type (kebab-case, ending in its kind), Params
//     with json tags and field comments written for users, DefaultParams,
//     Params.Validate reporting every problem with its field path, New,
//     the extension-point methods, a Registration built with
//     scheduling.Typed, and interface guards at the end.
//  3. Add <name>_test.go (parameters table through the Registration's
//     factory, behaviour tables) and <name>_bench_test.go (10, 100 and
//     1000 endpoints, b.ReportAllocs).
//  4. Write README.md with the sections Type, Description, Parameters,
//     Metrics and Example (a complete EndpointPickerConfig; a test loads it).
//  5. Add one line to InTree in registry.go.
//
// Plugins import pkg/scheduling, never each other: data they share goes
// through the well-known StateKeys of pkg/scheduling. Code shared by the
// plugins of one kind lives in that kind's internal/ folder (for example
// picker/internal/pick), which only those plugins may import.
package plugins
