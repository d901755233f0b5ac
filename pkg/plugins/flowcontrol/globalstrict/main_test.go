package globalstrict_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that the tests' controllers leave no goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
