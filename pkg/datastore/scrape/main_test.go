package scrape

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that scrapers leave no goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
