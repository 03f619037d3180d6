// Command upstream is the origin behind Envoy in the e2e cluster (test/e2e), run from an image the test writes:
// testbed's Upstream (GET / answers "ok", GET /sleep?d=3s answers after d, a TCP echo server) listening on every
// address of the pod. It stands in for deploy/common/echo.yaml's hashicorp/http-echo, which the test cannot pull,
// and adds the long requests and the TCP connections the scenarios need. It accepts http-echo's -listen and -text
// so that the example's arguments run unchanged (-text is ignored).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testbed"
)

func main() { os.Exit(run()) }

func run() int {
	fs := flag.NewFlagSet("upstream", flag.ContinueOnError)
	listen := fs.String("listen", ":8080", "the HTTP server's address")
	tcp := fs.String("tcp-listen", ":9000", "the TCP echo server's address")
	fs.String("text", "", "ignored (hashicorp/http-echo's flag)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	u, err := testbed.StartUpstreamOn(*listen, *tcp)
	if err != nil {
		fmt.Fprintf(os.Stderr, "upstream: starting: %v\n", err)
		return 1
	}
	fmt.Printf("upstream: HTTP on %s, TCP echo on %s\n", u.HTTPAddr, u.TCPAddr)
	<-ctx.Done()
	u.Close()
	return 0
}
