package usageweight

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that Run leaves no goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
