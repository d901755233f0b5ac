package config_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that loading configurations leaves no goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
