package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/storeadapter"
)

func contextCases() []testCase {
	return []testCase{
		{"Cancelled", testCancelledContext},
	}
}

// testCancelledContext checks that a call made with a cancelled context
// fails with an error wrapping context.Canceled, which IsTransient does not
// retry: the worker relies on it to stop cleanly, and must not mistake a
// shutdown for a service outage.
func testCancelledContext(t *testing.T, e *env) {
	tbl := e.newTable(t)
	q := e.newQueue(t)
	c := e.newContainer(t)
	ctx, cancel := context.WithCancel(e.ctx)
	cancel()
	calls := []struct {
		op  string
		err error
	}{
		{"GetEntity", second(e.tb.GetEntity(ctx, tbl, "p", "r"))},
		{"InsertEntity", second(e.tb.InsertEntity(ctx, tbl, entity{PartitionKey: "p", RowKey: "r"}))},
		{"Query", second(e.tb.Query(ctx, tbl, storeadapter.Query{}))},
		{"Send", second(q.Send(ctx, "x", storeadapter.SendOptions{}))},
		{"Receive", second(q.Receive(ctx, 1, time.Second))},
		{"Put", second(c.Put(ctx, "b", []byte("x"), storeadapter.PutOptions{}))},
		{"Get", func() error { _, _, err := c.Get(ctx, "b"); return err }()},
	}
	for _, call := range calls {
		checkErr(t, call.op+" with a cancelled context", call.err, context.Canceled)
		if storeadapter.IsTransient(call.err) {
			t.Errorf("%s with a cancelled context: IsTransient(%v) = true, want false", call.op, call.err)
		}
	}
	// Nothing was written.
	e.checkGone(t, tbl, "p", "r")
	if n := e.count(t, q); n != 0 {
		t.Errorf("ApproximateCount after a cancelled Send = %d, want 0", n)
	}
	if _, err := c.Properties(e.ctx, "b"); err == nil {
		t.Errorf("blob b exists after a cancelled Put")
	}
}
