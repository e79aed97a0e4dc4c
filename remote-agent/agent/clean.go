package agent

import (
	"cmp"
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Each build of postern installs its agent (about 12 MB) in a directory of
// its own, DIR/HASH. Installing keeps the agent just installed and the one
// installed before it (a controller one version behind, or a second one,
// goes on without reinstalling) and removes the others; 'postern machine
// clean' removes them all. A directory without its agent is an install under
// way or one that failed: it is removed once it is an hour old.

// Keep is how many agent versions installing leaves on a machine.
const Keep = 2

// staleInstall is when a directory with no agent in it counts as left over.
const staleInstall = time.Hour

// ShellQuote quotes s for a POSIX shell, keeping a leading "~/" as "$HOME/".
func ShellQuote(s string) string { return shellQuote(s) }

// Installed is one agent version's directory found on a machine.
type Installed struct {
	Hash string `json:"hash"`
	// Path is the directory, absolute.
	Path string `json:"path"`
	// KiB is what it holds, as du -k counts it.
	KiB int64 `json:"kib"`
	// Mtime is the directory's modification time (Unix seconds): when the
	// agent was moved in.
	Mtime int64 `json:"mtime"`
	// Complete says the agent's file is there.
	Complete bool `json:"complete"`
	// nanos is the fraction of a second of the modification time.
	nanos int64
}

// Compiled at first use: every start of this binary, the wall's init
// among them, would pay for it otherwise.
var hashName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9a-f]{64}$`) })

// listCommand prints the agents' directory (resolved) and a line per entry
// in it: "agent COMPLETE MTIME KIB NAME"; "none" if the directory is not there.
func listCommand(dir string) string {
	return "cd " + shellQuote(dir) + " 2>/dev/null || { echo none; exit 0; }; pwd -P; " +
		`for h in *; do [ -d "$h" ] || continue; c=0; [ -f "$h/postern" ] && c=1; ` +
		`m=$(stat -c %.9Y "$h" 2>/dev/null || stat -f %Fm "$h" 2>/dev/null || stat -f %m "$h"); k=$(du -sk "$h" | cut -f1); ` +
		`printf 'agent %s %s %s %s\n' "$c" "$m" "$k" "$h"; done`
}

// parseListing reads listCommand's answer, which comes from the remote.
// Entries not named as agents' directories are not postern's and are left
// out (so never removed).
func parseListing(out string) (abs string, found []Installed, err error) {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) == 1 && strings.TrimSpace(lines[0]) == "none" {
		return "", nil, nil
	}
	abs = lines[0]
	if !strings.HasPrefix(abs, "/") || strings.ContainsAny(abs, "\x00\r") {
		return "", nil, fmt.Errorf("unexpected answer listing the agents: %q", firstLine(out))
	}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) != 5 || f[0] != "agent" || !hashName().MatchString(f[4]) {
			continue
		}
		mtime, nanos, err1 := parseMtime(f[2])
		kib, err2 := strconv.ParseInt(f[3], 10, 64)
		if err1 != nil || err2 != nil || (f[1] != "0" && f[1] != "1") {
			continue
		}
		found = append(found, Installed{Hash: f[4], Path: strings.TrimRight(abs, "/") + "/" + f[4], KiB: kib, Mtime: mtime, nanos: nanos, Complete: f[1] == "1"})
	}
	return abs, found, nil
}

// parseMtime reads a modification time as stat prints it: Unix seconds,
// with a fraction where the system keeps one (GNU %.9Y, BSD %Fm). Installs
// a second apart or less are told apart by the fraction.
func parseMtime(s string) (sec, nanos int64, err error) {
	whole, frac, _ := strings.Cut(s, ".")
	if sec, err = strconv.ParseInt(whole, 10, 64); err != nil {
		return 0, 0, err
	}
	if frac == "" {
		return sec, 0, nil
	}
	if len(frac) > 9 {
		frac = frac[:9]
	}
	frac += strings.Repeat("0", 9-len(frac))
	if nanos, err = strconv.ParseInt(frac, 10, 64); err != nil || nanos < 0 {
		return 0, 0, fmt.Errorf("bad fraction in %q", s)
	}
	return sec, nanos, nil
}

// ListInstalled lists the agent versions under dir ("" is DefaultDir) on
// the machine t reaches, newest first.
func ListInstalled(ctx context.Context, t Transport, dir string) ([]Installed, error) {
	if dir == "" {
		dir = DefaultDir
	}
	out, err := t.Output(ctx, listCommand(strings.TrimRight(dir, "/")))
	if err != nil {
		return nil, fmt.Errorf("list the agents in %s: %w", dir, err)
	}
	_, found, err := parseListing(string(out))
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(found, func(a, b Installed) int {
		if c := cmp.Compare(b.Mtime, a.Mtime); c != 0 {
			return c
		}
		return cmp.Compare(b.nanos, a.nanos)
	})
	return found, nil
}

// RemoveInstalled removes agent directories ListInstalled found.
func RemoveInstalled(ctx context.Context, t Transport, found []Installed) error {
	if len(found) == 0 {
		return nil
	}
	args := make([]string, 0, len(found))
	for _, in := range found {
		if !hashName().MatchString(in.Hash) || !strings.HasSuffix(in.Path, "/"+in.Hash) || !strings.HasPrefix(in.Path, "/") {
			return fmt.Errorf("refusing to remove %q: not an agent's directory", in.Path)
		}
		args = append(args, shellQuote(in.Path))
	}
	if _, err := t.Output(ctx, "rm -rf -- "+strings.Join(args, " ")); err != nil {
		return fmt.Errorf("remove old agents: %w", err)
	}
	return nil
}

// toPrune chooses, of what is installed, what installing current removes:
// every version but current and the newest Keep-1 other complete ones, and
// directories without their agent once they are staleInstall old.
func toPrune(found []Installed, current string, now time.Time) []Installed {
	var out []Installed
	kept := 1
	for _, in := range found { // newest first
		switch {
		case in.Hash == current:
		case !in.Complete:
			if now.Sub(time.Unix(in.Mtime, 0)) > staleInstall {
				out = append(out, in)
			}
		case kept < Keep:
			kept++
		default:
			out = append(out, in)
		}
	}
	return out
}

// prune removes the versions installing in.Hash leaves behind, and tells
// in.Removed of each. It is best effort: a failure is told, not returned.
func prune(ctx context.Context, t Transport, in Install) {
	found, err := ListInstalled(ctx, t, in.Dir)
	if err == nil {
		gone := toPrune(found, in.Hash, time.Now())
		if err = RemoveInstalled(ctx, t, gone); err == nil && in.Removed != nil {
			for _, g := range gone {
				in.Removed(g)
			}
		}
	}
	if err != nil && in.Warn != nil {
		in.Warn(fmt.Sprintf("old agents were not removed: %v", err))
	}
}
