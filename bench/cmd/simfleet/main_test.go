package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them: run
// owns its servers' Serve loops and must have stopped them on return.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
