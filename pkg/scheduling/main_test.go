package scheduling_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that the framework leaves no goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
