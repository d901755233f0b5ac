package signals

import (
	"testing"

	"go.uber.org/goleak"
)

// The package starts no goroutine; goleak keeps it so.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
