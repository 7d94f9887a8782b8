package netfault

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// TestSilentAcceptsAndNeverAnswers: a connection is accepted, and a read
// times out with nothing received.
func TestSilentAcceptsAndNeverAnswers(t *testing.T) {
	c, err := net.DialTimeout("tcp", Silent(t), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	n, err := c.Read(make([]byte, 1))
	if n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("read %d bytes, %v; want a timeout with nothing", n, err)
	}
}
