package extproc_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a goroutine outlives the tests: every
// stream's serving goroutine must exit once its stream has ended.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
