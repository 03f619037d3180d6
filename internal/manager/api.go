package manager

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/server"
)

// APIConfig is the HTTP API's: where it listens, and its limits.
type APIConfig struct {
	Listen     ListenAddress
	Metrics    *ListenAddress // nil: /metrics on Listen
	Token      Token          // zero: /shutdown and /resume need no token
	MaxWaiters int
	MaxConns   int
}

// maxTokenFile bounds what is read of a token file: a bearer token is short, and a wrong path (a log file)
// must not be read whole.
const maxTokenFile = 4 << 10

// Token is a shared secret read from a file (ReadToken), and the file's permissions.
type Token struct {
	Path   string
	Secret string
	perm   fs.FileMode
}

// worldReadable reports whether every user of the machine may read the file.
func (t Token) worldReadable() bool { return t.perm&0o004 != 0 }

// WarnMode logs a warning when the token file is world-readable. A warning, not a refusal: Kubernetes
// mounts Secrets with mode 0644 unless told otherwise (defaultMode), and without fsGroup that "other" bit is
// what lets the non-root sidecar read it at all; refusing would break the default mount. A group-readable
// file is accepted silently: 0440 with the pod's fsGroup is how a non-root container reads a Secret.
func (t Token) WarnMode(log *slog.Logger) {
	if t.Path == "" || !t.worldReadable() {
		return
	}
	log.Warn("the token file is readable by every user: any process that can see the file can drain the pod; "+
		"mount the Secret with defaultMode 0400 (0440 with the pod's fsGroup for a non-root container)",
		"token_file", t.Path, "mode", fmt.Sprintf("%#o", t.perm))
}

// ReadToken reads a shared secret from path: the file's content without surrounding whitespace (a
// Kubernetes Secret written with a trailing newline works). Only a regular file (or a symbolic link to
// one, as in a Secret volume) is read: a FIFO would block the start-up until someone writes to it, a device
// or a directory is a wrong path. The file is opened without blocking and checked by its descriptor, so
// what is read is what was checked.
func ReadToken(path string) (Token, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return Token{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Token{}, fmt.Errorf("checking %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return Token{}, fmt.Errorf("%s is %s, not a regular file", path, fileKind(fi.Mode()))
	}
	buf := make([]byte, maxTokenFile+1)
	n, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return Token{}, fmt.Errorf("reading %s: %w", path, err)
	}
	if n > maxTokenFile {
		return Token{}, fmt.Errorf("%s is larger than %d bytes: not a token", path, maxTokenFile)
	}
	token := strings.TrimSpace(string(buf[:n]))
	if token == "" {
		return Token{}, fmt.Errorf("%s is empty", path)
	}
	if strings.ContainsAny(token, "\r\n") {
		return Token{}, fmt.Errorf("%s holds more than one line", path)
	}
	return Token{Path: path, Secret: token, perm: fi.Mode().Perm()}, nil
}

// fileKind names a file type for a person.
func fileKind(m fs.FileMode) string {
	switch m.Type() {
	case fs.ModeDir:
		return "a directory"
	case fs.ModeNamedPipe:
		return "a named pipe (FIFO)"
	case fs.ModeSocket:
		return "a socket"
	case fs.ModeDevice, fs.ModeDevice | fs.ModeCharDevice:
		return "a device"
	}
	return "of type " + m.Type().String()
}

// ListenAddress is a TCP address or a unix socket path.
type ListenAddress struct{ network, addr string }

// ParseListen reads "[IP]:PORT" (an IP literal or nothing for all interfaces; a port number, 0 for any)
// or "unix:///abs/path". Host names are refused: resolving one could give another address than meant (or
// several), and would make the start depend on DNS.
func ParseListen(s string) (ListenAddress, error) {
	if path, ok := strings.CutPrefix(s, "unix://"); ok {
		if !strings.HasPrefix(path, "/") {
			return ListenAddress{}, fmt.Errorf("%q: a unix socket needs an absolute path, as in unix:///run/shutdown-manager/api.sock", s)
		}
		return ListenAddress{"unix", path}, nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return ListenAddress{}, fmt.Errorf("%q: want [IP]:PORT or unix:///path", s)
	}
	if host != "" {
		if _, err := netip.ParseAddr(host); err != nil {
			return ListenAddress{}, fmt.Errorf("%q: the host must be an IP address (or empty for all interfaces), not a name", s)
		}
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return ListenAddress{}, fmt.Errorf("%q: the port must be a number from 0 to 65535", s)
	}
	return ListenAddress{"tcp", s}, nil
}

// Network is "tcp" or "unix"; Addr is the TCP address or the socket's path.
func (l ListenAddress) Network() string { return l.network }
func (l ListenAddress) Addr() string    { return l.addr }

func (l ListenAddress) String() string {
	if l.network == "unix" {
		return "unix://" + l.addr
	}
	return l.addr
}

// listen opens the listener. At a unix socket path, only a stale socket (one nobody answers) is replaced:
// a live one belongs to another process, and a file or directory there is not ours to delete.
func (l ListenAddress) listen() (net.Listener, error) {
	if l.network == "unix" {
		if err := removeStaleSocket(l.addr); err != nil {
			return nil, err
		}
	}
	return net.Listen(l.network, l.addr)
}

// removeStaleSocket removes the socket at path if nothing answers it (connection refused: its process is
// gone), does nothing if path does not exist, and refuses everything else.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("checking %s: %w", path, err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		kind := "a regular file"
		switch {
		case fi.IsDir():
			kind = "a directory"
		case fi.Mode().Type() != 0:
			kind = "not a socket (" + fi.Mode().Type().String() + ")"
		}
		return fmt.Errorf("%s exists and is %s: refusing to replace it", path, kind)
	}
	conn, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		conn.Close()
		return fmt.Errorf("%s: a running process answers on this socket (another shutdown-manager?): refusing to take it over", path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("%s: cannot tell whether the socket is in use: %w", path, err)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("removing stale socket: %w", err)
	}
	return nil
}

// apiServers are the running API listeners.
type apiServers struct {
	listen, metricsListen string       // as bound ("" when not serving)
	errs                  <-chan error // the first serving error
	stop                  func()       // closes the listeners; lets pending requests finish for up to 5s
}

// startAPI serves the HTTP API on cfg.Listen (and /metrics on cfg.Metrics, when set) until stop is called.
func startAPI(cfg APIConfig, s *stack, log *slog.Logger) (apiServers, error) {
	cfg.Token.WarnMode(log)
	opts := server.Options{Log: log, Registerer: s.reg, Token: cfg.Token.Secret, MaxWaiters: cfg.MaxWaiters}
	if cfg.Metrics == nil {
		opts.Gatherer = s.reg
	}
	handlers := []struct {
		la ListenAddress
		h  http.Handler
	}{{cfg.Listen, server.New(s.engine, opts)}}
	if cfg.Metrics != nil {
		handlers = append(handlers, struct {
			la ListenAddress
			h  http.Handler
		}{*cfg.Metrics, server.NewMetricsMux(s.reg)})
	}
	var servers []*http.Server
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, srv := range servers {
			if err := srv.Shutdown(ctx); err != nil {
				log.Warn("closing the API", "err", err)
			}
		}
	}
	errs := make(chan error, len(handlers))
	var bound []string
	for _, h := range handlers {
		ln, err := h.la.listen()
		if err != nil {
			stop()
			return apiServers{}, fmt.Errorf("listening on %s: %w", h.la, err)
		}
		ln = server.LimitListener(ln, cfg.MaxConns)
		srv := server.NewHTTPServer(h.h)
		servers = append(servers, srv)
		go func() {
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				errs <- err
			}
		}()
		bound = append(bound, listenText(ln))
	}
	a := apiServers{listen: bound[0], errs: errs, stop: stop}
	if len(bound) > 1 {
		a.metricsListen = bound[1]
	}
	return a, nil
}

// listenText is the address a listener really bound (the port chosen for ":0"), as --listen takes it.
func listenText(ln net.Listener) string {
	if ln.Addr().Network() == "unix" {
		return "unix://" + ln.Addr().String()
	}
	return ln.Addr().String()
}
