package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// drainFinished reads the time and outcome of the manager's JSON log line "drain finished" from path.
func drainFinished(path string) (time.Time, string) {
	f, err := os.Open(path)
	if err != nil {
		return time.Time{}, "no log"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var l struct {
			Time    time.Time `json:"time"`
			Msg     string    `json:"msg"`
			Outcome string    `json:"outcome"`
		}
		if json.Unmarshal(line, &l) == nil && l.Msg == "drain finished" {
			return l.Time, l.Outcome
		}
	}
	return time.Time{}, "no drain finished line"
}

// drainPhases reads the manager's JSON log lines "drain phase ended" from path: "quiet 13.01s: no new
// connection ...", one per phase, in order (elapsed since the drain's trigger).
func drainPhases(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var l struct {
			Msg     string `json:"msg"`
			Phase   string `json:"phase"`
			Elapsed string `json:"elapsed"`
			Reason  string `json:"reason"`
		}
		if line := sc.Bytes(); len(line) > 0 && line[0] == '{' && json.Unmarshal(line, &l) == nil && l.Msg == "drain phase ended" {
			out = append(out, l.Phase+" "+l.Elapsed+": "+l.Reason)
		}
	}
	return out
}

// procStat is what /proc/PID says about a process.
type procStat struct {
	cpu   time.Duration // utime + stime
	rssKB int64         // VmRSS
	hwmKB int64         // VmHWM (peak RSS)
}

// clockTick is USER_HZ, 100 on every Linux platform Go supports.
const clockTick = 100

// readProc reads /proc/PID/stat and /proc/PID/status.
func readProc(pid int) (procStat, error) {
	var ps procStat
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ps, err
	}
	// The command name (field 2) may hold spaces; the fields after its closing parenthesis are fixed.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return ps, errors.New("malformed /proc stat")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return ps, errors.New("short /proc stat")
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64) // field 14
	st, _ := strconv.ParseInt(f[12], 10, 64) // field 15
	ps.cpu = time.Duration(ut+st) * time.Second / clockTick
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ps, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			ps.rssKB = n
		case "VmHWM":
			ps.hwmKB = n
		}
	}
	return ps, nil
}
