package endpointsfile

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that sources stop their watchers.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
