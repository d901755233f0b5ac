package main

import (
	"testing"

	"go.uber.org/goleak"
)

// The demo starts servers and loops; all must stop when it returns.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
