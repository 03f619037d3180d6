package envoyadmin

import "testing"

func TestParseAddress(t *testing.T) {
	tests := []struct {
		in      string
		want    Address
		wantErr bool
	}{
		{"http://127.0.0.1:9901", Address{"tcp", "127.0.0.1:9901"}, false},
		{"127.0.0.1:9901", Address{"tcp", "127.0.0.1:9901"}, false},
		{"http://[::1]:9901", Address{"tcp", "[::1]:9901"}, false},
		{"http://127.0.0.1:9901/", Address{"tcp", "127.0.0.1:9901"}, false},
		{"unix:///run/envoy/admin.sock", Address{"unix", "/run/envoy/admin.sock"}, false},
		{"http://localhost:9901", Address{}, true},
		{"unix://relative.sock", Address{}, true},
		{"https://127.0.0.1:9901", Address{}, true},
		{"http://127.0.0.1:9901/stats", Address{}, true},
		{"http://127.0.0.1", Address{}, true},
		{"127.0.0.1:0", Address{}, true},
		{"127.0.0.1:70000", Address{}, true},
		{"", Address{}, true},
	}
	for _, tt := range tests {
		got, err := ParseAddress(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseAddress(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
		if err == nil {
			if again, err := ParseAddress(got.String()); err != nil || again != got {
				t.Errorf("ParseAddress(%q.String()) = %v, %v; want it back", tt.in, again, err)
			}
		}
	}
}

func FuzzParseAddress(f *testing.F) {
	for _, s := range []string{"http://127.0.0.1:9901", "unix:///a.sock", "[::1]:1", "http://x:y", "unix://"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseAddress(s)
		if err != nil {
			return
		}
		if a.Network != "tcp" && a.Network != "unix" {
			t.Fatalf("ParseAddress(%q) network %q", s, a.Network)
		}
		if again, err := ParseAddress(a.String()); err != nil || again != a {
			t.Fatalf("ParseAddress(%q) = %v; round trip gives %v, %v", s, a, again, err)
		}
	})
}
