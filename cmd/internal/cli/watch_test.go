package cli

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tablekeeper/tablekeeper/storeadapter"
	"github.com/tablekeeper/tablekeeper/storeadapter/azstore"
)

// TestStorageWatch: a silent endpoint is reported as what the command
// waits for, once per service and host however many calls wait, and again
// as the wait doubles; a failed try says storage is not answering, once;
// the first answer after either says storage answers again; an answer
// with an internal error (HTTP 500) is no outage and says so, once.
func TestStorageWatch(t *testing.T) {
	var out bytes.Buffer
	log, err := NewLogger(&out, "text", "info")
	if err != nil {
		t.Fatal(err)
	}
	onTry, onWait := StorageWatch(log)
	q := func(d time.Duration) azstore.Wait {
		return azstore.Wait{Service: "queue", Host: "127.0.0.1:9", Waited: d}
	}
	for range 3 { // three calls waiting at once
		onWait(q(5 * time.Second))
	}
	onWait(azstore.Wait{Service: "table", Host: "127.0.0.1:9", Waited: 5 * time.Second})
	onWait(azstore.Wait{Service: azstore.SignIn, Waited: 5 * time.Second})
	onTry(nil)
	onTry(fmt.Errorf("azstore: try: %w: no answer in time", storeadapter.ErrUnavailable))
	onTry(fmt.Errorf("azstore: try: %w: no answer in time", storeadapter.ErrUnavailable))
	time.Sleep(20 * time.Millisecond)
	onWait(q(20 * time.Millisecond)) // a later, longer wait of the same endpoint (short, for the test)
	onTry(nil)
	onTry(nil)
	onTry(fmt.Errorf("azstore: try: %w (HTTP 500)", storeadapter.ErrServiceFailed)) // it answered
	onTry(fmt.Errorf("azstore: try: %w (HTTP 500)", storeadapter.ErrServiceFailed))
	onTry(nil)
	got := out.String()
	for want, n := range map[string]int{
		"waiting for queue service at 127.0.0.1:9 (5s)": 1, "waiting for table service at 127.0.0.1:9 (5s)": 1,
		"waiting for queue service at 127.0.0.1:9 (20ms)": 1, "storage is not answering; retrying": 1, "storage answers again": 2,
		"storage answered with a server error": 1, "waiting for the credential to sign in (5s)": 1,
	} {
		if c := strings.Count(got, want); c != n {
			t.Errorf("%d lines %q, want %d:\n%s", c, want, n, got)
		}
	}
}
