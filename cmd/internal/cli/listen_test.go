package cli

import "testing"

// TestLoopback: which listen addresses bind loopback only.
func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "127.0.0.2:1": true, "[::1]:8080": true, "localhost:0": true,
		":8080": false, "0.0.0.0:8080": false, "[::]:80": false, "10.0.0.7:8080": false, "example.com:80": false,
	} {
		got, err := Loopback(addr)
		if err != nil || got != want {
			t.Errorf("Loopback(%q) = %v, %v; want %v", addr, got, err, want)
		}
	}
	if _, err := Loopback("nonsense"); err == nil {
		t.Error("Loopback(nonsense): want an error")
	}
}
