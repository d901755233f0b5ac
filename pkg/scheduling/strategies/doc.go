// Package strategies is the one table of Switchyard's selection strategies
// (the Continuum Router's selection_strategy values): their canonical
// names, the picker plugin type that implements each, and Parse, which
// reads a name as users write it. The configuration loader, cmd/epp (the
// --selection-strategy flag and the SWITCHYARD_SELECTION_STRATEGY
// variable) and the strategy-picker share it, so that a name means the
// same everywhere.
//
// A strategy is an ordinary picker type; the strategy-picker runs one of
// them after the profile's scorers (see pkg/plugins/picker/strategy).
//
// The package imports only the standard library, so any package may
// import it.
package strategies
