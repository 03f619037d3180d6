package envoyadmin

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
)

// maxBody bounds what is read of one admin answer. A filtered stats answer is a few kB even with
// thousands of listeners; anything larger is not an answer to our query.
// The listener configuration (ListenerConfig) is bounded by it too: 8 MiB is thousands of listeners with
// their filter chains; a larger one is not read (the count then falls back) rather than held in memory.
const maxBody = 8 << 20

// Client calls Envoy's admin API. It is safe for concurrent use; every request has its own deadline.
type Client struct {
	addr    Address
	base    string
	http    *http.Client
	timeout time.Duration
	observe func(endpoint, result string)
}

// Options tune a Client.
type Options struct {
	// Timeout bounds each request, connect to last byte (default 1s). A hung admin API must not hold a drain.
	Timeout time.Duration
	// Observe, if set, is told of every request: the endpoint ("/stats") and its result ("ok", "http_500",
	// "unreachable", "timeout", "error").
	Observe func(endpoint, result string)
}

// New returns a client of the admin API at addr.
func New(addr Address, opts Options) *Client {
	if opts.Timeout <= 0 {
		opts.Timeout = time.Second
	}
	dialer := &net.Dialer{Timeout: opts.Timeout}
	transport := &http.Transport{
		// One dialer for both kinds of address: the URL's host is ignored for unix sockets.
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, addr.Network, addr.Addr)
		},
		MaxIdleConns:        2,
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
	base := "http://" + addr.Addr
	if addr.Network == "unix" {
		base = "http://envoy-admin"
	}
	return &Client{
		addr: addr,
		base: base,
		http: &http.Client{Transport: transport, Timeout: opts.Timeout,
			// Never follow a redirect: a 302 to POST /healthcheck/fail followed as a GET would read as success.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		timeout: opts.Timeout,
		observe: opts.Observe,
	}
}

// Address is the admin address this client calls.
func (c *Client) Address() Address { return c.addr }

// ErrUnreachable marks an error where nothing listens at the admin address (connection refused, or no
// socket file): Envoy is not running there.
var ErrUnreachable = errors.New("envoy admin unreachable")

// HealthcheckFail makes Envoy fail its health checks (/ready answers 503) and drain-close connections
// on responses (HTTP/1.1 Connection: close, HTTP/2 GOAWAY). Listeners keep accepting.
func (c *Client) HealthcheckFail(ctx context.Context) error {
	_, err := c.do(ctx, http.MethodPost, "/healthcheck/fail", "")
	return err
}

// HealthcheckOK undoes HealthcheckFail.
func (c *Client) HealthcheckOK(ctx context.Context) error {
	_, err := c.do(ctx, http.MethodPost, "/healthcheck/ok", "")
	return err
}

// DrainListeners starts Envoy's graceful listener drain (POST /drain_listeners?graceful&skip_exit), on the
// inbound listeners only when inboundOnly. skip_exit keeps the listeners open: a drain tool must not refuse
// connections that are still being routed to the pod; the process exit closes them.
func (c *Client) DrainListeners(ctx context.Context, inboundOnly bool) error {
	q := "graceful&skip_exit"
	if inboundOnly {
		q += "&inboundonly"
	}
	_, err := c.do(ctx, http.MethodPost, "/drain_listeners", q)
	return err
}

// Quit asks Envoy to exit cleanly (POST /quitquitquit).
func (c *Client) Quit(ctx context.Context) error {
	_, err := c.do(ctx, http.MethodPost, "/quitquitquit", "")
	return err
}

// Stats reads the stats selected by ActiveFilter (StatsQuery).
func (c *Client) Stats(ctx context.Context) (Snapshot, error) {
	body, err := c.do(ctx, http.MethodGet, "/stats", StatsQuery)
	if err != nil {
		return Snapshot{}, err
	}
	s, err := ParseStats(strings.NewReader(body))
	if err != nil {
		c.report("/stats", "error")
		return Snapshot{}, err
	}
	return s, nil
}

// ListenerConfig reads the listener configuration (GET /config_dump?mask=static_listeners,dynamic_listeners)
// into a Topology and, when some HTTP manager routes only to named clusters, those of them that are static
// clusters (a second GET /config_dump), to mark the managers that route only to the admin API as readiness
// endpoints (MarkAdminRoutes; if that read fails, Topology.AdminRoutesUnread says why). Each read is
// bounded like every answer (maxBody): a larger configuration is an error, and the caller counts without
// it rather than hold an unbounded copy of Envoy's configuration in memory.
func (c *Client) ListenerConfig(ctx context.Context) (Topology, error) {
	body, err := c.do(ctx, http.MethodGet, "/config_dump", ListenerConfigQuery)
	if err != nil {
		return Topology{}, err
	}
	t, err := ParseListenerConfig(strings.NewReader(body))
	if err != nil {
		c.report("/config_dump", "error")
		return Topology{}, err
	}
	// The managers that route only to named clusters: are those clusters the admin API itself?
	if names := t.AdminRouteCandidates(); len(names) > 0 {
		clusters, err := c.staticClusters(ctx, names)
		if err != nil {
			t.AdminRoutesUnread = err.Error()
			return t, nil
		}
		t.MarkAdminRoutes(clusters, c.addr)
	}
	return t, nil
}

// staticClusters reads the endpoints of the static clusters named (GET /config_dump?resource=static_clusters).
func (c *Client) staticClusters(ctx context.Context, names []string) (map[string][]Address, error) {
	body, err := c.do(ctx, http.MethodGet, "/config_dump", StaticClustersQuery(names))
	if err != nil {
		return nil, err
	}
	clusters, err := ParseStaticClusters(strings.NewReader(body))
	if err != nil {
		c.report("/config_dump", "error")
		return nil, err
	}
	return clusters, nil
}

// ServerState reads Envoy's state from /server_info.
func (c *Client) ServerState(ctx context.Context) (ServerState, error) {
	body, err := c.do(ctx, http.MethodGet, "/server_info", "")
	if err != nil {
		return "", err
	}
	st, err := ParseServerState(strings.NewReader(body))
	if err != nil {
		c.report("/server_info", "error")
	}
	return st, err
}

// ServerBootstrap reads the answering Envoy's -c and --config-yaml from /server_info (ParseServerBootstrap).
func (c *Client) ServerBootstrap(ctx context.Context) (path, inline string, err error) {
	body, err := c.do(ctx, http.MethodGet, "/server_info", "")
	if err != nil {
		return "", "", err
	}
	path, inline, err = ParseServerBootstrap(strings.NewReader(body))
	if err != nil {
		c.report("/server_info", "error")
	}
	return path, inline, err
}

func (c *Client) report(endpoint, result string) {
	if c.observe != nil {
		c.observe(endpoint, result)
	}
}

// do sends one request (rawQuery is sent as is: Envoy takes bare flags such as "graceful") and returns the
// body of a 2xx answer; any other status, a redirect included (never followed), is an error. Errors are
// wrapped with the endpoint; ErrUnreachable is wrapped in when nothing listens at the address.
func (c *Client) do(ctx context.Context, method, path, rawQuery string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	u := c.base + path
	if rawQuery != "" {
		u += "?" + rawQuery
	}
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", method, path, err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		result := "error"
		switch {
		case isUnreachable(err):
			result = "unreachable"
			err = fmt.Errorf("%w: %w", ErrUnreachable, err)
		case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
			result = "timeout"
		}
		c.report(path, result)
		return "", fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		c.report(path, "error")
		return "", fmt.Errorf("%s %s: reading answer: %w", method, path, err)
	}
	if len(body) > maxBody {
		c.report(path, "error")
		return "", fmt.Errorf("%s %s: answer larger than %d bytes", method, path, maxBody)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		c.report(path, fmt.Sprintf("http_%d", resp.StatusCode))
		return "", fmt.Errorf("%s %s: status %d: %.200s", method, path, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	c.report(path, "ok")
	return string(body), nil
}

func isUnreachable(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
