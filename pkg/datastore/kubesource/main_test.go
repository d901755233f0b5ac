package kubesource_test

import (
	"testing"

	"github.com/go-logr/logr"
	"go.uber.org/goleak"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

func TestMain(m *testing.M) {
	// controller-runtime and client-go log through global loggers; the
	// tests log through their own.
	ctrllog.SetLogger(logr.Discard())
	klog.SetLogger(logr.Discard())
	goleak.VerifyTestMain(m,
		// klog's flush daemon lives for the process.
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
	)
}
