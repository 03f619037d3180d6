package testbed

import (
	"context"
	"net"
)

// UnixDialer returns an http.Transport DialContext that connects to the unix socket at path, whatever
// address a request names: an HTTP client of a unix-socket server.
func UnixDialer(path string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", path)
	}
}
