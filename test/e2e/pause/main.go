// Command pause is the pod sandbox's process in the e2e cluster (test/e2e), the role registry.k8s.io/pause
// plays: it does nothing until SIGTERM or SIGINT, then exits 0. Built static, it is the one file of the
// sandbox image the test writes (the cluster pulls nothing).
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}
