package envoyadmin

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// BootstrapSource finds Envoy's bootstrap on its command line: the file of -c/--config-path and the inline
// --config-yaml (which Envoy merges over the file). Both are empty if neither is given.
func BootstrapSource(args []string) (path, inline string) {
	for i := 0; i < len(args); i++ {
		name, value, hasValue := strings.Cut(args[i], "=")
		if !hasValue && i+1 < len(args) {
			value = args[i+1]
		}
		switch name {
		case "-c", "--config-path":
			path = value
		case "--config-yaml":
			inline = value
		default:
			continue
		}
		if !hasValue {
			i++
		}
	}
	return path, inline
}

// AdminFromBootstrap reads the admin address from an Envoy bootstrap (YAML or JSON): a socket_address
// (a wildcard address becomes loopback of the same family) or a pipe. found is false when the bootstrap
// names no admin address.
func AdminFromBootstrap(data []byte) (addr Address, found bool, err error) {
	var doc struct {
		Admin *struct {
			Address *struct {
				SocketAddress *struct {
					Address   string `json:"address"`
					PortValue any    `json:"port_value"`
				} `json:"socket_address"`
				Pipe *struct {
					Path string `json:"path"`
				} `json:"pipe"`
			} `json:"address"`
		} `json:"admin"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return Address{}, false, fmt.Errorf("reading bootstrap: %w", err)
	}
	if doc.Admin == nil || doc.Admin.Address == nil {
		return Address{}, false, nil
	}
	a := doc.Admin.Address
	switch {
	case a.Pipe != nil:
		if !strings.HasPrefix(a.Pipe.Path, "/") {
			return Address{}, true, fmt.Errorf("bootstrap admin pipe path %q is not absolute", a.Pipe.Path)
		}
		return Address{Network: "unix", Addr: a.Pipe.Path}, true, nil
	case a.SocketAddress != nil:
		ip, err := netip.ParseAddr(a.SocketAddress.Address)
		if err != nil {
			return Address{}, true, fmt.Errorf("bootstrap admin address %q is not an IP address", a.SocketAddress.Address)
		}
		if ip.IsUnspecified() {
			ip = netip.MustParseAddr("127.0.0.1")
			if a.SocketAddress.Address != "0.0.0.0" {
				ip = netip.IPv6Loopback()
			}
		}
		// proto3 JSON allows the port as a number or a string.
		port, err := strconv.Atoi(strings.TrimSpace(fmt.Sprint(a.SocketAddress.PortValue)))
		if err != nil || port <= 0 || port > 65535 {
			return Address{}, true, fmt.Errorf("bootstrap admin port %v is not a fixed port (give --admin-address)", a.SocketAddress.PortValue)
		}
		return Address{Network: "tcp", Addr: net.JoinHostPort(ip.String(), strconv.Itoa(port))}, true, nil
	}
	return Address{}, true, fmt.Errorf("bootstrap admin address is neither a socket_address nor a pipe")
}

// AdminFromCommandLine reads the admin address from the bootstrap named on Envoy's command line (its argv),
// reading files with readFile.
func AdminFromCommandLine(envoyArgs []string, readFile func(string) ([]byte, error)) (Address, error) {
	path, inline := BootstrapSource(envoyArgs)
	if inline != "" { // merged over the file by Envoy: it wins when it names an admin address
		if addr, found, err := AdminFromBootstrap([]byte(inline)); found || err != nil {
			return addr, err
		}
	}
	if path == "" {
		return Address{}, fmt.Errorf("envoy's command line names no bootstrap (-c)")
	}
	data, err := readFile(path)
	if err != nil {
		return Address{}, fmt.Errorf("reading envoy's bootstrap: %w", err)
	}
	addr, found, err := AdminFromBootstrap(data)
	if err != nil {
		return Address{}, fmt.Errorf("%s: %w", path, err)
	}
	if !found {
		return Address{}, fmt.Errorf("%s has no admin address", path)
	}
	return addr, nil
}
