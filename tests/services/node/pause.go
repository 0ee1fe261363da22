// The node's sandbox ("pause") image: the process that holds each pod's namespaces. It sleeps
// until it is told to stop; a sandbox shares no PID namespace here, so it has no orphans to reap.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	<-stop
}
