package scheduling

// StateKey is a typed name for per-request data kept on a Request. Data
// producers write it; filters, scorers and request hooks read it. Keys are
// compared by name, so two plugins that agree on the name and type share
// the data without importing each other.
type StateKey[T any] struct{ name string }

// NewStateKey returns a typed state key.
func NewStateKey[T any](name string) StateKey[T] { return StateKey[T]{name: name} }

// Name returns the key's name; data producers and consumers declare it.
func (k StateKey[T]) Name() string { return k.name }

// Get returns the request's value for the key, if set.
func (k StateKey[T]) Get(r *Request) (T, bool) {
	r.mu.Lock()
	v, ok := r.state[k.name].(T)
	r.mu.Unlock()
	return v, ok
}

// Set stores the request's value for the key.
func (k StateKey[T]) Set(r *Request, v T) {
	r.mu.Lock()
	if r.state == nil {
		r.state = make(map[string]any, 4)
	}
	r.state[k.name] = v
	r.mu.Unlock()
}

// Delete removes the request's value for the key.
func (k StateKey[T]) Delete(r *Request) {
	r.mu.Lock()
	delete(r.state, k.name)
	r.mu.Unlock()
}
