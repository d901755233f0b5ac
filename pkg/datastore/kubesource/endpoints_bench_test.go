package kubesource_test

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/switchyard-ai/switchyard/pkg/datastore/kubesource"
)

// Every pool or pod change recomputes the whole endpoint set; this is the
// cost of one pass over a large pool (1,000 pods, 2 target ports).
func BenchmarkEndpoints1000Pods(b *testing.B) {
	pods := make([]corev1.Pod, 1000)
	for i := range pods {
		pods[i] = pod(fmt.Sprintf("vllm-%04d", i), fmt.Sprintf("127.10.%d.%d", i/250, i%250+1), i%10 != 0)
	}
	b.ReportAllocs()
	for b.Loop() {
		specs, _ := kubesource.Endpoints(pods, []int{8000, 8001}, 0)
		if len(specs) != 1800 {
			b.Fatalf("%d endpoints", len(specs))
		}
	}
}
