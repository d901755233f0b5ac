//go:build !bench

package quality

import (
	"testing"

	"go.uber.org/goleak"
)

// The leak check covers the unit tests; the bench-tagged driver runs a
// control plane whose client libraries keep background goroutines.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
