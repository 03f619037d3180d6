package envoyadmin

import (
	"errors"
	"strings"
	"testing"
)

// TestParseCommandLine: each form as Envoy's parser takes or refuses it (test/integration's
// TestEnvoyCommandLineForms tries the same forms on the real Envoy).
func TestParseCommandLine(t *testing.T) {
	const yaml = "admin: {address: {socket_address: {address: '::1', port_value: 19000}}}"
	tests := []struct {
		name    string
		args    []string
		want    CommandLine
		wantErr string
	}{
		{"two arguments", []string{"-c", "/etc/envoy.yaml", "--log-level", "info"}, CommandLine{ConfigPath: "/etc/envoy.yaml"}, ""},
		{"long name", []string{"--config-path", "/a.json"}, CommandLine{ConfigPath: "/a.json"}, ""},
		{"one argument, short", []string{"-c /etc/envoy.yaml"}, CommandLine{ConfigPath: "/etc/envoy.yaml"}, ""},
		{"one argument, long", []string{"--config-path /a.json", "--drain-time-s 60"}, CommandLine{ConfigPath: "/a.json"}, ""},
		{"Envoy Gateway v1.2-v1.5", []string{"--service-cluster default", "--service-node $(ENVOY_POD_NAME)", "--config-yaml " + yaml, "--log-level warn", "--cpuset-threads"},
			CommandLine{ConfigYAML: yaml}, ""},
		{"Envoy Gateway v1.7-", []string{"--service-cluster", "default", "--config-yaml", yaml, "--cpuset-threads"}, CommandLine{ConfigYAML: yaml}, ""},
		{"one argument split at its first space", []string{"--config-path  /a.json"}, CommandLine{ConfigPath: " /a.json"}, ""},
		{"flag and a space: the next argument", []string{"-c ", "/a.json"}, CommandLine{ConfigPath: "/a.json"}, ""},
		{"both", []string{"--config-yaml", "admin: {}", "-c", "/b.yaml"}, CommandLine{ConfigPath: "/b.yaml", ConfigYAML: "admin: {}"}, ""},
		{"a value that looks like a flag", []string{"--service-node", "-c", "-c", "/b.yaml"}, CommandLine{ConfigPath: "/b.yaml"}, ""},
		{"empty value", []string{"-c", "", "--config-yaml", yaml}, CommandLine{ConfigYAML: yaml}, ""},
		{"stats tags repeat", []string{"--stats-tag a:b", "--stats-tag", "c:d", "-c", "/x"}, CommandLine{ConfigPath: "/x"}, ""},
		{"the rest after --", []string{"-c", "/x", "--", "-c", "/y", "anything"}, CommandLine{ConfigPath: "/x"}, ""},
		{"the rest after --ignore_rest", []string{"--ignore_rest", "-c", "/y"}, CommandLine{}, ""},
		{"nothing", nil, CommandLine{}, ""},

		{"flag=value", []string{"--config-path=/a.json"}, CommandLine{}, "separated by a space, not by ="},
		{"-c=value", []string{"-c=/a.json"}, CommandLine{}, "separated by a space, not by ="},
		{"--config-yaml=value", []string{"--config-yaml=" + yaml}, CommandLine{}, "separated by a space, not by ="},
		{"-cvalue", []string{"-c/a.json"}, CommandLine{}, "none of envoy's flags"},
		{"tab", []string{"--log-level\tinfo", "-c", "/x"}, CommandLine{}, "none of envoy's flags"},
		{"a switch with a value", []string{"--disable-hot-restart x", "-c", "/x"}, CommandLine{}, "none of envoy's flags"},
		{"unknown flag", []string{"--bogus", "-c", "/x"}, CommandLine{}, "none of envoy's flags"},
		{"not a flag", []string{"-c", "/x", "extra"}, CommandLine{}, "none of envoy's flags"},
		{"-c twice", []string{"-c", "/x", "-c", "/y"}, CommandLine{}, "--config-path is given twice"},
		{"-c and --config-path", []string{"-c /x", "--config-path", "/x"}, CommandLine{}, "--config-path is given twice"},
		{"--config-yaml twice", []string{"--config-yaml", yaml, "--config-yaml " + yaml}, CommandLine{}, "--config-yaml is given twice"},
		{"a switch twice", []string{"--cpuset-threads", "--cpuset-threads"}, CommandLine{}, "--cpuset-threads is given twice"},
		{"no value", []string{"--drain-time-s 60", "-c"}, CommandLine{}, "-c has no value"},
		{"--config-yaml's value is -c", []string{"--config-yaml", "-c", "/x"}, CommandLine{}, "none of envoy's flags"},
		{"help", []string{"-c", "/x", "--help"}, CommandLine{}, "print and exit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseCommandLine(tt.args)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("ParseCommandLine(%q) = %+v, %v; want one line containing %q", tt.args, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseCommandLine(%q) = %+v, %v; want %+v", tt.args, got, err, tt.want)
			}
		})
	}
}

func TestAdminFromCommandLine(t *testing.T) {
	files := map[string]string{
		"/etc/envoy.yaml": "admin: {address: {socket_address: {address: 127.0.0.1, port_value: 9901}}}",
		"/no-admin.yaml":  "static_resources: {}",
	}
	read := func(name string) ([]byte, error) {
		if s, ok := files[name]; ok {
			return []byte(s), nil
		}
		return nil, errors.New("no such file")
	}
	v6 := "admin:\n  address:\n    socket_address:\n      address: ::1\n      port_value: 19000\n"
	tests := []struct {
		name    string
		argv    []string
		want    string
		wantErr string
	}{
		{"file", []string{"envoy", "-c", "/etc/envoy.yaml"}, "http://127.0.0.1:9901", ""},
		{"file, one argument", []string{"envoy", "-c /etc/envoy.yaml"}, "http://127.0.0.1:9901", ""},
		{"inline, one argument (Envoy Gateway v1.2-v1.5 IPv6)", []string{"envoy", "--service-cluster default", "--config-yaml " + v6, "--log-level warn"}, "http://[::1]:19000", ""},
		{"inline over the file", []string{"envoy", "-c", "/etc/envoy.yaml", "--config-yaml", v6}, "http://[::1]:19000", ""},
		{"inline without admin, the file's", []string{"envoy", "-c", "/etc/envoy.yaml", "--config-yaml", "node: {id: x}"}, "http://127.0.0.1:9901", ""},
		{"flag=value", []string{"envoy", "--config-path=/etc/envoy.yaml"}, "", "not by ="},
		{"a placeholder inline", []string{"envoy", "--config-yaml", "test bootstrap config"}, "", "--config-yaml"},
		{"inline without admin, no file", []string{"envoy", "--config-yaml", "node: {id: x}"}, "", "no admin address"},
		{"file without admin", []string{"envoy", "-c", "/no-admin.yaml"}, "", "has no admin address"},
		{"no bootstrap", []string{"envoy", "--concurrency", "2"}, "", "names no bootstrap"},
		{"missing file", []string{"envoy", "-c", "/missing.yaml"}, "", "no such file"},
		{"empty", nil, "", "empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := AdminFromCommandLine(tt.argv, read)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("AdminFromCommandLine = %v, %v; want an error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got.String() != tt.want {
				t.Fatalf("AdminFromCommandLine = %v, %v; want %s", got, err, tt.want)
			}
		})
	}
}

// FuzzParseCommandLine: arguments separated by NUL. Whatever Envoy's arguments, ParseCommandLine does not
// panic, its error is one line, and what it accepts it reads again the same when written in the two-argument
// form, in the one-argument form, and with anything after a `--`.
func FuzzParseCommandLine(f *testing.F) {
	f.Add("-c\x00/etc/envoy.yaml\x00--log-level\x00info")
	f.Add("--service-cluster default\x00--config-yaml admin: {address: {socket_address: {address: '::1', port_value: 19000}}}\x00--cpuset-threads")
	f.Add("--config-path=/a.json")
	f.Add("-c \x00/a\x00--\x00-c\x00/b")
	f.Add("--stats-tag a:b\x00--stats-tag\x00c:d\x00--config-yaml\x00x")
	f.Fuzz(func(t *testing.T, in string) {
		args := strings.Split(in, "\x00")
		cl, err := ParseCommandLine(args)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("ParseCommandLine(%q): error on several lines: %q", args, err)
			}
			return
		}
		var two, one []string
		if cl.ConfigPath != "" {
			two = append(two, "-c", cl.ConfigPath)
			one = append(one, "--config-path "+cl.ConfigPath)
		}
		if cl.ConfigYAML != "" {
			two = append(two, "--config-yaml", cl.ConfigYAML)
			one = append(one, "--config-yaml "+cl.ConfigYAML)
		}
		for _, again := range [][]string{two, one, append(append(append([]string(nil), args...), "--"), args...)} {
			if got, err := ParseCommandLine(again); err != nil || got != cl {
				t.Fatalf("ParseCommandLine(%q) = %+v; but %q gives %+v, %v", args, cl, again, got, err)
			}
		}
	})
}
