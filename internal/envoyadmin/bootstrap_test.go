package envoyadmin

import (
	"reflect"
	"testing"
)

func TestAdminFromBootstrap(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Address
		found   bool
		wantErr bool
	}{
		{"yaml socket", "admin:\n  address:\n    socket_address: {address: 127.0.0.1, port_value: 9901}\n", Address{"tcp", "127.0.0.1:9901"}, true, false},
		{"json string port", `{"admin":{"address":{"socket_address":{"address":"::1","port_value":"9901"}}}}`, Address{"tcp", "[::1]:9901"}, true, false},
		{"wildcard v4", "admin: {address: {socket_address: {address: 0.0.0.0, port_value: 15000}}}", Address{"tcp", "127.0.0.1:15000"}, true, false},
		{"wildcard v6", "admin: {address: {socket_address: {address: '::', port_value: 15000}}}", Address{"tcp", "[::1]:15000"}, true, false},
		{"pipe", "admin: {address: {pipe: {path: /run/envoy/admin.sock}}}", Address{"unix", "/run/envoy/admin.sock"}, true, false},
		{"no admin", "static_resources: {}", Address{}, false, false},
		{"port 0", "admin: {address: {socket_address: {address: 127.0.0.1, port_value: 0}}}", Address{}, true, true},
		{"host name", "admin: {address: {socket_address: {address: localhost, port_value: 9901}}}", Address{}, true, true},
		{"not yaml", "admin: [", Address{}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, found, err := AdminFromBootstrap([]byte(tt.in))
			if (err != nil) != tt.wantErr || found != tt.found || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("AdminFromBootstrap = %v, %v, %v; want %v, %v, error %v", got, found, err, tt.want, tt.found, tt.wantErr)
			}
		})
	}
}

func FuzzAdminFromBootstrap(f *testing.F) {
	f.Add("admin: {address: {socket_address: {address: 127.0.0.1, port_value: 9901}}}")
	f.Add(`{"admin":{"address":{"pipe":{"path":"/a.sock"}}}}`)
	f.Fuzz(func(t *testing.T, in string) {
		a, found, err := AdminFromBootstrap([]byte(in))
		if err != nil || !found {
			return
		}
		if again, err := ParseAddress(a.String()); err != nil || again != a {
			t.Fatalf("AdminFromBootstrap(%q) = %v, which ParseAddress reads as %v, %v", in, a, again, err)
		}
	})
}
