package extproc_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a goroutine outlives the tests: every
// stream's receive goroutine must exit once its Process returns.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
