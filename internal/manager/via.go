package manager

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/envoyadmin"
)

// viaDialTimeout bounds connecting to the sidecar.
const viaDialTimeout = 2 * time.Second

// viaClient calls the HTTP API of a `serve` sidecar (Drain and Resume through a sidecar).
type viaClient struct {
	addr    envoyadmin.Address
	base    string
	http    *http.Client
	token   string
	version string // for the User-Agent
}

// newViaClient calls the sidecar at addr (a unix socket or a TCP address, as Envoy's admin API is given).
func newViaClient(addr envoyadmin.Address, token, version string) *viaClient {
	// A sidecar that exists answers a connect at once; a dropped SYN (a NetworkPolicy) must not eat the
	// hook's whole budget before the fallback drain.
	dialer := &net.Dialer{Timeout: viaDialTimeout}
	transport := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, addr.Network, addr.Addr)
		},
		DisableKeepAlives: true, // one call per process
	}
	base := "http://" + addr.Addr
	if addr.Network == "unix" {
		base = "http://shutdown-manager"
	}
	return &viaClient{addr: addr, base: base, token: token, version: version, http: &http.Client{
		Transport:     transport,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// errSidecarUnreachable marks a call that got no answer at all from the sidecar: nothing listens (no
// socket, connection refused), or the connection broke before the answer.
var errSidecarUnreachable = errors.New("sidecar unreachable")

// call sends method path and returns the status and the first line of the answer. ctx bounds it all.
func (c *viaClient) call(ctx context.Context, method, path string) (int, string, error) {
	code, line, _, err := c.callHeader(ctx, method, path)
	return code, line, err
}

// callHeader is call that also returns the answer's headers.
func (c *viaClient) callHeader(ctx context.Context, method, path string) (int, string, http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, nil)
	if err != nil {
		return 0, "", nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	req.Header.Set("User-Agent", "shutdown-manager/"+c.version)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		var oe *net.OpError
		dial := errors.As(err, &oe) && oe.Op == "dial"
		if ctx.Err() == nil && (dial || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) ||
			errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)) {
			err = fmt.Errorf("%w: %w", errSidecarUnreachable, err)
		}
		return 0, "", nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if err != nil {
		return 0, "", nil, fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
	return resp.StatusCode, line, resp.Header, nil
}
