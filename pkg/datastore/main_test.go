package datastore

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that the publisher leaves no goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
