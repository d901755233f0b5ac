package dashboards

import (
	"testing"

	"go.uber.org/goleak"
)

// The tests start a model-server simulator and its HTTP server, and
// collect from registered collectors: none may outlive the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
