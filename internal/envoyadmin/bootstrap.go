package envoyadmin

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/yamljson"
)

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
	var top any
	if err := yamljson.Unmarshal(data, &top); err != nil {
		return Address{}, false, fmt.Errorf("reading bootstrap: %w", err)
	}
	if _, ok := top.(map[string]any); !ok && top != nil {
		return Address{}, false, fmt.Errorf("the bootstrap is not a YAML or JSON mapping (%T)", top)
	}
	if err := yamljson.Unmarshal(data, &doc); err != nil {
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

// AdminFromCommandLine reads the admin address from the bootstrap named on Envoy's command line (its argv,
// argv[0] first, read by ParseCommandLine), reading files with readFile: --config-yaml's admin address when it
// names one (Envoy merges it over the file), else the file's. It returns an error, never a guess, when the
// command line is one Envoy would refuse or names no admin address.
func AdminFromCommandLine(argv []string, readFile func(string) ([]byte, error)) (Address, error) {
	if len(argv) == 0 {
		return Address{}, fmt.Errorf("envoy's command line is empty")
	}
	cl, err := ParseCommandLine(argv[1:])
	if err != nil {
		return Address{}, err
	}
	return AdminOf(cl, readFile)
}

// AdminOf is the admin address of the bootstrap cl names, reading its file with readFile.
func AdminOf(cl CommandLine, readFile func(string) ([]byte, error)) (Address, error) {
	if cl.ConfigYAML != "" {
		addr, found, err := AdminFromBootstrap([]byte(cl.ConfigYAML))
		if err != nil {
			return Address{}, fmt.Errorf("envoy's --config-yaml: %w", err)
		}
		if found {
			return addr, nil
		}
	}
	if cl.ConfigPath == "" {
		if cl.ConfigYAML != "" {
			return Address{}, fmt.Errorf("envoy's --config-yaml names no admin address and no -c file is given")
		}
		return Address{}, fmt.Errorf("envoy's command line names no bootstrap (-c or --config-yaml)")
	}
	data, err := readFile(cl.ConfigPath)
	if err != nil {
		return Address{}, fmt.Errorf("reading envoy's bootstrap: %w", err)
	}
	addr, found, err := AdminFromBootstrap(data)
	if err != nil {
		return Address{}, fmt.Errorf("%s: %w", cl.ConfigPath, err)
	}
	if !found {
		return Address{}, fmt.Errorf("%s has no admin address", cl.ConfigPath)
	}
	return addr, nil
}
