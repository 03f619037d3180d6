package kubecli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/cli"
)

// CheckArgs parses a command line's arguments (as Run takes them: the command first, or help and a command;
// "kubectl" and the plugin's command for the plugin) with the command's own flags, without running it: an unknown command or
// flag, or a bad flag value the flag package sees, is an error. The help's examples and docs/cli.md are
// checked with it.
func CheckArgs(args []string) error {
	return checkArgs(Commands(), args)
}

// checkArgs is CheckArgs over the command table table.
func checkArgs(table []cli.Command, args []string) error {
	if len(args) == 0 {
		return errors.New("no command")
	}
	if len(args) == 2 && args[0] == "help" {
		args = []string{args[1], "--help"}
	}
	name := args[0]
	if name == "kubectl" {
		if len(args) < 2 {
			return errors.New("kubectl: no command")
		}
		table, name, args = kubectlCommands(), args[1], args[1:]
	}
	i := slices.IndexFunc(table, func(c cli.Command) bool { return c.Name == name })
	if i < 0 {
		return fmt.Errorf("unknown command %q", name)
	}
	fs := cli.FlagSetOf(context.Background(), table[i])
	if fs == nil {
		return fmt.Errorf("%s: no flags read", name)
	}
	_, err := cli.ParseArgs(fs, args[1:], io.Discard)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}

// CommandsIn are the arguments Run would get for each command of this binary in a shell line (its commands
// separated by " | "): "shutdown-manager X …" is X …, "kubectl shutdown-manager X …" is kubectl X …; other
// programs' commands are left out.
func CommandsIn(line string) [][]string {
	var cmds [][]string
	for _, part := range strings.Split(line, " | ") {
		words := strings.Fields(part)
		switch {
		case len(words) >= 2 && words[0] == "shutdown-manager":
			cmds = append(cmds, words[1:])
		case len(words) >= 3 && words[0] == "kubectl" && words[1] == "shutdown-manager":
			cmds = append(cmds, append([]string{"kubectl"}, words[2:]...))
		}
	}
	return cmds
}
