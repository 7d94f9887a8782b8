package stopsignal

import (
	"os"
	"os/signal"
	"syscall"
)

// C receives SIGINT and SIGTERM. It holds two, the first stop request and
// the second that forces the exit, however late the command reads it.
var C = make(chan os.Signal, 2)

func init() { signal.Notify(C, os.Interrupt, syscall.SIGTERM) }
