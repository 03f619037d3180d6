package envoyadmin

import (
	"fmt"
	"strings"
)

// Envoy's command line, read as Envoy's own parser reads it.
//
// Envoy parses its flags with TCLAP, its delimiter a space (source/server/options_impl.cc:
// `TCLAP::CmdLine cmd("envoy", ' ', ...)`). What that accepts, tried on Envoy 1.36.2 and 1.40.0:
//   - a flag and its value as two arguments: `-c /etc/envoy.yaml`, `--config-yaml <yaml>`;
//   - a flag and its value in one argument, split at its first space: `-c /etc/envoy.yaml`,
//     `--config-yaml admin: …` (Envoy Gateway v1.2–v1.5 render this form); a flag followed by a space and
//     nothing more takes the next argument as its value;
//   - a switch (`--disable-hot-restart`) only as the whole argument;
//   - `--` (or `--ignore_rest`): every argument after it is ignored.
//
// What it refuses, so Envoy does not start: `--flag=value` and `-c=value` ("Couldn't find match for
// argument"), a flag it does not know, an argument that is no flag, a flag without its value, and a flag
// given twice ("Argument already set!"; --stats-tag alone may repeat). ParseCommandLine refuses the same,
// so that no address is ever read from a command line on which Envoy would not have started.

// CommandLine is what Envoy's command line says about its bootstrap.
type CommandLine struct {
	ConfigPath string // -c, --config-path: the bootstrap file; "" when not given (or given empty)
	ConfigYAML string // --config-yaml: a bootstrap merged over the file's; "" when not given
}

// envoyValueFlags are Envoy's flags that take a value (Envoy 1.36–1.40, `envoy --help`), each by the name
// TCLAP reports it; a short flag maps to its long name.
var envoyValueFlags = map[string]string{
	"-c": "--config-path", "--config-path": "--config-path", "--config-yaml": "--config-yaml",
	"-l": "--log-level", "--log-level": "--log-level",
	"--admin-address-path": "", "--base-id": "", "--base-id-path": "", "--component-log-level": "",
	"--concurrency": "", "--disable-extensions": "", "--drain-strategy": "", "--drain-time-s": "",
	"--file-flush-interval-msec": "", "--file-flush-min-size-kb": "", "--local-address-ip-version": "",
	"--log-format": "", "--log-path": "", "--mode": "", "--parent-shutdown-time-s": "", "--restart-epoch": "",
	"--service-cluster": "", "--service-node": "", "--service-zone": "", "--socket-mode": "", "--socket-path": "",
	"--stats-tag": "",
}

// envoySwitches are Envoy's flags without a value; true for those that make Envoy print and exit.
var envoySwitches = map[string]bool{
	"--allow-unknown-fields": false, "--allow-unknown-static-fields": false, "--cpuset-threads": false,
	"--disable-hot-restart": false, "--enable-core-dump": false, "--enable-fine-grain-logging": false,
	"--enable-mutex-tracing": false, "--ignore-unknown-dynamic-fields": false, "--log-format-escaped": false,
	"--log-stacktrace-single-entry": false, "--reject-unknown-dynamic-fields": false, "--skip-deprecated-logs": false,
	"--skip-hot-restart-on-no-parent": false, "--skip-hot-restart-parent-stats": false, "--use-dynamic-base-id": false,
	"-h": true, "--help": true, "--version": true, "--hot-restart-version": true,
}

// ParseCommandLine reads Envoy's arguments (its argv without argv[0]) as Envoy does, and returns its bootstrap
// source. An error says, in one line, why Envoy would not start with these arguments (or would only print
// and exit): such a command line names no admin address.
func ParseCommandLine(args []string) (CommandLine, error) {
	var cl CommandLine
	seen := map[string]bool{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || a == "--ignore_rest" {
			break // Envoy ignores every argument after it
		}
		if exits, ok := envoySwitches[a]; ok {
			if exits {
				return CommandLine{}, fmt.Errorf("envoy's argument %s makes it print and exit", a)
			}
			if seen[a] {
				return CommandLine{}, fmt.Errorf("envoy's flag %s is given twice (envoy refuses: Argument already set)", a)
			}
			seen[a] = true
			continue
		}
		flag, value := a, ""
		if j := strings.IndexByte(a, ' '); j > 1 { // TCLAP splits at the first space past the second character
			flag, value = a[:j], a[j+1:]
		}
		name, ok := envoyValueFlags[flag]
		if !ok {
			return CommandLine{}, unknownArgument(a)
		}
		if name == "" {
			name = flag
		}
		if value == "" { // the flag alone (or followed by a space only): the value is the next argument
			if i+1 >= len(args) {
				return CommandLine{}, fmt.Errorf("envoy's flag %s has no value (envoy refuses: Missing a value)", flag)
			}
			i++
			value = args[i]
		}
		if seen[name] && name != "--stats-tag" {
			return CommandLine{}, fmt.Errorf("envoy's flag %s is given twice (envoy refuses: Argument already set)", name)
		}
		seen[name] = true
		switch name {
		case "--config-path":
			cl.ConfigPath = value
		case "--config-yaml":
			cl.ConfigYAML = value
		}
	}
	return cl, nil
}

// unknownArgument says why Envoy refuses argument a, with the form it would take where it is a known flag
// written as flag=value.
func unknownArgument(a string) error {
	shown := a
	if len(shown) > 60 {
		shown = shown[:57] + "..."
	}
	if flag, _, ok := strings.Cut(a, "="); ok && !strings.Contains(flag, " ") {
		if _, known := envoyValueFlags[flag]; known {
			return fmt.Errorf("envoy refuses the argument %q: its parser takes %s and its value separated by a space, not by =", shown, flag)
		}
	}
	return fmt.Errorf("envoy refuses the argument %q: it is none of envoy's flags", shown)
}
