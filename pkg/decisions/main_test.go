package decisions

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that the tests' writers and readers all end.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
