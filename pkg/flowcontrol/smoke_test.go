package flowcontrol_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard-ai/switchyard/pkg/flowcontrol"
)

func TestEnqueueFastPathAndQueue(t *testing.T) {
	var sat atomic.Value
	sat.Store(0.5)
	pool := flowcontrol.PoolFunc(func() (float64, int) { return sat.Load().(float64), 1 })
	c, err := flowcontrol.New(flowcontrol.Config{}, pool)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	for !c.Stats().Running {
		time.Sleep(time.Millisecond)
	}
	if o := c.Enqueue(context.Background(), &flowcontrol.Item{Flow: flowcontrol.FlowKey{ID: "a"}}); o != flowcontrol.Dispatched {
		t.Fatalf("outcome %v", o)
	}
	sat.Store(1.0)
	res := make(chan flowcontrol.Outcome, 1)
	go func() { res <- c.Enqueue(context.Background(), &flowcontrol.Item{Flow: flowcontrol.FlowKey{ID: "a"}}) }()
	for c.Stats().Requests != 1 {
		time.Sleep(time.Millisecond)
	}
	sat.Store(0.0)
	c.Notify()
	if o := <-res; o != flowcontrol.Dispatched {
		t.Fatalf("outcome %v", o)
	}
}
