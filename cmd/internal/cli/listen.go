package cli

import (
	"fmt"
	"net"
)

// Loopback reports whether a listen address (host:port) binds loopback
// only: "localhost" or a loopback IP. An empty host (":8080") binds every
// interface. The error is net.SplitHostPort's.
func Loopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, fmt.Errorf("%q is not host:port: %w", addr, err)
	}
	if host == "localhost" {
		return true, nil
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback(), nil
}
