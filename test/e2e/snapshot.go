//go:build e2e && linux

package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// hostSnapshot is everything of the host a cluster run could leave changed: taken before the cluster starts and
// again after the teardown, the two must be equal (the e2e fails otherwise, naming each difference). Every field
// is a sorted list of lines, so that a difference reads as the line that came or went.
type hostSnapshot map[string][]string

// The parts of a snapshot, in the order a difference is reported.
var snapshotParts = []string{"mount", "netns", "link", "route", "iptables", "nft", "cgroup", "sysctl", "process"}

// takeSnapshot reads the host's state. ours are path prefixes (the run directory, the binaries' directories):
// a process counts when it runs from one of them, names one on its command line, lives in a kubepods cgroup or
// in a container's root; other processes on a shared machine are not the e2e's business.
func takeSnapshot(ours []string) hostSnapshot {
	s := hostSnapshot{}
	s["mount"] = mounts()
	s["netns"] = dirNames("/run/netns", "/var/run/netns")
	s["link"] = fieldsOf(run("ip", "-o", "link", "show"), 1)
	s["route"] = append(lines(run("ip", "-4", "route", "show", "table", "all")), lines(run("ip", "-6", "route", "show", "table", "all"))...)
	s["iptables"] = append(ruleLines("iptables-save"), ruleLines("ip6tables-save")...)
	s["nft"] = nftTables()
	s["cgroup"] = cgroupDirs()
	for _, name := range sysctls {
		if b, err := os.ReadFile("/proc/sys/" + name); err == nil {
			s["sysctl"] = append(s["sysctl"], name+"="+strings.TrimSpace(string(b)))
		}
	}
	s["process"] = ourProcesses(ours)
	for k := range s {
		slices.Sort(s[k])
		s[k] = slices.Compact(s[k])
	}
	return s
}

// summary counts the lines of each part: what the comparison covered.
func (s hostSnapshot) summary() string {
	var parts []string
	for _, p := range snapshotParts {
		parts = append(parts, fmt.Sprintf("%d %s", len(s[p]), p))
	}
	return strings.Join(parts, ", ")
}

// diff returns one line per difference from before to after: "+ part: line" for what appeared, "- part: line"
// for what went.
func (before hostSnapshot) diff(after hostSnapshot) []string {
	var out []string
	for _, part := range snapshotParts {
		for _, l := range after[part] {
			if !slices.Contains(before[part], l) {
				out = append(out, "+ "+part+": "+l)
			}
		}
		for _, l := range before[part] {
			if !slices.Contains(after[part], l) {
				out = append(out, "- "+part+": "+l)
			}
		}
	}
	return out
}

// mounts lists "mount point (fstype source)" of this mount namespace: nsfs bind mounts of network namespaces,
// kubelet's and the overlay rootfs mounts all show here.
func mounts() []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return []string{"(unreadable: " + err.Error() + ")"}
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		i := slices.Index(f, "-")
		if len(f) < 5 || i < 0 || i+2 >= len(f) {
			continue
		}
		out = append(out, fmt.Sprintf("%s (%s %s)", unescapeMount(f[4]), f[i+1], f[i+2]))
	}
	return out
}

func dirNames(dirs ...string) []string {
	var out []string
	for _, d := range dirs {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			out = append(out, filepath.Join(d, e.Name()))
		}
	}
	return out
}

func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// fieldsOf returns field n (0-based, ":" trimmed) of each line: `ip -o link` names.
func fieldsOf(s string, n int) []string {
	var out []string
	for _, l := range lines(s) {
		if f := strings.Fields(l); len(f) > n {
			out = append(out, strings.TrimSuffix(f[n], ":"))
		}
	}
	return out
}

var chainCounters = regexp.MustCompile(` \[\d+:\d+\]$`)

// ruleLines returns the table, chain and rule lines of iptables-save (or ip6tables-save) without comments and
// counters, each prefixed with its table.
func ruleLines(save string) []string {
	out, err := exec.Command(save).Output()
	if err != nil {
		return nil
	}
	var rules []string
	table := ""
	for _, l := range lines(string(out)) {
		switch {
		case strings.HasPrefix(l, "#"), l == "COMMIT":
		case strings.HasPrefix(l, "*"):
			table = l[1:]
		default:
			rules = append(rules, save+" "+table+" "+chainCounters.ReplaceAllString(l, ""))
		}
	}
	return rules
}

// cgroupDirs lists, in every hierarchy, the top-level cgroups (a new one, such as kubelet's kubepods, is the
// cluster's) and the kubepods cgroups three levels deep (QoS classes and pods). Cgroups below another owner's
// top-level one are that owner's business: on these machines the sandbox makes one per command it runs.
func cgroupDirs() []string {
	var out []string
	roots, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, r := range roots {
		_ = filepath.WalkDir(r, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() || p == r {
				return nil
			}
			rel, _ := filepath.Rel(r, p)
			depth := strings.Count(rel, "/") + 1
			switch {
			case depth == 1:
				out = append(out, p)
				if !strings.HasPrefix(rel, "kubepods") {
					return filepath.SkipDir
				}
			case depth > 3:
				return filepath.SkipDir
			default:
				out = append(out, p)
			}
			return nil
		})
	}
	return out
}

// ourProcesses lists "comm (exe)" of the processes that belong to a cluster run (see takeSnapshot).
func ourProcesses(ours []string) []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		dir := filepath.Join("/proc", e.Name())
		exe, _ := os.Readlink(filepath.Join(dir, "exe"))
		root, _ := os.Readlink(filepath.Join(dir, "root"))
		cmdline, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
		cgroup, _ := os.ReadFile(filepath.Join(dir, "cgroup"))
		comm, _ := os.ReadFile(filepath.Join(dir, "comm"))
		mine := bytes.Contains(cgroup, []byte("kubepods")) || (root != "" && root != "/")
		for _, p := range ours {
			if p != "" && (strings.HasPrefix(exe, p) || bytes.Contains(cmdline, []byte(p))) {
				mine = true
			}
		}
		if mine {
			out = append(out, fmt.Sprintf("%s %s (%s)", e.Name(), strings.TrimSpace(string(comm)), exe))
		}
	}
	return out
}

func run(name string, args ...string) string {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("(%s: %v)", name, err)
	}
	return strings.TrimSpace(string(out))
}

func readTrim(p string) string {
	b, _ := os.ReadFile(p)
	return strings.TrimSpace(string(b))
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}
