package testbed

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testproc"
)

// Names of the listeners in the bootstrap [Start] writes. Each is also the
// listener's stat_prefix, so its stats are "listener.<name>.*", for example
// "listener.ingress_http.downstream_cx_active".
const (
	HTTPListener = "ingress_http" // http_connection_manager, stat_prefix "ingress_http" ("http.ingress_http.*")
	TCPListener  = "ingress_tcp"  // tcp_proxy, stat_prefix "tcp" ("tcp.tcp.*")
)

// Names of the listeners, cluster and path that Options.InternalListener, Options.SharedPrefixListener
// and Options.MixedListener add.
const (
	// InternalListener is an internal listener (no stat_prefix: its stats are
	// "listener.envoy_internal_internal_http.*") with an HTTP manager of stat_prefix "internal_http",
	// reached through InternalCluster.
	InternalListener = "internal_http"
	InternalCluster  = "internal"
	// ViaInternalPath is the path prefix HTTPListener routes to InternalCluster (the prefix is rewritten to "/").
	ViaInternalPath = "/via-internal/"
	// SharedPrefixListener is an HTTP listener (stats "listener.ingress_http_2.*") whose HTTP manager shares
	// HTTPListener's stat_prefix "ingress_http".
	SharedPrefixListener = "ingress_http_2"
	// MixedListener has no stat_prefix (its stats are "listener.127.0.0.1_0.*", after its configured
	// address) and two filter chains: connections from MixedTCPSource go to a tcp_proxy to TCPCluster,
	// all others to an HTTP manager of stat_prefix "mixed_http".
	MixedListener  = "mixed"
	MixedTCPSource = "127.0.0.2"
)

// The listener Options.ReadinessListener adds: listener and HTTP manager stat_prefix "ready"
// ("listener.ready.*", "http.ready.*"), the health_check filter answering ReadinessPath.
const (
	ReadinessListener = "ready"
	ReadinessPath     = "/ready"
)

// The listener Options.HealthCheckedListener adds: listener and HTTP manager stat_prefix "checked"
// ("listener.checked.*", "http.checked.*"), the health_check filter answering ReadinessPath and every other
// path routed to HTTPCluster: the port a load balancer both checks and sends traffic to.
const HealthCheckedListener = "checked"

// The listener Options.AdminRouteListener adds, its HTTP manager's stat_prefix, and the cluster of the
// admin address its routes go to (as Contour's stats-health listener, "stats" manager and envoy-admin cluster).
const (
	AdminRouteListener = "stats-health"
	AdminRouteManager  = "stats"
	AdminCluster       = "envoy-admin"
)

// Names of the clusters in the bootstrap [Start] writes.
const (
	HTTPCluster = "upstream_http" // the Upstream's HTTPAddr, HTTP/1.1
	TCPCluster  = "upstream_tcp"  // the Upstream's TCPAddr
)

// Name prefixes of the clusters and listeners added by Options.ExtraClusters
// and Options.ExtraListeners: "extra_cluster_0", "extra_listener_0", ...
const (
	ExtraClusterPrefix  = "extra_cluster_"
	ExtraListenerPrefix = "extra_listener_"
)

// Defaults of [Options].
const (
	DefaultConcurrency  = 2
	DefaultStartTimeout = 60 * time.Second
)

// adminTimeout bounds one request of the client AdminClient returns.
const adminTimeout = 10 * time.Second

// maxUnixPath is the longest unix socket path that works on every unix
// (sun_path is 104 bytes on the BSDs, 108 on Linux, both including the NUL).
const maxUnixPath = 103

// Options configures [Start].
type Options struct {
	// AdminUnix puts the admin interface on the unix socket Dir/admin.sock
	// instead of 127.0.0.1 with a kernel-chosen port.
	AdminUnix bool
	// AdminPort, if not 0 and without AdminUnix, is the admin's fixed port on
	// 127.0.0.1, for a client that cannot be told another address (Envoy
	// Gateway's shutdown command dials port 19000). Start fails if it is taken.
	AdminPort int
	// HTTPIdleTimeout, if not 0, is the idle_timeout of the HTTP listener's
	// connection manager (common_http_protocol_options); 0 leaves Envoy's
	// default of 1 h. Contour configures 60 s for its Envoys.
	HTTPIdleTimeout time.Duration
	// DrainTime is Envoy's --drain-time-s, rounded up to whole seconds;
	// 0 leaves Envoy's default (600 s).
	DrainTime time.Duration
	// DrainStrategy is Envoy's --drain-strategy: "gradual" or "immediate";
	// "" leaves Envoy's default (gradual).
	DrainStrategy string
	// Concurrency is Envoy's --concurrency (worker threads); 0 means
	// [DefaultConcurrency].
	Concurrency int
	// Dir is the working directory of Envoy and holds the bootstrap
	// (envoy.json), the log (envoy.log), the admin address file and the admin
	// socket. Required; it is created if missing. With AdminUnix its absolute
	// path must be short enough for a unix socket path (at most 92 bytes).
	Dir string
	// Stdout and Stderr receive Envoy's output (its log goes to stderr). A nil
	// writer sends that stream to Dir/envoy.log, which Start truncates.
	Stdout, Stderr io.Writer
	// LogLevel is Envoy's --log-level; "" leaves Envoy's default (info).
	LogLevel string
	// StartTimeout bounds how long Start waits for Envoy to become ready,
	// in addition to ctx; 0 means [DefaultStartTimeout].
	StartTimeout time.Duration
	// Args are extra command-line arguments, appended after those Start sets.
	Args []string
	// ExtraClusters adds that many static clusters (named ExtraClusterPrefix+i,
	// each with the Upstream's HTTP server as its one endpoint) that no route
	// uses: a large configuration, for measuring the cost of stats queries.
	ExtraClusters int
	// ExtraListeners adds that many HTTP listeners on 127.0.0.1 with
	// kernel-chosen ports, each named, with listener and HTTP manager
	// stat_prefix, ExtraListenerPrefix+i and routing to HTTPCluster.
	ExtraListeners int
	// InternalListener adds the internal listener [InternalListener] with its own HTTP manager, reached by
	// requests to HTTPListener under [ViaInternalPath] (as Istio's sidecars reach theirs).
	InternalListener bool
	// SharedPrefixListener adds the HTTP listener [SharedPrefixListener], whose HTTP manager shares the
	// stat_prefix of HTTPListener's (as one "ingress_http" on ports 80 and 443 does).
	SharedPrefixListener bool
	// MixedListener adds the listener [MixedListener], whose filter chains mix an HTTP manager and a TCP proxy.
	MixedListener bool
	// ReadinessListener adds the listener [ReadinessListener]: an HTTP manager running Envoy's health_check
	// filter on [ReadinessPath] (200 while Envoy's health checks pass, 503 once they fail), as Envoy Gateway's
	// and the README's readiness listeners do.
	ReadinessListener bool
	// HealthCheckedListener adds the listener [HealthCheckedListener]: an HTTP manager running Envoy's
	// health_check filter on [ReadinessPath] (not passed through) that routes every other path to
	// HTTPCluster, as a hand-written configuration whose load balancer checks the port it sends to does.
	HealthCheckedListener bool
	// AdminRouteListener adds the listener [AdminRouteListener], Contour's shape of a readiness endpoint:
	// an HTTP manager (stat_prefix "stats") that passes GET [ReadinessPath] and /stats to the static cluster
	// [AdminCluster], whose one endpoint is the admin address. That address must be known before Envoy
	// starts: with neither AdminUnix nor AdminPort, Start picks a free loopback port, and picks again when
	// another process takes it before Envoy binds it.
	AdminRouteListener bool
	// WebSocket lets HTTPListener's HTTP manager upgrade connections to WebSockets (upgrade_configs), which
	// the Upstream answers at [WebSocketPath].
	WebSocket bool
	// DynamicListeners gives Envoy a file-based LDS (Dir/lds.json, without listeners at start), to which
	// [Envoy.AddHTTPListener] adds listeners while it runs.
	DynamicListeners bool
	// Wrapper, if not empty, is a command that runs Envoy: Start runs
	// Wrapper[0] with the arguments Wrapper[1:], then Envoy's path, then
	// Envoy's arguments (for example a supervisor's `run ... --`); a relative
	// Wrapper[0] is taken from the caller's working directory. Envoy.Cmd is
	// then the wrapper's process; Signal, Wait and Exited are about the
	// wrapper, and Stop and the end of ctx kill its whole process group. The
	// wrapper must leave Envoy in its process group. Use it with AdminUnix,
	// whose address is known before Envoy starts.
	Wrapper []string
}

// Envoy is a running Envoy process started by [Start], configured with:
//
//   - an HTTP listener [HTTPListener] (http_connection_manager with
//     stat_prefix "ingress_http", codec AUTO so HTTP/1.1 and h2c both work)
//     that routes every request to the Upstream's HTTP server, with the route
//     timeout disabled so long requests work;
//   - a TCP listener [TCPListener] (tcp_proxy with stat_prefix "tcp") to the
//     Upstream's echo server;
//   - the admin interface, on 127.0.0.1 or a unix socket (Options.AdminUnix).
//
// All listeners bind 127.0.0.1 with a kernel-chosen port; Start reads the real
// ports from the admin's GET /listeners?format=json.
type Envoy struct {
	Bin Binary
	// AdminURL is the admin address in the form the shutdown manager's
	// --admin-address flag takes: "http://127.0.0.1:PORT" or
	// "unix:///abs/path/admin.sock".
	AdminURL string
	HTTPAddr string // "127.0.0.1:PORT" of the HTTP listener
	TCPAddr  string // "127.0.0.1:PORT" of the TCP proxy listener
	// ListenerAddrs maps the name of every listener with a socket address to its "127.0.0.1:PORT".
	ListenerAddrs map[string]string
	// Cmd is the running process. Use Signal, Wait, Exited and Stop rather than
	// Cmd.Wait or Cmd.Process.Wait, which only one caller may use.
	Cmd  *exec.Cmd
	proc *testproc.Proc // Cmd, started by testproc
	// Dir is Options.Dir made absolute.
	Dir string
	// ConfigPath is the bootstrap file Envoy runs with.
	ConfigPath string
	// LogPath is Dir/envoy.log if Envoy writes to it (Options.Stdout or
	// Options.Stderr nil), else "".
	LogPath string

	adminNet, adminAddr string // how to dial the admin interface
	adminBase           string // URL prefix of admin requests over adminClient
	adminClient         *http.Client

	ldsPath string     // Dir/lds.json with Options.DynamicListeners
	ldsMu   sync.Mutex // serialises AddHTTPListener
	dynamic []any      // the listeners of lds.json
	version int        // updates of lds.json that changed a listener (SetHTTPManager)
}

// Start writes the bootstrap for up (required) to opts.Dir, starts Envoy with
// --disable-hot-restart and --use-dynamic-base-id, waits until the admin's GET /ready answers 200 and
// discovers the listener ports.
//
// Envoy runs in a process group of its own (see [testproc.Start]). ctx bounds
// the life of the process, not only the start: when ctx is done its group is
// killed (SIGKILL), as with [exec.CommandContext]. Waiting for
// readiness is further bounded by opts.StartTimeout. On error the process,
// if started, has been killed and reaped; the error includes the end of
// Envoy's log when that is in Dir/envoy.log.
func Start(ctx context.Context, bin Binary, up *Upstream, opts Options) (*Envoy, error) {
	if !opts.AdminRouteListener || opts.AdminUnix || opts.AdminPort != 0 {
		return start(ctx, bin, up, opts)
	}
	// A port free a moment ago can be taken by the time Envoy binds it (tests run side by side): a few
	// tries, each with a new port, and only that failure is tried again.
	var err error
	for range adminPortTries {
		o := opts
		if o.AdminPort, err = freeLoopbackPort(); err != nil {
			return nil, err
		}
		var e *Envoy
		if e, err = start(ctx, bin, up, o); err == nil || !strings.Contains(err.Error(), "Address already in use") {
			return e, err
		}
	}
	return nil, err
}

// adminPortTries is how many ports Start tries for an AdminRouteListener's TCP admin.
const adminPortTries = 5

// freeLoopbackPort is a TCP port on 127.0.0.1 that was free a moment ago.
func freeLoopbackPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("testbed: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func start(ctx context.Context, bin Binary, up *Upstream, opts Options) (*Envoy, error) {
	if opts.Dir == "" || up == nil {
		return nil, errors.New("testbed: Options.Dir and the Upstream are required")
	}
	switch opts.DrainStrategy {
	case "", "gradual", "immediate":
	default:
		return nil, fmt.Errorf("testbed: DrainStrategy %q: want \"\", \"gradual\" or \"immediate\"", opts.DrainStrategy)
	}
	if opts.DrainTime < 0 || opts.Concurrency < 0 || opts.StartTimeout < 0 || opts.ExtraClusters < 0 || opts.ExtraListeners < 0 ||
		opts.AdminPort < 0 || opts.HTTPIdleTimeout < 0 {
		return nil, errors.New("testbed: negative DrainTime, Concurrency, StartTimeout, ExtraClusters, ExtraListeners, AdminPort or HTTPIdleTimeout")
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	if opts.AdminRouteListener && !opts.AdminUnix && opts.AdminPort == 0 {
		return nil, errors.New("testbed: AdminRouteListener needs AdminUnix or AdminPort")
	}
	if sock := filepath.Join(dir, "admin.sock"); opts.AdminUnix && len(sock) > maxUnixPath {
		return nil, fmt.Errorf("testbed: admin socket path %s is longer than %d bytes; use a shorter Dir", sock, maxUnixPath)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	e := &Envoy{
		Bin:        bin,
		Dir:        dir,
		ConfigPath: filepath.Join(dir, "envoy.json"),
	}

	concurrency := orDefault(opts.Concurrency, DefaultConcurrency)
	args := []string{
		"--config-path", e.ConfigPath,
		"--disable-hot-restart",
		// Without hot restart Envoy uses no shared memory or domain socket, so
		// base IDs cannot clash; a dynamic one is asked for all the same.
		"--use-dynamic-base-id",
		"--concurrency", strconv.Itoa(concurrency),
	}
	var adminJSON map[string]any
	addrPath := filepath.Join(dir, "admin-address")
	if opts.AdminUnix {
		sock := filepath.Join(dir, "admin.sock")
		if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		adminJSON = map[string]any{"address": map[string]any{"pipe": map[string]any{"path": sock}}}
		e.adminNet, e.adminAddr = "unix", sock
		e.adminBase = "http://envoy-admin" // the host is not used to dial
		e.AdminURL = "unix://" + sock
	} else {
		if err := os.Remove(addrPath); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		adminJSON = map[string]any{"address": socketAddress("127.0.0.1", opts.AdminPort)}
		args = append(args, "--admin-address-path", addrPath)
	}
	if opts.DrainTime > 0 {
		secs := int64((opts.DrainTime + time.Second - 1) / time.Second)
		args = append(args, "--drain-time-s", strconv.FormatInt(secs, 10))
	}
	if opts.DrainStrategy != "" {
		args = append(args, "--drain-strategy", opts.DrainStrategy)
	}
	if opts.LogLevel != "" {
		args = append(args, "--log-level", opts.LogLevel)
	}
	args = append(args, opts.Args...)

	if opts.DynamicListeners {
		e.ldsPath = filepath.Join(dir, "lds.json")
		if err := e.writeLDS(); err != nil {
			return nil, err
		}
	}
	cfg, err := json.MarshalIndent(bootstrap(adminJSON, up, opts, e.ldsPath), "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(e.ConfigPath, cfg, 0o644); err != nil {
		return nil, err
	}

	name := bin.Path
	if len(opts.Wrapper) > 0 {
		name = opts.Wrapper[0]
		if strings.ContainsRune(name, '/') && !filepath.IsAbs(name) {
			// Envoy runs in Dir: a relative path means the caller's working directory, not Dir.
			if name, err = filepath.Abs(name); err != nil {
				return nil, err
			}
		}
		args = append(append(slices.Clip(opts.Wrapper[1:]), bin.Path), args...)
	}
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	// Bounds Wait when Stdout/Stderr are not files and a copy goroutine is
	// blocked (the process itself is already dead by then).
	cmd.WaitDelay = 5 * time.Second
	cmd.Stdout, cmd.Stderr = opts.Stdout, opts.Stderr
	// A wrapper's group (Envoy included) is killed as a whole.
	e.proc, err = testproc.Start(ctx, "envoy", cmd, filepath.Join(dir, "envoy.log"))
	if err != nil {
		return nil, fmt.Errorf("testbed: %w (%s)", err, bin.Path)
	}
	e.Cmd, e.LogPath = cmd, e.proc.LogPath

	startCtx, cancel := context.WithTimeout(ctx, orDefault(opts.StartTimeout, DefaultStartTimeout))
	defer cancel()
	if err := e.awaitReady(startCtx, addrPath); err != nil {
		e.Stop()
		return nil, e.startError(err)
	}
	return e, nil
}

// orDefault returns v, or def if v is zero.
func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// startError decorates err with the process state and the end of the log.
func (e *Envoy) startError(err error) error {
	msg := fmt.Sprintf("testbed: %s (pid %d): %v", e.Bin, e.Cmd.Process.Pid, err)
	if !e.proc.Running() && !e.proc.Killed() {
		msg += fmt.Sprintf("; exited: %v", e.proc.Wait())
	}
	if e.LogPath != "" {
		msg += "\n" + e.proc.LogEnd(20)
	}
	return errors.New(msg)
}

// awaitReady polls, every pollInterval until ctx is done or Envoy exits, for
// the admin address (TCP admin only), then for GET /ready = 200, then reads
// the listener ports.
func (e *Envoy) awaitReady(ctx context.Context, addrPath string) error {
	const pollInterval = 20 * time.Millisecond
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	var lastErr error
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready: %w (last: %v)", context.Cause(ctx), lastErr)
		case <-e.proc.Exited():
			return errors.New("exited before it was ready")
		case <-tick.C:
		}
		if e.adminNet == "" {
			b, err := os.ReadFile(addrPath)
			addr := strings.TrimSpace(string(b))
			if err != nil || addr == "" {
				lastErr = fmt.Errorf("admin address file: %v", err)
				continue
			}
			if _, _, err := net.SplitHostPort(addr); err != nil {
				return fmt.Errorf("admin address file %s: %w", addrPath, err)
			}
			e.adminNet, e.adminAddr = "tcp", addr
			e.adminBase = "http://" + addr
			e.AdminURL = e.adminBase
		}
		if e.adminClient == nil {
			e.adminClient = e.newAdminClient()
		}
		if _, err := e.AdminGet(ctx, "/ready"); err != nil {
			lastErr = err
			continue
		}
		return e.discoverListeners(ctx)
	}
}

// discoverListeners fills HTTPAddr, TCPAddr and ListenerAddrs from GET /listeners?format=json.
func (e *Envoy) discoverListeners(ctx context.Context) error {
	addrs, body, err := e.listenerAddrs(ctx)
	if err != nil {
		return err
	}
	e.ListenerAddrs = addrs
	e.HTTPAddr, e.TCPAddr = addrs[HTTPListener], addrs[TCPListener]
	if e.HTTPAddr == "" || e.TCPAddr == "" || strings.HasSuffix(e.HTTPAddr, ":0") || strings.HasSuffix(e.TCPAddr, ":0") {
		return fmt.Errorf("/listeners lacks %s or %s with a port: %s", HTTPListener, TCPListener, body)
	}
	return nil
}

// listenerAddrs reads the "127.0.0.1:PORT" of every listener with a socket address from GET
// /listeners?format=json, and returns the answer too.
func (e *Envoy) listenerAddrs(ctx context.Context) (map[string]string, []byte, error) {
	body, err := e.AdminGet(ctx, "/listeners?format=json")
	if err != nil {
		return nil, nil, err
	}
	addrs, err := ParseListenerAddrs(body)
	return addrs, body, err
}

// ParseListenerAddrs reads GET /listeners?format=json: each listener's name and the "IP:PORT" it is bound
// to. Listeners without a socket address (internal ones) are left out.
func ParseListenerAddrs(body []byte) (map[string]string, error) {
	var ls struct {
		ListenerStatuses []struct {
			Name         string `json:"name"`
			LocalAddress struct {
				SocketAddress struct {
					Address   string `json:"address"`
					PortValue int    `json:"port_value"`
				} `json:"socket_address"`
			} `json:"local_address"`
		} `json:"listener_statuses"`
	}
	if err := json.Unmarshal(body, &ls); err != nil {
		return nil, fmt.Errorf("/listeners: %w", err)
	}
	addrs := map[string]string{}
	for _, l := range ls.ListenerStatuses {
		sa := l.LocalAddress.SocketAddress
		if sa.Address == "" {
			continue // an internal listener
		}
		addrs[l.Name] = net.JoinHostPort(sa.Address, strconv.Itoa(sa.PortValue))
	}
	return addrs, nil
}

// AddHTTPListener adds, through the file-based LDS of Options.DynamicListeners, an HTTP listener on
// 127.0.0.1 with a kernel-chosen port whose name, listener stat_prefix and HTTP manager stat_prefix are
// name, routing to HTTPCluster; it waits (bounded by ctx) until Envoy serves it and returns its
// "127.0.0.1:PORT". ListenerAddrs is not changed.
func (e *Envoy) AddHTTPListener(ctx context.Context, name string) (string, error) {
	if e.ldsPath == "" {
		return "", errors.New("testbed: AddHTTPListener needs Options.DynamicListeners")
	}
	e.ldsMu.Lock()
	defer e.ldsMu.Unlock()
	l := listener(name, httpManager(name))
	l["@type"] = "type.googleapis.com/envoy.config.listener.v3.Listener"
	e.dynamic = append(e.dynamic, l)
	if err := e.writeLDS(); err != nil {
		return "", err
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		addrs, _, err := e.listenerAddrs(ctx)
		if addr := addrs[name]; err == nil && addr != "" && !strings.HasSuffix(addr, ":0") {
			return addr, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("testbed: listener %s not served: %w (last: %v)", name, ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// SetHTTPManager replaces, through the file-based LDS of Options.DynamicListeners, the HTTP manager of the
// listener name (added by AddHTTPListener) with one whose stat_prefix is statPrefix, leaving its name, stat
// prefix and address as they are; it waits (bounded by ctx) until Envoy has applied the update (its
// listener_manager.listener_modified counter grew), so that connections opened next reach the new manager.
func (e *Envoy) SetHTTPManager(ctx context.Context, name, statPrefix string) error {
	if e.ldsPath == "" {
		return errors.New("testbed: SetHTTPManager needs Options.DynamicListeners")
	}
	e.ldsMu.Lock()
	defer e.ldsMu.Unlock()
	const modified = "listener_manager.listener_modified"
	before, err := e.Stats(ctx, "^"+regexp.QuoteMeta(modified)+"$")
	if err != nil {
		return err
	}
	found := false
	for i, d := range e.dynamic {
		if l, ok := d.(map[string]any); ok && l["name"] == name {
			l = maps.Clone(l)
			l["filter_chains"] = []any{map[string]any{"filters": []any{httpManager(statPrefix)}}}
			e.dynamic[i], found = l, true
		}
	}
	if !found {
		return fmt.Errorf("testbed: no dynamic listener %s", name)
	}
	e.version++
	if err := e.writeLDS(); err != nil {
		return err
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		st, err := e.Stats(ctx, "^"+regexp.QuoteMeta(modified)+"$")
		if err == nil && st[modified] > before[modified] {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testbed: listener %s not updated: %w (last: %v)", name, ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// writeLDS writes the dynamic listeners to ldsPath the way Envoy's file watch sees an update: to a
// temporary file, then renamed over it.
func (e *Envoy) writeLDS() error {
	b, err := json.Marshal(map[string]any{"version_info": strconv.Itoa(len(e.dynamic) + e.version), "resources": append([]any{}, e.dynamic...)})
	if err != nil {
		return err
	}
	tmp := e.ldsPath + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, e.ldsPath)
}

func (e *Envoy) newAdminClient() *http.Client {
	network, addr := e.adminNet, e.adminAddr
	d := &net.Dialer{Timeout: adminTimeout}
	return &http.Client{
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return d.DialContext(ctx, network, addr)
			},
			Proxy:           nil,
			MaxIdleConns:    2,
			IdleConnTimeout: 30 * time.Second,
		},
		Timeout: adminTimeout,
	}
}

// AdminClient returns an HTTP client whose connections go to the admin
// interface (TCP or unix socket, whatever the URL says); each request is
// bounded by 10 s. Build request URLs with AdminEndpoint.
func (e *Envoy) AdminClient() *http.Client { return e.adminClient }

// AdminEndpoint returns the URL of the admin path (like "/stats?format=json")
// to use with AdminClient. For a unix socket admin its host is a placeholder.
func (e *Envoy) AdminEndpoint(path string) string { return e.adminBase + path }

// AdminGet sends GET path to the admin interface and returns the body; a
// status other than 200 is an error.
func (e *Envoy) AdminGet(ctx context.Context, path string) ([]byte, error) {
	return e.admin(ctx, http.MethodGet, path)
}

// AdminPost sends POST path (no body) to the admin interface and returns the
// body; a status other than 200 is an error.
func (e *Envoy) AdminPost(ctx context.Context, path string) ([]byte, error) {
	return e.admin(ctx, http.MethodPost, path)
}

func (e *Envoy) admin(ctx context.Context, method, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, e.AdminEndpoint(path), nil)
	if err != nil {
		return nil, err
	}
	resp, err := e.adminClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return body, fmt.Errorf("admin %s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(body))
	}
	return body, nil
}

// Stats returns the counters and gauges whose names match the regular
// expression filter (Envoy's /stats?filter=), by full stat name. Histograms
// and text readouts are left out.
func (e *Envoy) Stats(ctx context.Context, filter string) (map[string]int64, error) {
	body, err := e.AdminGet(ctx, "/stats?format=json&filter="+url.QueryEscape(filter))
	if err != nil {
		return nil, err
	}
	return ParseStatsJSON(body)
}

// ParseStatsJSON reads an admin /stats?format=json answer into its integer stats by full name; the
// histograms entry and text readouts are left out.
func ParseStatsJSON(body []byte) (map[string]int64, error) {
	var s struct {
		Stats []struct {
			Name  string          `json:"name"`
			Value json.RawMessage `json:"value"`
		} `json:"stats"`
	}
	if err := json.Unmarshal(body, &s); err != nil {
		return nil, fmt.Errorf("/stats: %w", err)
	}
	out := make(map[string]int64, len(s.Stats))
	for _, st := range s.Stats {
		if st.Name == "" {
			continue // the histograms entry
		}
		v, err := strconv.ParseInt(string(st.Value), 10, 64)
		if err != nil {
			continue // a text readout
		}
		out[st.Name] = v
	}
	return out, nil
}

// Signal sends sig to Envoy (with a wrapper: to the wrapper); after it has
// exited it returns [os.ErrProcessDone].
func (e *Envoy) Signal(sig os.Signal) error { return e.proc.Signal(sig) }

// Wait waits for Envoy to exit and returns the result of [exec.Cmd.Wait]
// (nil for exit status 0). Any number of goroutines may call it; all get the
// same result.
func (e *Envoy) Wait() error { return e.proc.Wait() }

// Exited returns a channel that is closed once Envoy has exited and been
// reaped; Wait then returns at once.
func (e *Envoy) Exited() <-chan struct{} { return e.proc.Exited() }

// Killed reports whether Stop, the end of Start's ctx or a failed Start
// killed Envoy, as opposed to Envoy exiting by itself or on a signal sent
// with Signal.
func (e *Envoy) Killed() bool { return e.proc.Killed() }

// Stop kills Envoy's process group (SIGKILL) and waits until Envoy is reaped;
// with a wrapper that has exited already, what is left of its group (Envoy)
// is killed. It is idempotent and safe for concurrent use. It leaves Dir alone.
func (e *Envoy) Stop() { e.proc.Stop(0) }
