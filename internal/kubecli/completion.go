package kubecli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/cli"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/drain"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/inject"
	"github.com/envoy-shutdown-manager/shutdown-manager/internal/kubectl"
)

// flagValues are the values of the flags that take one of a few, by flag name, for completion (-o's are
// each command's cli.Outputs).
var flagValues = map[string][]string{
	"mode":              {string(inject.ModeHook), string(inject.ModeSidecar), string(inject.ModeAgent)},
	"binary-from":       {string(inject.BinaryCopy), string(inject.BinaryImageVolume)},
	"hook":              {string(inject.HookExec), string(inject.HookHTTP)},
	"sidecar-kind":      {string(inject.SidecarNative), string(inject.SidecarPlain)},
	"image-pull-policy": {"Always", "IfNotPresent", "Never"},
	"count":             {string(drain.ModeInflight), string(drain.ModeConnections), string(drain.ModeRequests)},
	"drain-listeners":   {string(drain.ListenerDrainNone), string(drain.ListenerDrainInbound), string(drain.ListenerDrainAll)},
	"progress":          {"auto", "always", "never"},
	"log-format":        {"json", "text"},
	"log-level":         {"debug", "info", "warn", "error"},
}

// shells are the shells completion writes a script for.
var shells = []string{"bash", "zsh", "fish"}

// compCommand is a command as completion sees it: its flags (from its FlagSet), the words its arguments
// may be, and its own commands (the plugin's).
type compCommand struct {
	name, key, summary string // key: the FlagSet's name ("kubectl status")
	flags              []compFlag
	args               []string
	sub                []compCommand
}

type compFlag struct {
	name   string // without dashes
	usage  string
	bool   bool
	values []string
}

// dashes spells a flag for the shell: -o, --output.
func (f compFlag) dashes() string { return cli.Dashed(f.name) }

// completionTree reads every command's FlagSet (cli.FlagSetOf) into what the scripts complete.
func completionTree(ctx context.Context) []compCommand {
	var tree []compCommand
	for _, c := range Commands() {
		cc := compOf(ctx, c, c.Name)
		switch c.Name {
		case "completion":
			cc.args = shells
		case "kubectl":
			for _, s := range kubectlCommands() {
				sc := compOf(ctx, s, "kubectl "+s.Name)
				if s.Name == "status" {
					for _, k := range kubectl.Kinds() {
						sc.args = append(sc.args, k+"/")
					}
				}
				cc.sub = append(cc.sub, sc)
			}
		}
		tree = append(tree, cc)
	}
	return tree
}

func compOf(ctx context.Context, c cli.Command, key string) compCommand {
	cc := compCommand{name: c.Name, key: key, summary: c.Summary}
	fs := cli.FlagSetOf(ctx, c)
	if fs == nil {
		return cc
	}
	key = fs.Name()
	cc.key = key
	fs.VisitAll(func(f *flag.Flag) {
		cf := compFlag{name: f.Name, usage: f.Usage, values: flagValues[f.Name]}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			cf.bool = true
		}
		if f.Name == "o" || f.Name == "output" {
			cf.values = cli.Outputs[key]
		}
		cc.flags = append(cc.flags, cf)
	})
	return cc
}

// runCompletion writes the completion script of a shell, generated from the commands' FlagSets.
func runCompletion(ctx context.Context, args []string, _ io.Reader, stdout, _ io.Writer) error {
	fs := flag.NewFlagSet("completion", flag.ContinueOnError)
	rest, err := cli.ParseArgs(fs, args, stdout)
	if err != nil {
		return err
	}
	if len(rest) != 1 || !slices.Contains(shells, rest[0]) {
		return cli.Usagef("name one shell: %s", strings.Join(shells, ", "))
	}
	tree := completionTree(ctx)
	switch rest[0] {
	case "bash":
		_, err = io.WriteString(stdout, bashCompletion(tree))
	case "zsh":
		_, err = io.WriteString(stdout, zshCompletion(tree))
	default:
		_, err = io.WriteString(stdout, fishCompletion(tree))
	}
	return err
}

// bashCompletion is a bash script defining _shutdown_manager, the completion of shutdown-manager: commands,
// the plugin's commands, flags (-o and --output alike), the values of flags that take one of a few, a
// command's argument words; files elsewhere. Source it (source <(shutdown-manager completion bash)), or
// write it into bash-completion's directory.
func bashCompletion(tree []compCommand) string {
	var b strings.Builder
	b.WriteString("# bash completion of shutdown-manager, written by `shutdown-manager completion bash`.\n")
	b.WriteString("# Use: source <(shutdown-manager completion bash)\n")
	b.WriteString("_shutdown_manager() {\n")
	b.WriteString("  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} key=${COMP_WORDS[1]}\n")
	b.WriteString("  COMPREPLY=()\n")
	fmt.Fprintf(&b, "  if (( COMP_CWORD == 1 )); then COMPREPLY=($(compgen -W %q -- \"$cur\")); return; fi\n", names(tree))
	for _, c := range tree {
		if len(c.sub) == 0 {
			continue
		}
		fmt.Fprintf(&b, "  if [[ $key == %s ]]; then\n", c.name)
		fmt.Fprintf(&b, "    if (( COMP_CWORD == 2 )); then COMPREPLY=($(compgen -W %q -- \"$cur\")); return; fi\n", names(c.sub))
		b.WriteString("    key=\"$key ${COMP_WORDS[2]}\"\n  fi\n")
	}
	b.WriteString("  if [[ $cur == -*=* ]]; then prev=${cur%%=*}; cur=${cur#*=}; fi\n")
	b.WriteString("  case \"$key $prev\" in\n")
	each(tree, func(c compCommand) {
		for _, f := range c.flags {
			if f.bool {
				continue
			}
			fmt.Fprintf(&b, "    %q|%q) ", c.key+" -"+f.name, c.key+" --"+f.name)
			if len(f.values) == 0 {
				b.WriteString("return ;;\n") // a value of no fixed set: bash's default (files)
				continue
			}
			fmt.Fprintf(&b, "COMPREPLY=($(compgen -W %q -- \"$cur\")); return ;;\n", strings.Join(f.values, " "))
		}
	})
	b.WriteString("  esac\n")
	b.WriteString("  local flags= args=\n  case \"$key\" in\n")
	each(tree, func(c compCommand) {
		var fl []string
		for _, f := range c.flags {
			fl = append(fl, f.dashes())
		}
		fmt.Fprintf(&b, "    %q) flags=%q args=%q ;;\n", c.key, strings.Join(fl, " "), strings.Join(c.args, " "))
	})
	b.WriteString("  esac\n")
	b.WriteString("  if [[ $cur == -* ]]; then COMPREPLY=($(compgen -W \"$flags\" -- \"$cur\")); return; fi\n")
	b.WriteString("  if [[ -n $args ]]; then\n")
	b.WriteString("    COMPREPLY=($(compgen -W \"$args\" -- \"$cur\"))\n")
	b.WriteString("    [[ ${COMPREPLY[0]} == */ ]] && type compopt >/dev/null 2>&1 && compopt -o nospace 2>/dev/null\n")
	b.WriteString("  fi\n")
	b.WriteString("}\n")
	b.WriteString("complete -o default -F _shutdown_manager shutdown-manager\n")
	return b.String()
}

// each calls fn for every command and every command of the plugin.
func each(tree []compCommand, fn func(compCommand)) {
	for _, c := range tree {
		fn(c)
		for _, s := range c.sub {
			fn(s)
		}
	}
}

// zshCompletion is the bash script run by zsh's bashcompinit, which gives bash's complete and compgen to
// zsh: one script, so the two complete alike.
func zshCompletion(tree []compCommand) string {
	return "#compdef shutdown-manager\n" +
		"# zsh completion of shutdown-manager, written by `shutdown-manager completion zsh`: the bash completion through\n" +
		"# zsh's bashcompinit. Use: source <(shutdown-manager completion zsh)\n" +
		"autoload -U +X compinit && compinit\n" +
		"autoload -U +X bashcompinit && bashcompinit\n" +
		bashCompletion(tree)
}

// fishCompletion is fish's complete commands for every command, flag and flag value.
func fishCompletion(tree []compCommand) string {
	var b strings.Builder
	b.WriteString("# fish completion of shutdown-manager, written by `shutdown-manager completion fish`.\n")
	b.WriteString("# Use: shutdown-manager completion fish > ~/.config/fish/completions/shutdown-manager.fish\n")
	b.WriteString("complete -c shutdown-manager -f\n")
	for _, c := range tree {
		fmt.Fprintf(&b, "complete -c shutdown-manager -n __fish_use_subcommand -a %s -d %s\n", c.name, fishQuote(c.summary))
	}
	for _, c := range tree {
		cond := "__fish_seen_subcommand_from " + c.name
		for _, s := range c.sub {
			fmt.Fprintf(&b, "complete -c shutdown-manager -n %s -a %s -d %s\n",
				fishQuote(cond+"; and not __fish_seen_subcommand_from "+names(c.sub)), s.name, fishQuote(s.summary))
		}
		fishFlags(&b, cond, c)
		for _, s := range c.sub {
			fishFlags(&b, cond+"; and __fish_seen_subcommand_from "+s.name, s)
		}
	}
	return b.String()
}

func names(cs []compCommand) string {
	var n []string
	for _, c := range cs {
		n = append(n, c.name)
	}
	return strings.Join(n, " ")
}

func fishFlags(b *strings.Builder, cond string, c compCommand) {
	if len(c.args) > 0 {
		fmt.Fprintf(b, "complete -c shutdown-manager -n %s -a %s\n", fishQuote(cond), fishQuote(strings.Join(c.args, " ")))
	}
	for _, f := range c.flags {
		opt := "-l " + f.name
		if len(f.name) == 1 {
			opt = "-s " + f.name
		}
		switch {
		case f.bool:
		case len(f.values) > 0:
			opt += " -x -a " + fishQuote(strings.Join(f.values, " "))
		default:
			opt += " -r -F"
		}
		desc, _, _ := strings.Cut(f.usage, "\n")
		if r := []rune(desc); len(r) > 80 {
			desc = string(r[:79]) + "…"
		}
		fmt.Fprintf(b, "complete -c shutdown-manager -n %s %s -d %s\n", fishQuote(cond), opt, fishQuote(desc))
	}
}

// fishQuote quotes s for fish: single quotes, with \ and ' escaped.
func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}
