package objectives

import (
	"maps"
	"slices"
	"sync/atomic"
)

// MaxObjectives bounds the objectives of one table.
const MaxObjectives = 10000

// Table maps objective names to priorities. It is immutable.
type Table struct {
	m map[string]int
}

// NewTable builds a table from a name → priority map (copied).
func NewTable(m map[string]int) *Table {
	return &Table{m: maps.Clone(m)}
}

// Priority returns the priority of the named objective.
func (t *Table) Priority(name string) (int, bool) {
	if t == nil {
		return 0, false
	}
	p, ok := t.m[name]
	return p, ok
}

// Len returns the number of objectives.
func (t *Table) Len() int {
	if t == nil {
		return 0
	}
	return len(t.m)
}

// Names returns the objective names, sorted.
func (t *Table) Names() []string {
	if t == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(t.m))
}

// Equal reports whether two tables hold the same objectives.
func (t *Table) Equal(o *Table) bool {
	if t.Len() != o.Len() {
		return false
	}
	for k, v := range t.m {
		if ov, ok := o.m[k]; !ok || ov != v {
			return false
		}
	}
	return true
}

// Set publishes the current table. Its zero value holds an empty table
// and is ready to use; it is safe for concurrent use.
type Set struct {
	cur     atomic.Pointer[Table]
	changed atomic.Pointer[func(*Table)]
}

// NewSet returns an empty Set.
func NewSet() *Set { return &Set{} }

// Lookup returns the priority of the named objective; it is
// extproc.Options.Objective.
func (s *Set) Lookup(name string) (int, bool) {
	return s.cur.Load().Priority(name)
}

// Table returns the current table (nil means empty).
func (s *Set) Table() *Table { return s.cur.Load() }

// Store publishes t; requests read it from the next lookup on.
func (s *Set) Store(t *Table) {
	s.cur.Store(t)
	if f := s.changed.Load(); f != nil {
		(*f)(t)
	}
}

// OnChange registers f, called after every Store (by the source's
// goroutine); one function, a later call replaces it.
func (s *Set) OnChange(f func(*Table)) { s.changed.Store(&f) }
