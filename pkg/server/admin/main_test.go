package admin

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that the tests (the token guard's watch) leave no
// goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
