// Package envoyadmin talks to Envoy's admin API over TCP or a unix socket, and parses what it answers.
//
// The transport (Client) is kept apart from the pure parsers (ParseStats, ParseServerState), which are
// tested with fixtures captured from real Envoy releases and fuzzed.
package envoyadmin

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
)

// Address is where Envoy's admin API listens: a TCP address (an IP literal and a port) or a unix socket path.
type Address struct {
	Network string // "tcp" or "unix"
	Addr    string // "127.0.0.1:9901", "[::1]:9901" or "/abs/path/admin.sock"
}

// String gives the address back in the form ParseAddress takes.
func (a Address) String() string {
	if a.Network == "unix" {
		return "unix://" + a.Addr
	}
	return "http://" + a.Addr
}

// ParseAddress reads "http://IP:PORT", "IP:PORT" or "unix:///path/admin.sock".
//
// Host names are refused, "localhost" included: it may resolve to ::1 while Envoy's admin listens on
// 127.0.0.1 only (Envoy Gateway #9853), and a drain that cannot reach Envoy drains nothing.
func ParseAddress(s string) (Address, error) {
	if s == "" {
		return Address{}, fmt.Errorf("empty address")
	}
	if rest, ok := strings.CutPrefix(s, "unix://"); ok {
		if !strings.HasPrefix(rest, "/") {
			return Address{}, fmt.Errorf("%q: a unix socket needs an absolute path, as in unix:///run/envoy/admin.sock", s)
		}
		return Address{Network: "unix", Addr: rest}, nil
	}
	hostport := s
	if strings.Contains(s, "://") {
		u, err := url.Parse(s)
		if err != nil {
			return Address{}, fmt.Errorf("%q: %w", s, err)
		}
		if u.Scheme != "http" {
			return Address{}, fmt.Errorf("%q: scheme %q is not supported (use http:// or unix://)", s, u.Scheme)
		}
		if u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.User != nil {
			return Address{}, fmt.Errorf("%q: give only scheme, IP and port", s)
		}
		hostport = u.Host
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return Address{}, fmt.Errorf("%q: %w", s, err)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return Address{}, fmt.Errorf("%q: host must be an IP address such as 127.0.0.1 (a name like localhost may resolve to ::1)", s)
	}
	if ip.Zone() != "" {
		return Address{}, fmt.Errorf("%q: zoned IPv6 addresses are not supported", s)
	}
	if p, err := netip.ParseAddrPort(net.JoinHostPort(host, port)); err != nil || p.Port() == 0 {
		return Address{}, fmt.Errorf("%q: port must be a number from 1 to 65535", s)
	}
	return Address{Network: "tcp", Addr: net.JoinHostPort(ip.String(), port)}, nil
}
