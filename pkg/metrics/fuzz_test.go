package metrics

import (
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// FuzzLabelValues feeds arbitrary request-derived strings (model names
// from bodies, endpoint names, reasons) through every method: nothing may
// panic (client_golang panics on invalid UTF-8 label values) and the
// registry must still gather.
func FuzzLabelValues(f *testing.F) {
	f.Add("llama", "llama", "pod-1", "ns", "saturated", "BadRequest", 0, 8000)
	f.Add("", "", "", "", "", "", -1, -1)
	f.Add("a\xffb", "\xc3", "p\x00d", "n s", "r\u2028", "\xff", 1<<40, 65536)
	f.Fuzz(func(t *testing.T, model, target, pod, ns, reason, code string, prio, port int) {
		reg := prometheus.NewRegistry()
		m, err := New(reg, pod)
		if err != nil {
			t.Fatal(err)
		}
		m.RequestReceived(model, target, prio)
		m.RequestError(model, target, code)
		m.RequestSize(model, target, prio)
		m.ResponseSize(model, target, port)
		m.RequestDuration(model, target, time.Duration(prio))
		m.Tokens(model, target, prio, port, prio)
		m.NormalizedTPOT(model, target, time.Duration(port), prio)
		m.TTFT(model, target, time.Duration(port))
		m.RunningRequests(model, 1)
		m.RunningRequests(model, -1)
		m.SchedulerAttempt(prio%2 == 0, target, pod, ns, port)
		m.Refusal(reason)
		m.SetInfo(model, reason)
		m.UpdatePool([]PoolSample{{Name: pod, Ready: true, Queue: prio}, {Name: ns, Queue: port}})
		if _, err := reg.Gather(); err != nil {
			t.Fatalf("gather: %v", err)
		}
		if s := sanitize(model); !utf8.ValidString(s) || len(s) > MaxLabelValueBytes {
			t.Fatalf("sanitize(%q) = %q", model, s)
		}
	})
}
