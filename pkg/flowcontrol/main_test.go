package flowcontrol_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that the dispatcher and the waiters leave no goroutine
// behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
